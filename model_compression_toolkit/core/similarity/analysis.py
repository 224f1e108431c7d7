"""The similarity analysis itself: float outputs (kept or computed), the quantized and
local models on the same samples, chunk by chunk, metrics as the outputs arrive.

``float chunks (reference) -> quantized model --tap--> accumulator <--tap-- local model``
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from model_compression_toolkit.core.calibration.bins import AnchoredBins
from model_compression_toolkit.core.calibration.quantizers import fake_quant
from model_compression_toolkit.core.calibration.statistics import NodeStatistics
from model_compression_toolkit.core.graph import Graph, Node
from model_compression_toolkit.core.quant_config import QuantGrid
from model_compression_toolkit.core.similarity.causes import (
    ACTIVATION,
    ImpactRuns,
    QuantizerEntry,
    input_range_spreads,
    measure_impacts,
    weight_entries,
)
from model_compression_toolkit.core.similarity.channels import ChannelSums
from model_compression_toolkit.core.similarity.fix import FixMenu, suggest_fix
from model_compression_toolkit.core.similarity.metrics import MetricSums, SampleMetrics, blocks, sample_rows
from model_compression_toolkit.core.similarity.plan import LOCAL_SUFFIX, ComparePoint, Comparison, local_group
from model_compression_toolkit.core.similarity.probe import ComparedProbe, joined
from model_compression_toolkit.core.similarity.reference import FloatModel, float_chunks
from model_compression_toolkit.core.similarity.report import LayerSimilarity, SimilarityReport, error_class

ProgressCallback = Callable[[str, int, "int | None", str], None]  # (step, done, total, unit)


def _no_progress(step: str, done: int, total: int | None, unit: str) -> None:
    pass


@dataclass
class PairHistogram:
    """Float and quantized values of one compare point on the same bins."""

    edges: np.ndarray
    float_counts: np.ndarray
    quantized_counts: np.ndarray


@dataclass
class SimilarityResult:
    """The report plus what only the TensorBoard view needs."""

    report: SimilarityReport
    histograms: dict[str, PairHistogram] = field(default_factory=dict)


class _PointAccumulator:
    """Reduces one compare point's outputs, chunk by chunk, to metrics and histograms.

    The histograms use `AnchoredBins`. With ``float_histogram`` (counts and edges of the
    float output on exactly the compared samples, kept by the statistics pass) the float
    side is that histogram summed onto coarser bins: only quantized values are binned here.
    """

    def __init__(
        self,
        point: ComparePoint,
        node: Node,
        stats: NodeStatistics | None,
        float_histogram: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.point, self.node = point, node
        self.accumulated: list[SampleMetrics] = []
        self.local: list[SampleMetrics] = []
        act = node.quant.activation
        self.grid = act.grid if act is not None else None
        self.range = None
        if self.grid is not None:
            s, zp = float(np.max(self.grid.scale)), float(np.max(self.grid.zero_point))
            self.range = ((self.grid.qmin - zp) * s, (self.grid.qmax - zp) * s, s)
        self.clipped = 0
        self.total = 0
        # the activation quantizer alone, on the float output: the error one channel cannot hide
        self.alone = ChannelSums(node.channel_axis) if self.grid is not None else None
        self.bins: AnchoredBins | None = None
        self.float_known = float_histogram is not None
        if float_histogram is not None:
            counts, edges = float_histogram
            fine, used = AnchoredBins.of_edges(edges), np.flatnonzero(counts)
            lo, hi = (edges[used[0]], edges[used[-1] + 1]) if used.size else (0.0, 0.0)
            self.hist_float = self._set_bins(float(lo), float(hi), finest=fine.e).sum_from(counts, fine)
        elif stats is not None:
            self._set_bins(stats.min, stats.max)

    def _set_bins(self, lo: float, hi: float, finest: int | None = None) -> AnchoredBins:
        if self.range is not None:
            lo, hi = min(lo, self.range[0]), max(hi, self.range[1])
        self.bins = bins = AnchoredBins.covering(lo, hi, finest)
        self.hist_float = np.zeros(bins.count, np.int64)
        self.hist_quant = np.zeros(bins.count, np.int64)
        return bins

    def _counts(self, values: np.ndarray, finite: bool) -> np.ndarray:
        """Bin counts of one block's finite values (``finite``: the caller knows they all are)."""
        if not finite and not np.isfinite(values).all():
            values = values[np.isfinite(values)]
        assert self.bins is not None  # set before the first block (`update`)
        return self.bins.counts(values)

    def _check(self, reference: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ref, out = sample_rows(reference), sample_rows(other)
        if ref.shape != out.shape:
            raise ValueError(
                f"{self.point.name!r}: cannot compare outputs of shapes {np.shape(reference)} and {np.shape(other)}"
            )
        return ref, out

    def update(self, reference: np.ndarray, quantized: np.ndarray, alone: bool = True) -> None:
        """Reduce one chunk of samples of the quantized model, block by block: accumulated
        error, both histograms, clipped values; and with ``alone``, the activation quantizer's
        own error on the chunk's float output (the impact samples': `analyze`)."""
        ref, q = self._check(reference, quantized)
        if self.bins is None:
            finite = reference[np.isfinite(reference)]
            lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
            self._set_bins(lo, hi)
        sums = MetricSums(*ref.shape)
        for i, cols in blocks(ref):
            r, qb = ref[i, cols], q[i, cols]
            finite = sums.add(i, r, qb)
            if not self.float_known:
                self.hist_float += self._counts(r, finite)
            self.hist_quant += self._counts(qb, finite)
            if self.range is not None:
                lo, hi, step = self.range
                self.clipped += int(np.count_nonzero((r < lo - step / 2) | (r > hi + step / 2)))
        self.accumulated.append(sums.result())
        self.total += ref.size
        if alone and self.alone is not None and self.grid is not None:
            quantize = _block_quantizer(self.grid, np.asarray(reference).dtype)
            if quantize is not None:
                self.alone.add_quantized(reference, quantize)
            else:
                self.alone.add(reference, fake_quant(reference, self.grid))

    def update_local(self, reference: np.ndarray, local: np.ndarray) -> None:
        """Reduce one chunk of samples of the local model: the local error."""
        ref, out = self._check(reference, local)
        sums = MetricSums(*ref.shape)
        for i, cols in blocks(ref):
            sums.add(i, ref[i, cols], out[i, cols])
        self.local.append(sums.result())

    def result(self, layer_type: str) -> LayerSimilarity:
        acc = SampleMetrics.concat(self.accumulated)
        node, p = self.node, self.point
        weights = list(node.quant.weights.values())
        layer = LayerSimilarity(
            name=p.name,
            layer_type=layer_type,
            position=p.position,
            is_output=p.is_output,
            cosine_mean=float(acc.cosine.mean()),
            cosine_min=float(acc.cosine.min()),
            worst_sample=int(acc.cosine.argmin()),
            sqnr_db=float(acc.sqnr_db.mean()),
            mse=float(acc.mse.mean()),
            max_abs_error=float(acc.max_abs.max()),
            weights_bits=weights[0].n_bits if weights else None,
            activation_bits=node.quant.activation.n_bits if node.quant.activation else None,
            weights_threshold_max=_max_threshold(weights),
            activation_threshold=_activation_threshold(node),
            clipped_percent=100.0 * self.clipped / self.total
            if self.range is not None and self.total
            else None,
            cosine_per_sample=[float(c) for c in acc.cosine],
        )
        if self.local:
            loc = SampleMetrics.concat(self.local)
            layer.local_cosine_mean = float(loc.cosine.mean())
            layer.local_sqnr_db = float(loc.sqnr_db.mean())
            layer.local_mse = float(loc.mse.mean())
            layer.local_max_abs_error = float(loc.max_abs.max())
        entry = self.entry(layer_type)
        if entry is not None:
            layer.channel_sqnr_median_db = entry.channel_sqnr_median_db
            layer.channel_sqnr_worst_db = entry.channel_sqnr_worst_db
            layer.high_error_channels_percent = entry.high_error_channels_percent
            layer.zero_rounded_percent = entry.zero_rounded_percent
            layer.channel_range_spread = entry.channel_range_spread
        return layer

    def entry(self, layer_type: str) -> QuantizerEntry | None:
        """The activation quantizer of this point as a cause candidate (None without one)."""
        act = self.node.quant.activation
        if self.alone is None or self.alone.signal is None or act is None:
            return None
        clipped = 100.0 * self.clipped / self.total if self.total else None
        return QuantizerEntry.of(
            self.point.name, ACTIVATION, layer_type, act.n_bits, self.alone.result(), clipped
        )


def _block_quantizer(grid: QuantGrid, dtype: np.dtype) -> Callable[[np.ndarray], np.ndarray] | None:
    """``fake_quant`` of a tensor of ``dtype`` on a per-tensor ``grid``, for the float64
    blocks of `ChannelSums.add_quantized`: the same values as ``fake_quant(x, grid)``.

    An integer zero point moves into the integer range, ``clip(round(t) + zp, qmin, qmax)
    - zp == clip(round(t), qmin - zp, qmax - zp)``, which spares two passes. None for a
    per-channel grid or a zero point that is not an integer.
    """
    scale, zero_point = np.asarray(grid.scale), np.asarray(grid.zero_point)
    if scale.size != 1 or zero_point.size != 1:
        return None
    zp = float(zero_point.reshape(()))
    if not np.isfinite(zp) or zp != round(zp):
        return None
    shifted = QuantGrid(scale.reshape(()), np.zeros(()), int(grid.qmin - zp), int(grid.qmax - zp))
    return lambda x: fake_quant(x, shifted).astype(dtype, copy=False)


def _max_threshold(weights) -> float | None:
    values = [np.max(np.abs(w.threshold)) for w in weights if w.threshold is not None]
    values += [
        max(np.max(np.abs(w.range_min)), np.max(np.abs(w.range_max)))
        for w in weights
        if w.range_min is not None
    ]
    return float(max(values)) if values else None


def _activation_threshold(node: Node) -> float | None:
    act = node.quant.activation
    if act is None:
        return None
    if act.threshold is not None:
        return float(act.threshold)
    if act.range_min is not None and act.range_max is not None:
        return float(max(abs(act.range_min), abs(act.range_max)))
    return None


class _Router:
    """The tap of the quantized (or the local) model: hands each compare point's output,
    as the model produces it, to its accumulator with the float output of the same chunk."""

    def __init__(self, accumulators: list[_PointAccumulator], local: bool) -> None:
        self.local = local
        self.by_name: dict[str, _PointAccumulator] = {}
        for acc in accumulators:
            name = acc.point.local if local else acc.point.name
            if name is not None:  # a point without a local error is not in the local model
                self.by_name[name] = acc
        self.float_outputs: Mapping[str, np.ndarray] = {}  # of the chunk being run
        self.record: set[str] = set()  # the points whose output of this chunk is kept (copied)
        self.recorded: dict[str, np.ndarray] = {}
        self.alone = True  # whether the chunk measures each quantizer's own error too

    def __call__(self, name: str, value: np.ndarray) -> None:
        if name in self.record:
            self.recorded[name] = np.array(value)
        acc = self.by_name[name]
        reference = self.float_outputs[acc.point.reference]
        if self.local:
            acc.update_local(reference, value)
        else:
            acc.update(reference, value, self.alone)


def analyze(
    float_model: FloatModel,
    q_graph: Graph,
    samples: int,
    memory_cap: int,
    stats: Mapping[str, NodeStatistics] | None = None,
    weights: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    q_model: Any = None,
    impact_samples: int = 8,
    max_impact_quantizers: int = 12,
    l_p_value: float = 2.0,
    progress: ProgressCallback | None = None,
    menu: FixMenu | None = None,
) -> SimilarityResult:
    """Compare the float model (its graph before preparation) with the quantized one, and
    find the quantizers that damage the output on their own (`core.similarity.causes`).

    Args:
        float_model: the float side: its graph, the backend, the data (the first
            ``samples`` samples are used) and the outputs the statistics pass kept (the
            float model runs only when they do not hold what the comparison reads).
        q_graph: the quantized graph (thresholds selected).
        samples: how many representative samples are compared.
        memory_cap: bytes of layer outputs held at once.
        stats: collected statistics by node, to put the histograms on the right range.
        weights: quantized weights already computed (node -> weight name -> array).
        q_model: the model built from ``q_graph`` with ``weights``, whose layers the
            analysis's quantized model reuses where the backend can (`Backend.build`).
        impact_samples: the first samples each quantizer's output impact, its own error
            (whole, per channel, values rounded to zero) and each layer's local error are
            measured on (whole chunks; the accumulated error is on every compared sample).
        max_impact_quantizers: how many quantizers at most get their impact measured
            (those whose own error is not negligible, the largest first).
        l_p_value: the p of the ``LP`` error method, for the grids the suggested fix tries.
        progress: called as ``progress(step, done, total, unit)`` as the comparison goes
            (``similarity``: samples) and as impacts are measured (``output impact``).
        menu: what the suggested fix may use (the target's bits, integer only); None: any.
    """
    progress = progress or _no_progress
    backend, reference = float_model.backend, float_model.reference
    plan = Comparison.of(float_model.graph, q_graph)
    points, local = plan.points, plan.local
    chunks = float_chunks(float_model, plan, samples, memory_cap)
    float_histograms = reference.histograms_of(samples) if reference is not None else {}
    accumulators = [
        _PointAccumulator(p, q_graph.node(p.name), (stats or {}).get(p.name), float_histograms.get(p.name))
        for p in points
    ]
    # Each output is reduced as its model produces it (the models' taps) and let go, so no
    # model's outputs are ever held together. Reducing on another thread while the model
    # runs would gain nothing: the model already keeps every core busy.
    q_tap, local_tap = _Router(accumulators, local=False), _Router(accumulators, local=True)
    quantized_model = backend.build(
        q_graph, quantized=True, extra_outputs=list(q_tap.by_name), weights=weights, tap=q_tap, share=q_model
    )
    local_model = None
    if local.graph.outputs:
        local_weights = None if weights is None else {n + LOCAL_SUFFIX: weights[n] for n in weights}
        local_model = backend.build(
            local.graph,
            quantized=True,
            extra_outputs=list(local_tap.by_name),
            weights=local_weights,
            tap=local_tap,
        )
    # the model outputs are compare points: their values on the impact chunks are kept, so
    # that the probe need not run the quantized model again (`probe.ComparedProbe`)
    outputs = [name for name, _ in q_graph.outputs]
    q_outputs: list[list[np.ndarray]] | None = [] if set(outputs) <= set(q_tap.by_name) else None
    # ... and the float outputs beside them: the probe measures the quantized model with no run
    reference_of = {acc.point.name: acc.point.reference for acc in accumulators}
    f_outputs: list[list[np.ndarray]] | None = [] if all(n in reference_of for n in outputs) else None
    seen = 0
    kept: list[list[np.ndarray]] = []  # the impact samples' inputs, in whole chunks
    for chunk, f_out in chunks:
        impact_chunk = seen < impact_samples
        if impact_chunk:
            kept.append([np.array(a) for a in chunk])
            if f_outputs is not None:
                f_outputs.append([np.array(f_out[reference_of[name]]) for name in outputs])
        q_tap.record = set(outputs) if impact_chunk and q_outputs is not None else set()
        # a quantizer's own error (its channels, its zeros) is a property of its grid: measured
        # on the impact samples, where the impacts it selects are measured, not on every one
        q_tap.alone = impact_chunk or seen == 0
        q_tap.float_outputs = local_tap.float_outputs = f_out
        backend.forward(quantized_model, chunk)
        if q_tap.record and q_outputs is not None:
            q_outputs.append([q_tap.recorded[name] for name in outputs])
            q_tap.recorded = {}
        if local_model is not None and q_tap.alone:  # a layer's own error, too, on the impact samples
            feeds = local.inputs(chunk, f_out)
            backend.forward(local_model, feeds)
            del feeds
        seen += len(chunk[0])
        q_tap.float_outputs = local_tap.float_outputs = {}
        del f_out
        progress("similarity", seen, samples, "samples")
    layers = [acc.result(q_graph.node(acc.point.name).layer_type) for acc in accumulators]
    entries = [
        e for acc in accumulators if (e := acc.entry(q_graph.node(acc.point.name).layer_type)) is not None
    ]
    spreads = input_range_spreads(
        q_graph, {n: max(abs(st.min), abs(st.max)) for n, st in (stats or {}).items()}
    )
    for entry in entries:
        entry.input_range_spread = spreads.get(entry.name)
    entries += weight_entries(q_graph, weights)
    # the pieces of a batch the memory cap cut, joined again: each variant runs once per batch
    batch = max((len(a) for a in float_model.data.first if np.ndim(a)), default=0)
    f_outputs = joined(kept, f_outputs, batch)[1]
    kept, q_outputs = joined(kept, q_outputs, batch)
    probe = (
        ComparedProbe(backend, q_graph, kept, memory_cap, q_outputs, f_outputs) if entries and kept else None
    )
    runs = (
        measure_impacts(probe, entries, max_impact_quantizers, progress)
        if probe is not None
        else ImpactRuns()
    )
    fix = suggest_fix(entries, q_graph, probe, l_p_value, stats, menu)
    _set_roles(layers, entries, q_graph)
    histograms = {
        acc.point.name: PairHistogram(acc.bins.edges(), acc.hist_float, acc.hist_quant)
        for acc in accumulators
        if acc.bins is not None
    }
    report = SimilarityReport(
        seen, layers, entries, fix, probe.samples if probe is not None else 0, runs.quantized_db, runs.skipped,
        runs.read_as,
    )  # fmt: skip
    return SimilarityResult(report, histograms)


def _set_roles(layers: list[LayerSimilarity], entries: list[QuantizerEntry], graph: Graph) -> None:
    """Each layer's own output impact (the worst of its quantizers') and its role: a cause,
    or a damaged layer that inherits the damage of a cause before it."""
    by_node: dict[str, list[QuantizerEntry]] = {}
    for entry in entries:
        by_node.setdefault(entry.name, []).append(entry)
    causes = {e.name for e in entries if e.cause}
    for layer in layers:
        group = [n.name for n in local_group(graph, graph.node(layer.name))]
        own = [e for name in group for e in by_node.get(name, [])]
        measured = [e.output_sqnr_db for e in own if e.output_sqnr_db is not None]
        layer.output_sqnr_db = min(measured) if measured else None
        if any(e.cause for e in own):
            layer.role = "cause"
        elif error_class(layer.sqnr_db) != "low" and causes & graph.ancestors(layer.name):
            layer.role = "inherits"
