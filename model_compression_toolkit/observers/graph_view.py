"""A stage's graph in the Graphs dashboard: what a clicked node says, and the error colours.

The node panel lists a node's attributes in reverse alphabetical order, so the keys are
grouped to read top down::

    » in short          one line in words: bits, threshold, step, what rounds to zero,
                        the damage its quantizers do to the model output
    similarity.*        the error measures (quantized graph, with the similarity analysis)
    quantization.*      the configuration: numbers as numbers, one attribute each
    <framework>.*       the framework's own layer attributes (``pytorch.inplace``,
                        ``keras.threshold``), kept apart from the quantization
    memory.*            bytes at the stage's bit-widths
    layer.*             kind, origin, weight shapes, fused activation

"Color: Device" of a graph coloured by error: TensorBoard gives the n-th device it meets
its n-th palette colour, so one ``legend_<class>`` node per class comes first in the
graph, at its top level (under the ``Resources`` tag TensorBoard meets the devices
breadth-first, a group's nodes after every top-level layer; layers named by integers,
the children of an ``nn.Sequential``, are shown as ``[5]``: TensorBoard would meet them
before anything else) and pins the palette, the same under both tags: low error blue-grey, no quantizer pale green, inherited error pale cyan, medium peach, high
salmon. The device names are the legend, in words, ending in the number of layers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from model_compression_toolkit.core.graph import VALUE_PRESERVING, Graph, Node
from model_compression_toolkit.core.info import float_layers
from model_compression_toolkit.core.memory import NodeMemory
from model_compression_toolkit.core.numbers import finite_or_none
from model_compression_toolkit.core.similarity.causes import CANDIDATE_DB, CAUSE_DB, QuantizerEntry
from model_compression_toolkit.core.similarity.plan import local_group
from model_compression_toolkit.core.similarity.report import LayerSimilarity, SimilarityReport
from model_compression_toolkit.observers.protos import IN_SHORT, device_name

LEGEND_GROUP = "legend"  # no space: TensorBoard puts node names in CSS selectors unescaped
# palette order: TensorBoard colours the n-th device with HUES[n] = 220, 100, 180, 40, 20
ERROR_LEGEND = (
    ("low", f"low own error - output SQNR {CANDIDATE_DB:g} dB or more"),
    ("none", "no quantizer or not compared"),
    ("inherited", "inherited error only - damaged by an earlier cause"),
    ("medium", f"medium own error - output SQNR {CAUSE_DB:g} to {CANDIDATE_DB:g} dB"),
    ("high", f"high own error - output SQNR under {CAUSE_DB:g} dB"),
)
METRICS = (
    "cosine_mean", "cosine_min", "sqnr_db", "mse", "local_sqnr_db", "local_mse", "clipped_percent",
    "channel_sqnr_median_db", "channel_sqnr_worst_db", "high_error_channels_percent", "zero_rounded_percent",
    "channel_range_spread", "output_sqnr_db",
)  # fmt: skip
WEIGHT_METRICS = ("sqnr_db", "channel_sqnr_worst_db", "zero_rounded_percent", "lost_input_channels_percent",
                  "output_sqnr_db")  # fmt: skip


def _g(value: float) -> str:
    return f"{value:.4g}"


def _scalar(values: Any) -> float:
    return float(np.max(np.abs(np.asarray(values, dtype=np.float64))))


# ---------------------------------------------------------------- attributes
def quantization_attrs(node: Node, graph: Graph, kept_float: Mapping[str, str]) -> dict[str, Any]:
    """The node's quantization at this stage, one number per attribute."""
    q, attrs = node.quant, {}
    for wname, cfg in q.weights.items():
        key = f"quantization.weights.{wname}"
        attrs.update({f"{key}.n_bits": cfg.n_bits, f"{key}.per_channel": cfg.per_channel,
                      f"{key}.method": cfg.method.value, f"{key}.error_method": cfg.error_method.value})  # fmt: skip
        for name in ("threshold", "range_min", "range_max"):
            values = getattr(cfg, name)
            if values is not None:
                arr = np.asarray(values, dtype=np.float64).ravel()
                if arr.size == 1:
                    attrs[f"{key}.{name}"] = float(arr[0])
                else:
                    attrs[f"{key}.{name}_min"], attrs[f"{key}.{name}_max"] = float(arr.min()), float(arr.max())
    if q.weights_float_reason and node.weights:
        attrs["quantization.weights.float_reason"] = q.weights_float_reason
    act = q.activation
    if act is not None:
        attrs.update({"quantization.activation.n_bits": act.n_bits, "quantization.activation.method": act.method.value,
                      "quantization.activation.error_method": act.error_method.value})  # fmt: skip
        if act.signed is not None:
            attrs["quantization.activation.signed"] = act.signed
        for name in ("threshold", "range_min", "range_max"):
            if getattr(act, name) is not None:
                attrs[f"quantization.activation.{name}"] = float(getattr(act, name))
        if act.grid is not None:
            attrs["quantization.activation.scale"] = _scalar(act.grid.scale)
            attrs["quantization.activation.zero_point"] = int(round(_scalar(act.grid.zero_point)))
    elif q.fused_into:
        attrs["quantization.activation.quantized_after"] = q.fused_into
    elif node.name in kept_float:
        attrs["quantization.float_reason"] = kept_float[node.name]
    elif q.activation_float_reason:
        attrs["quantization.activation.not_quantized"] = q.activation_float_reason
    bits = [f"W{c.n_bits}" for c in q.weights.values()] or (["W float"] if node.weights else [])
    bits += [f"A{act.n_bits}"] if act else ["A float"] if node.name in kept_float else []
    attrs["quantization.bits"] = " ".join(bits) or "none"
    return attrs


def node_attrs(node: Node, graph: Graph, memory: NodeMemory | None, kept_float: Mapping[str, str]) -> dict[str, Any]:
    """Every attribute of a node but the similarity ones, grouped by prefix (module doc)."""
    attrs: dict[str, Any] = {f"{graph.framework}.{k}": v for k, v in node.attrs.items()}
    attrs["layer.kind"] = node.kind.value
    attrs["layer.type"] = node.layer_type
    if node.fused_activation:
        attrs["layer.fused_activation"] = node.fused_activation
    if node.origin != [node.name]:
        attrs["layer.origin"] = list(node.origin)
    for wname, w in node.weights.items():
        attrs[f"layer.weights.{wname}.shape"] = list(w.shape)
    attrs.update(quantization_attrs(node, graph, kept_float))
    if memory is not None:
        for name in ("weights_bytes", "activation_bytes", "total_bytes"):
            value = getattr(memory, name)
            attrs[f"memory.{name}"] = int(value) if float(value).is_integer() else float(value)
    return attrs


def in_short(node: Node, graph: Graph, kept_float: Mapping[str, str], similarity: _Similarity | None = None) -> str:
    """The node's quantization, and what it does, in one plain-language line."""
    q, parts = node.quant, []
    if q.weights:
        cfg = next(iter(q.weights.values()))
        parts.append(f"W{cfg.n_bits} " + ("per channel" if cfg.per_channel else "per tensor"))
    act = q.activation
    if act is not None:
        text = f"A{act.n_bits}" + ("" if act.signed is None else " signed" if act.signed else " unsigned")
        if act.grid is not None:
            step = _scalar(act.grid.scale)
            if act.threshold is not None:
                text += f", threshold {_g(act.threshold)}"
            elif act.range_min is not None:
                text += f", range {_g(act.range_min)} to {_g(act.range_max)}"
            text += f", step {_g(step)}"
        parts.append(text)
    elif q.fused_into:
        parts.append(f"output quantized after layer {q.fused_into}")
    elif node.name in kept_float:
        parts.append(f"kept in float ({kept_float[node.name]})")
    elif node.kind in VALUE_PRESERVING:
        parts.append("no quantizer of its own: it moves its input's quantized values")
    elif not q.weights:
        parts.append("not quantized" + (f" ({q.activation_float_reason})" if q.activation_float_reason else ""))
    line = ", ".join(parts)
    if similarity is not None:
        line += similarity.words(node, graph)
    return line


# ---------------------------------------------------------------- similarity
class _Similarity:
    """A similarity report, looked up by node: its measures, words and error colour."""

    def __init__(self, report: SimilarityReport, graph: Graph) -> None:
        self.report = report
        self.layers = {layer.name: layer for layer in report.layers}
        self.entries: dict[tuple[str, str], QuantizerEntry] = {(q.name, q.kind): q for q in report.quantizers}
        self.point_of: dict[str, str] = {}  # a fused layer -> the compare point that judges it
        for name in self.layers:
            if name in graph:
                for member in local_group(graph, graph.node(name)):
                    self.point_of.setdefault(member.name, name)

    def layer_of(self, name: str) -> LayerSimilarity | None:
        return self.layers.get(self.point_of.get(name, name))

    def attrs(self, name: str) -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        layer = self.layers.get(name)
        if layer is not None:
            for metric in METRICS:
                value = finite_or_none(getattr(layer, metric))
                if value is not None:
                    attrs[f"similarity.{metric}"] = value
            attrs["similarity.own_error"] = layer.damage_class
            attrs["similarity.accumulated_error"] = layer.accumulated_class
            if layer.role:
                attrs["similarity.role"] = layer.role
        entry = self.entries.get((name, "weights"))
        if entry is not None:
            for metric in WEIGHT_METRICS:
                value = finite_or_none(getattr(entry, metric))
                if value is not None:
                    attrs[f"similarity.weights.{metric}"] = value
            if entry.cause:
                attrs["similarity.weights.role"] = "cause"
        return attrs

    def words(self, node: Node, graph: Graph) -> str:
        """``; 88 % of non-zero values round to 0; own error at the output high (0.8 dB): a cause``."""
        out = []
        activation = self.entries.get((node.name, "activation"))
        if activation is not None and (activation.zero_rounded_percent or 0) >= 1:
            out.append(f"{activation.zero_rounded_percent:.0f} % of non-zero values round to 0")
        if activation is not None and (activation.clipped_percent or 0) >= 0.1:
            out.append(f"{activation.clipped_percent:.1f} % clipped")
        weights = self.entries.get((node.name, "weights"))
        if weights is not None and weights.lost_input_channels_percent:
            out.append(f"its weights lose {weights.lost_input_channels_percent:.0f} % of input channels")
        layer = self.layer_of(node.name)
        if layer is not None and node.quant.is_quantized:
            own = [e for kind in ("weights", "activation") if (e := self.entries.get((node.name, kind))) is not None]
            impacts = [v for e in own if (v := finite_or_none(e.output_sqnr_db)) is not None]
            impact = min(impacts) if impacts else (layer.output_sqnr_db if not own else None)
            measured = f" (output SQNR {impact:.1f} dB with its quantizers alone)" if impact is not None else ""
            cls = self.error_class(node)
            text = f"own error at the output {'low' if cls == 'inherited' else cls}{measured}"
            if any(e.cause for e in own) or (not own and layer.role == "cause"):
                text += ": a cause"
            out.append(text)
        if layer is not None and layer.role == "inherits":
            out.append(f"inherits the damage of an earlier cause (accumulated SQNR {layer.sqnr_db:.1f} dB)")
        return "".join(f"; {part}" for part in out)

    def error_class(self, node: Node) -> str:
        """The node's colour class: ``high``, ``medium``, ``low``, ``inherited`` or ``none``.

        Judged on the node's own quantizers only (its weights, its output), each by what it
        alone does to the model output: a conv is not blamed for the grid of the ReLU fused
        after it, nor a ReLU for the conv's weights. A quantized node whose own quantizers
        are harmless but whose output carries an earlier cause's damage is ``inherited``.
        """
        layer = self.layer_of(node.name)
        if layer is None or not node.quant.is_quantized:
            return "none"
        own = [e for kind in ("weights", "activation") if (e := self.entries.get((node.name, kind))) is not None]
        if not own:  # a report without quantizer entries: the compare point's class
            worst = layer.damage_class
        else:
            worst = max((_entry_class(e) for e in own), key=_SEVERITY.index)
        if worst == "low" and layer.role in ("inherits", "cause"):
            return "inherited"
        return worst


_SEVERITY = ("low", "medium", "high")


def _entry_class(entry: QuantizerEntry) -> str:
    """One quantizer's class: ``high`` for a cause, ``medium`` when its output impact is under
    `CANDIDATE_DB`, else ``low`` (its own error too small to be worth measuring)."""
    if entry.cause:
        return "high"
    impact = finite_or_none(entry.output_sqnr_db)
    return "medium" if impact is not None and impact < CANDIDATE_DB else "low"


def error_devices(graph: Graph, report: SimilarityReport) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """(node -> device, legend nodes (name, device) in palette order) for "Color: Device"."""
    sim = _Similarity(report, graph)
    classes = {node.name: sim.error_class(node) for node in graph.nodes()}
    counts = {cls: sum(1 for c in classes.values() if c == cls) for cls, _ in ERROR_LEGEND}
    device = {cls: device_name(f"{text} - layers", counts[cls]) for cls, text in ERROR_LEGEND}
    legend = [(f"{LEGEND_GROUP}_{cls}", device[cls]) for cls, _ in ERROR_LEGEND]
    return {name: device[cls] for name, cls in classes.items()}, legend


def graph_attrs(
    graph: Graph,
    memory: Mapping[str, NodeMemory],
    report: SimilarityReport | None = None,
    kept: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Node name -> every attribute the node panel shows, ``» in short`` first.
    ``kept``: ``float_layers(graph)`` when the caller has it."""
    kept = float_layers(graph) if kept is None else kept
    sim = _Similarity(report, graph) if report is not None else None
    out = {}
    for node in graph.nodes():
        attrs = node_attrs(node, graph, memory.get(node.name), kept)
        if sim is not None:
            attrs.update(sim.attrs(node.name))
        attrs[IN_SHORT] = in_short(node, graph, kept, sim)
        out[node.name] = attrs
    return out
