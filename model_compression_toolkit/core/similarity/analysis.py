"""Run the similarity analysis: float outputs (kept or computed), the quantized and local
models on the same samples, chunk by chunk, metrics as outputs arrive."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from model_compression_toolkit.core.backend import Backend
from model_compression_toolkit.core.calibration.bins import AnchoredBins
from model_compression_toolkit.core.calibration.statistics import NodeStatistics
from model_compression_toolkit.core.data import RepresentativeData
from model_compression_toolkit.core.graph import Graph, Node
from model_compression_toolkit.core.similarity.metrics import MetricSums, SampleMetrics, blocks, sample_rows
from model_compression_toolkit.core.similarity.plan import (
    LOCAL_SUFFIX,
    Chunk,
    ComparePoint,
    FloatReference,
    LocalGraph,
    chunk_size,
    compare_points,
    float_names,
    local_graph,
    sample_chunks,
)
from model_compression_toolkit.core.similarity.report import LayerSimilarity, SimilarityReport

BYTES_PER_VALUE = 4


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
        self.bins: AnchoredBins | None = None
        self.float_known = float_histogram is not None
        if float_histogram is not None:
            counts, edges = float_histogram
            fine, used = AnchoredBins.of_edges(edges), np.flatnonzero(counts)
            lo, hi = (edges[used[0]], edges[used[-1] + 1]) if used.size else (0.0, 0.0)
            self._set_bins(float(lo), float(hi), finest=fine.e)
            self.hist_float = self.bins.sum_from(counts, fine)
        elif stats is not None:
            self._set_bins(stats.min, stats.max)

    def _set_bins(self, lo: float, hi: float, finest: int | None = None) -> None:
        if self.range is not None:
            lo, hi = min(lo, self.range[0]), max(hi, self.range[1])
        self.bins = AnchoredBins.covering(lo, hi, finest)
        self.hist_float = np.zeros(self.bins.count, np.int64)
        self.hist_quant = np.zeros(self.bins.count, np.int64)

    def _counts(self, values: np.ndarray, finite: bool) -> np.ndarray:
        """Bin counts of one block's finite values (``finite``: the caller knows they all are)."""
        if not finite and not np.isfinite(values).all():
            values = values[np.isfinite(values)]
        return self.bins.counts(values)

    def _check(self, reference: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ref, out = sample_rows(reference), sample_rows(other)
        if ref.shape != out.shape:
            raise ValueError(
                f"{self.point.name!r}: cannot compare outputs of shapes {np.shape(reference)} and {np.shape(other)}"
            )
        return ref, out

    def update(self, reference: np.ndarray, quantized: np.ndarray) -> None:
        """Reduce one chunk of samples of the quantized model, block by block: accumulated
        error, both histograms, clipped values."""
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
            clipped_percent=100.0 * self.clipped / self.total if self.range is not None and self.total else None,
            cosine_per_sample=[float(c) for c in acc.cosine],
        )
        if self.local:
            loc = SampleMetrics.concat(self.local)
            layer.local_cosine_mean = float(loc.cosine.mean())
            layer.local_sqnr_db = float(loc.sqnr_db.mean())
            layer.local_mse = float(loc.mse.mean())
            layer.local_max_abs_error = float(loc.max_abs.max())
        return layer


def _max_threshold(weights) -> float | None:
    values = [np.max(np.abs(w.threshold)) for w in weights if w.threshold is not None]
    values += [max(np.max(np.abs(w.range_min)), np.max(np.abs(w.range_max))) for w in weights if w.range_min is not None]
    return float(max(values)) if values else None


def _activation_threshold(node: Node) -> float | None:
    act = node.quant.activation
    if act is None:
        return None
    if act.threshold is not None:
        return float(act.threshold)
    if act.range_max is not None:
        return float(max(abs(act.range_min), abs(act.range_max)))
    return None


def _bytes_per_sample(graph: Graph, names: list[str]) -> float:
    return float(sum(graph.node(n).output_size() for n in names) * BYTES_PER_VALUE)


@dataclass
class Comparison:
    """What comparing a float graph with a quantized one runs and reads.

    Attributes:
        points: the compare points (``point.local`` set where a local error is computed).
        local: the local model's graph and feeds.
        float_names: the float-graph nodes whose outputs are read.
        float_bytes: bytes per sample of those float outputs.
        other_bytes: bytes per sample of the larger of the quantized and local models'
            outputs at the compare points: a bound on what one of their runs holds of
            them (PyTorch lets each go once reduced; a Keras call holds all until it
            returns).
    """

    points: list[ComparePoint]
    local: LocalGraph
    float_names: list[str]
    float_bytes: float
    other_bytes: float

    @classmethod
    def of(cls, float_graph: Graph, q_graph: Graph) -> Comparison:
        points = compare_points(float_graph, q_graph)
        local = local_graph(q_graph, points)
        names = float_names(points, local)
        other = max(
            _bytes_per_sample(q_graph, [p.name for p in points]),
            _bytes_per_sample(local.graph, [name for name, _ in local.graph.outputs]),
        )
        return cls(points, local, names, _bytes_per_sample(float_graph, names), other)

    def keeps_reference(self, samples: int, memory_cap: int) -> bool:
        """Whether the float outputs of all ``samples`` fit under ``memory_cap`` with room
        left for one sample of the quantized or local model's outputs."""
        return samples * self.float_bytes + self.other_bytes <= memory_cap

    def chunk_size(self, samples: int, memory_cap: int, reference: bool = False) -> int:
        """Samples per chunk so that the outputs held at once stay under ``memory_cap``:
        the float ones of the chunk and one model's; with ``reference``, the float ones of
        all the samples (kept by the statistics pass) and one model's on the chunk."""
        if reference:
            return chunk_size(self.other_bytes, samples, int(memory_cap - samples * self.float_bytes))
        return chunk_size(self.float_bytes + self.other_bytes, samples, memory_cap)


def float_chunks(
    backend: Backend,
    float_graph: Graph,
    plan: Comparison,
    data: RepresentativeData,
    samples: int,
    memory_cap: int,
    reference: FloatReference | None = None,
) -> Iterator[Chunk]:
    """(inputs, float outputs at ``plan.float_names``) for the first ``samples`` samples,
    in chunks that keep the outputs held at once under ``memory_cap`` (`Comparison.chunk_size`).

    From ``reference`` when it holds them (no float pass at all), else from a float pass
    over a fresh iteration of the data (on the layers of the statistics pass's model, when
    ``reference`` kept it).
    """
    names = plan.float_names
    if reference is not None and reference.covers(names, samples):
        yield from reference.chunks(samples, plan.chunk_size(samples, memory_cap, reference=True))
        return
    model = backend.build(
        float_graph, quantized=False, extra_outputs=names, share=reference.model if reference is not None else None
    )
    skip = len(float_graph.outputs)
    for inputs in sample_chunks(data.samples(samples), plan.chunk_size(samples, memory_cap)):
        yield inputs, dict(zip(names, backend.run(model, inputs)[skip:]))


class _Router:
    """The tap of the quantized (or the local) model: hands each compare point's output,
    as the model produces it, to its accumulator with the float output of the same chunk."""

    def __init__(self, accumulators: list[_PointAccumulator], local: bool) -> None:
        self.local = local
        self.by_name = {
            (acc.point.local if local else acc.point.name): acc
            for acc in accumulators
            if not local or acc.point.local is not None
        }
        self.float_outputs: Mapping[str, np.ndarray] = {}  # of the chunk being run

    def __call__(self, name: str, value: np.ndarray) -> None:
        acc = self.by_name[name]
        reference = self.float_outputs[acc.point.reference]
        (acc.update_local if self.local else acc.update)(reference, value)


def analyze(
    backend: Backend,
    float_graph: Graph,
    q_graph: Graph,
    data: RepresentativeData,
    samples: int,
    memory_cap: int,
    stats: Mapping[str, NodeStatistics] | None = None,
    reference: FloatReference | None = None,
    weights: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    q_model: Any = None,
) -> SimilarityResult:
    """Compare the float model (``float_graph``, before preparation) with the quantized one.

    Args:
        backend: builds and runs the models.
        float_graph: the user's model as read, before any transform.
        q_graph: the quantized graph (thresholds selected).
        data: the representative data; the first ``samples`` samples are used.
        memory_cap: bytes of layer outputs held at once.
        stats: collected statistics by node, to put the histograms on the right range.
        reference: the float outputs kept by the statistics pass; the float model runs
            only when it does not hold what the comparison reads.
        weights: quantized weights already computed (node -> weight name -> array).
        q_model: the model built from ``q_graph`` with ``weights``, whose layers the
            analysis's quantized model reuses where the backend can (`Backend.build`).
    """
    plan = Comparison.of(float_graph, q_graph)
    points, local = plan.points, plan.local
    chunks = float_chunks(backend, float_graph, plan, data, samples, memory_cap, reference)
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
    seen = 0
    for chunk, f_out in chunks:
        q_tap.float_outputs = local_tap.float_outputs = f_out
        backend.run(quantized_model, chunk)
        if local_model is not None:
            feeds = local.inputs(chunk, f_out)
            backend.run(local_model, feeds)
            del feeds
        seen += len(chunk[0])
        q_tap.float_outputs = local_tap.float_outputs = {}
        del f_out
    layers = [acc.result(q_graph.node(acc.point.name).layer_type) for acc in accumulators]
    histograms = {
        acc.point.name: PairHistogram(acc.bins.edges(), acc.hist_float, acc.hist_quant)
        for acc in accumulators
        if acc.bins is not None
    }
    return SimilarityResult(SimilarityReport(samples=seen, layers=layers), histograms)
