"""One JSON file per call for the Quantization dashboard (`tensorboard_plugin`)::

    initial_graph            -> the float model's memory
    after_statistics_coll... -> each layer's channel ranges (the causes' pictures)
    quantized_graph          -> <call folder>/quantization_call.json (when the similarity ran)
    trial_finished           -> kept (small) until tuning has chosen
    tuning_finished          -> quantization_call.json again: the returned trial, with the metric

The file is the page of one call: the model, its settings in words, output SQNR, memory,
float layers, the user's metric (tuning), the verdict in one sentence, each cause with its
evidence in words and its channel ranges, the fix as a runnable snippet with what it costs
and gives, every quantizer's numbers (own SQNR, alone at the output, accumulated) and the
graph with its edges. Every number is the report's own (`SimilarityReport`), unrounded, so a
test can compare the page with ``info.similarity``. Names are written verbatim: showing
them as text is the frontend's job.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from model_compression_toolkit.core.calibration.statistics import outlier_channels
from model_compression_toolkit.core.graph import Graph, Node
from model_compression_toolkit.core.info import float_layers
from model_compression_toolkit.core.memory import FLOAT_BITS, NodeMemory, activation_bits, graph_memory, total
from model_compression_toolkit.core.numbers import json_safe
from model_compression_toolkit.core.preparation import OUTPUT_FLOAT
from model_compression_toolkit.core.similarity.analysis import PairHistogram, SimilarityResult
from model_compression_toolkit.core.similarity.causes import CAUSE_DB, QuantizerEntry
from model_compression_toolkit.core.similarity.report import LayerSimilarity, SimilarityReport
from model_compression_toolkit.core.tuning import TuningResult
from model_compression_toolkit.pipeline.events import StageReport, TrialReport

PLUGIN_FILE = "quantization_call.json"
SCHEMA = 1
MAX_CHANNELS = 512  # channels drawn in a cause's picture, at most
MAX_NAMED = 4  # exceptions named in the settings sentence
MAX_BINS = 64  # a layer's float-vs-quantized histogram: adjacent bins summed down to this many


class PluginFiles:
    """Collects what one call's page needs from the events and writes `PLUGIN_FILE`."""

    def __init__(self) -> None:
        self._float: NodeMemory | None = None
        self._channels: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._page: dict[str, Any] | None = None
        self._trials: dict[int, dict[str, Any]] = {}

    def stage_finished(self, folder: Path, report: StageReport) -> Path | None:
        """Remember the float memory and the channel ranges; write the page at the last stage."""
        if report.name == "initial_graph":
            self._float = total(dict(report.memory))
        if report.statistics:
            self._channels = {
                name: (np.asarray(s.min_per_channel), np.asarray(s.max_per_channel))
                for name, s in report.statistics.items()
                if np.size(s.min_per_channel)
            }
        if report.name != "quantized_graph" or report.similarity is None:
            return None  # nothing to diagnose without the analysis (DebugConfig(analyze_similarity=False))
        self._page = self._summary(folder.name, report.graph, report.memory, report.similarity)
        return write(folder, self._page)

    def trial_finished(self, report: TrialReport) -> None:
        self._trials[report.trial.n] = self._summary("", report.graph, report.memory, report.similarity)

    def tuning_finished(self, folder: Path, result: TuningResult) -> Path | None:
        """The page of the trial tuning returns, with the user's metric."""
        page = self._trials.get(result.best_trial) or self._page
        if page is None:
            return None
        best = result.best
        page = {**page, "call": folder.name}
        page["metric"] = {
            "baseline": result.baseline_score, "score": best.score, "drop": best.drop, "trial": best.n,
            "trials": len(result.trials), "target_met": result.target_met,
            "in_words": f"{best.score:.4f} (float {result.baseline_score:.4f}, drop {result.format_drop(best.drop)}, "
                        f"trial {best.n} of {len(result.trials)})",
        }  # fmt: skip
        return write(folder, page)

    def _summary(
        self, call: str, graph: Graph, memory: Mapping[str, NodeMemory], similarity: SimilarityResult | None
    ) -> dict[str, Any]:
        return call_page(call, graph, memory, similarity, self._float, self._channels)


def write(folder: Path, page: dict[str, Any]) -> Path:
    """``page`` as ``<folder>/quantization_call.json`` (written whole, then renamed into place)."""
    path, partial = folder / PLUGIN_FILE, folder / (PLUGIN_FILE + ".partial")
    try:
        partial.write_text(json.dumps(json_safe(page), indent=1, allow_nan=False), encoding="utf-8")
        partial.replace(path)
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)  # a full disk leaves no half file behind
        raise
    return path


def call_page(
    call: str,
    graph: Graph,
    memory: Mapping[str, NodeMemory],
    similarity: SimilarityResult | None,
    float_memory: NodeMemory | None = None,
    channels: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None,
) -> dict[str, Any]:
    """Everything one call's page shows, as plain values (see the module doc)."""
    report = similarity.report if similarity is not None else None
    histograms = similarity.histograms if similarity is not None else {}
    after = total(dict(memory))
    before = float_memory or total(graph_memory(graph, False))  # a comparison alone: no initial graph
    floats = float_layers(graph)
    quantizers = report.quantizers if report is not None else []
    causes = [q for q in quantizers if q.cause]
    outputs = [layer.sqnr_db for layer in report.layers if layer.is_output] if report is not None else []
    fix = report.suggested_fix() if report is not None else None
    return {
        "schema": SCHEMA,
        "call": call,
        "created": time.time(),
        "model": graph.name,
        "framework": graph.framework,
        "settings": settings_in_words(graph),
        "output_sqnr_db": min(outputs) if outputs else None,
        "memory": {
            "weights_float_bytes": before.weights_bytes,
            "weights_bytes": after.weights_bytes,
            "activation_float_bytes": before.activation_bytes,
            "activation_bytes": after.activation_bytes,
        },
        "float_layers": [{"name": name, "reason": reason} for name, reason in floats.items()],
        "metric": None,
        "verdict": verdict(report),
        "cause_bound_db": CAUSE_DB,
        "causes": [_cause(q, graph, channels or {}) for q in causes],
        "fix": None
        if not fix
        else {
            "code": fix.code(),
            "effects": fix.effects(),
            "spread": fix.spread,
            "restores": fix.restores,
            "output_sqnr_db_before": fix.output_sqnr_db_before,
            "output_sqnr_db_after": fix.output_sqnr_db_after,
        },
        "quantizers": [
            _quantizer(q, graph, report) for q in sorted(quantizers, key=lambda q: _position(graph, q.name))
        ],
        "graph": _graph(graph, quantizers, report, histograms),
    }


def settings_in_words(graph: Graph) -> str:
    """``"8-bit weights, 8-bit activations; conv2 weights at 2 bits; 1 layer kept float (relu2)"``:
    the common bit-widths, then every layer that differs, then the layers whose model
    outputs are handed on unrounded (a target that runs float)."""
    weights = {n.name: cfg.n_bits for n in graph.nodes() for cfg in list(n.quant.weights.values())[:1]}
    act_bits = {n.name: n.quant.activation.n_bits for n in graph.nodes() if n.quant.activation is not None}
    parts, odd = [], []
    for what, bits, own in (("weights", weights, "weights"), ("activations", act_bits, "output")):
        if not bits:
            continue
        common = Counter(bits.values()).most_common(1)[0][0]
        parts.append(f"{common}-bit {what}")
        odd += [f"{name} {own} at {b} bits" for name, b in bits.items() if b != common]
    text = ", ".join(parts) or "nothing quantized"
    if odd:
        text += "; " + _some(odd)
    unrounded = [n.name for n in graph.nodes() if n.quant.activation_float_reason == OUTPUT_FLOAT]
    floats = [name for name in float_layers(graph) if name not in unrounded]
    if floats:
        text += f"; {len(floats)} layer{'s' if len(floats) != 1 else ''} kept float ({_some(floats)})"
    if unrounded:
        text += f"; the model's outputs unrounded ({_some(unrounded)})"
    return text


def _some(items: list[str]) -> str:
    more = len(items) - MAX_NAMED
    return ", ".join(items[:MAX_NAMED]) + (f" and {more} more" if more > 0 else "")


def quantizer_words(q: QuantizerEntry) -> str:
    return f"{q.name} {'output' if q.kind == 'activation' else 'weights'}"


def verdict(report: SimilarityReport | None) -> str:
    """The call's verdict in one sentence."""
    if report is None:
        return "Not analysed: the similarity analysis was off for this call."
    outputs = [layer.sqnr_db for layer in report.layers if layer.is_output]
    at = f"the output keeps {min(outputs):.1f} dB of SQNR" if outputs else "the output was not compared"
    causes = report.causes()
    fix = report.suggested_fix()
    gives = ""
    if fix and fix.output_sqnr_db_after is not None:
        gives = f"; the suggested fix lifts it to {fix.output_sqnr_db_after:.1f} dB"
    if causes:
        named = ", ".join(quantizer_words(q) for q in causes)
        return f"{len(causes)} quantizer{'s' if len(causes) > 1 else ''} damage the output on their own ({named}): {at}{gives}."
    if fix:
        return f"No single quantizer is the cause, the loss is spread over many: {at}{gives}."
    return f"Nothing to fix: no quantizer damages the output on its own, {at}."


def _cause(
    q: QuantizerEntry, graph: Graph, channels: Mapping[str, tuple[np.ndarray, np.ndarray]]
) -> dict[str, Any]:
    picture = _channel_picture(q, graph, channels)
    channel = picture["outliers"][0] if picture and picture["outliers"] else None
    words = []
    if channel is not None:
        ranges = np.asarray(picture["max"]) - np.asarray(picture["min"])
        median = float(np.median(ranges))
        ratio = f" is {ranges[channel] / median:.0f}x the median channel" if median > 0 else " is an outlier"
        rounded = q.zero_rounded_percent
        tail = f": {rounded:.0f} % of its non-zero values round to 0" if rounded else ""
        words.append(f"{quantizer_words(q)}, channel {channel}{ratio}{tail}")
    elif q.kind == "weights":
        words.append(f"{q.name} weights at {q.bits} bits keep {q.sqnr_db:.1f} dB of their own SQNR")
    if q.lost_input_channels_percent:
        words.append(f"{q.lost_input_channels_percent:.0f} % of its input channels round to 0 (lost)")
    if (q.clipped_percent or 0.0) >= 0.1:
        words.append(f"{q.clipped_percent:.1f} % of its values are clipped by its grid")
    said = " ".join(words)
    words += [
        part
        for part in q.evidence().split("; ")
        if part and ("round to 0" not in part or "round to 0" not in said)
    ]
    return {
        "name": q.name, "kind": q.kind, "layer_type": q.layer_type, "bits": q.bits, "rank": q.rank,
        "output_sqnr_db": q.output_sqnr_db, "sqnr_db": q.sqnr_db, "zero_rounded_percent": q.zero_rounded_percent,
        "channel_range_spread": q.channel_range_spread, "channel": channel, "evidence": words, "channels": picture,
    }  # fmt: skip


def _channel_picture(
    q: QuantizerEntry, graph: Graph, channels: Mapping[str, tuple[np.ndarray, np.ndarray]]
) -> dict[str, Any] | None:
    """The channel ranges of a cause: its output channels (from the statistics) or its weights'
    output channels, and the grid's range; outliers widest first."""
    if q.name not in graph:
        return None
    node = graph.node(q.name)
    if q.kind == "activation" and q.name in channels:
        low, high = channels[q.name]
        grid = _activation_grid(node)
        axis = "output channel"
    elif q.kind == "weights" and node.quant.weights:
        wname = next(iter(node.quant.weights))
        w = np.asarray(node.weights[wname], dtype=np.float64)
        axes = node.quant.weights[wname].channel_axes or node.kernel_axes.get(wname, ())
        keep = tuple(a % w.ndim for a in axes)[:1] or (0,)
        rest = tuple(i for i in range(w.ndim) if i not in keep)
        low, high, grid, axis = w.min(axis=rest), w.max(axis=rest), None, "output channel of the weights"
    else:
        return None
    low, high = np.ravel(low)[:MAX_CHANNELS], np.ravel(high)[:MAX_CHANNELS]
    return {
        "axis": axis, "min": [float(v) for v in low], "max": [float(v) for v in high], "grid": _grid_range(grid),
        "outliers": [int(c) for c in outlier_channels(low, high)],
    }  # fmt: skip


def _position(graph: Graph, name: str) -> int:
    order = {n.name: i for i, n in enumerate(graph.nodes())}
    return order.get(name, len(order))


def _harm(q: QuantizerEntry | None, report: SimilarityReport | None, name: str) -> str:
    """``cause`` (damages the output on its own), ``inherits`` (its layer is damaged, by an
    earlier cause), ``fine``, or ``float`` (no quantizer)."""
    if report is None:
        return "unknown"
    if q is None:
        return "float"
    if q.cause:
        return "cause"
    layer = _layer(report, name)
    return "inherits" if layer is not None and layer.accumulated_class != "low" else "fine"


def _layer(report: SimilarityReport | None, name: str):
    if report is None:
        return None
    try:
        return report.layer(name)
    except KeyError:
        return None


def _compared(graph: Graph, report: SimilarityReport | None, name: str) -> LayerSimilarity | None:
    """The compare point of a layer's output: its own, or that of the activation it is fused
    into (a conv whose output the ReLU after it quantizes)."""
    layer = _layer(report, name)
    if layer is None and name in graph and graph.node(name).quant.fused_into:
        layer = _layer(report, graph.node(name).quant.fused_into)
    return layer


def _quantizer(q: QuantizerEntry, graph: Graph, report: SimilarityReport | None) -> dict[str, Any]:
    layer = _compared(graph, report, q.name)
    return {
        "name": q.name, "kind": q.kind, "layer_type": q.layer_type, "bits": q.bits, "own_db": q.sqnr_db,
        "channel_median_db": q.channel_sqnr_median_db, "output_db": q.output_sqnr_db,
        "accumulated_db": layer.sqnr_db if layer is not None else None, "cause": q.cause, "rank": q.rank,
        "harm": _harm(q, report, q.name),
    }  # fmt: skip


def _graph(
    graph: Graph,
    quantizers: list[QuantizerEntry],
    report: SimilarityReport | None,
    histograms: Mapping[str, PairHistogram],
) -> dict[str, Any]:
    """Nodes in topological order, each with its weights' and its output's harm and its
    output's float-vs-quantized histogram; the edges."""
    entries = {(q.name, q.kind): q for q in quantizers}
    bits = activation_bits(graph)
    nodes = []
    for position, node in enumerate(graph.nodes()):
        weights_bits = next((cfg.n_bits for cfg in node.quant.weights.values()), None)
        act = node.quant.activation
        nodes.append({
            "name": node.name, "layer_type": node.layer_type, "position": position,
            "weights_bits": weights_bits, "activation_bits": None if bits[node.name] == FLOAT_BITS else bits[node.name],
            "weights": _harm(entries.get((node.name, "weights")), report, node.name) if weights_bits else None,
            "output": _harm(entries.get((node.name, "activation")), report, node.name) if act is not None else None,
            "histogram": _histogram(histograms[node.name], _layer(report, node.name), node) if node.name in histograms else None,
        })  # fmt: skip
    edges = list(dict.fromkeys((e.src, e.dst) for e in graph.edges()))
    return {"nodes": nodes, "edges": [list(e) for e in edges]}


def _activation_grid(node: Node):
    return node.quant.activation.grid if node.quant.activation is not None else None


def _grid_range(grid) -> list[float] | None:
    """The values a grid can represent, [lowest, highest] (None: no grid)."""
    if grid is None:
        return None
    scale, zp = float(np.max(grid.scale)), float(np.max(grid.zero_point))
    return [(grid.qmin - zp) * scale, (grid.qmax - zp) * scale]


def _histogram(pair: PairHistogram, layer: LayerSimilarity | None, node: Node) -> dict[str, Any]:
    """A layer's float and quantized output values on the same bins (adjacent bins summed down
    to `MAX_BINS`), its grid's range, and the shares clipped and rounded to zero."""
    edges = np.asarray(pair.edges, dtype=np.float64)
    start = np.arange(0, len(pair.float_counts), max(1, math.ceil(len(pair.float_counts) / MAX_BINS)))
    return {
        "edges": [float(v) for v in np.append(edges[start], edges[-1])],
        "float": [float(v) for v in np.add.reduceat(np.asarray(pair.float_counts, dtype=np.float64), start)],
        "quantized": [
            float(v) for v in np.add.reduceat(np.asarray(pair.quantized_counts, dtype=np.float64), start)
        ],
        "grid": _grid_range(_activation_grid(node)),
        "clipped_percent": layer.clipped_percent if layer is not None else None,
        "zero_rounded_percent": layer.zero_rounded_percent if layer is not None else None,
    }
