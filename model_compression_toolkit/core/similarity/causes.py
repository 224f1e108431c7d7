"""Which quantizer causes the damage: each one's effect on the model output, on its own.

The error a compare point shows (accumulated) is mostly inherited: a layer after a
damaged one looks damaged too. A layer's local error (that layer alone, fed the float
input) points closer, but is measured on its own output, where one outlier channel hides
the channels a per-tensor grid destroyed. What settles it is the question the user asks:
*how much does this quantizer, alone, damage the model's output?*

Every quantizer is an entry: a layer's output activation, or a layer's weights (separate
entries, because the fix differs). For each entry whose own error is not negligible, the
float model runs with that quantizer alone switched on, on the first ``impact_samples``
samples, and its output SQNR against the float output is the entry's impact::

    float model + only <entry> quantized --forward--> outputs  vs  float outputs -> output SQNR (dB)

The output SQNR is the worst of each output and each part of an output a concatenation
makes (`core.similarity.parts`): box coordinates in pixels beside class scores in 0-1
hide, over the whole tensor, scores rounded to two values. A part that holds probabilities
(a sigmoid's or a softmax's) is judged on the values a decision reads (0.05 and more):
a text detector's probability map whose background moves by a few thousandths keeps every
decision, and is no cause; a softmax's, read by rank, on the rows whose top class changes:
a text recognizer whose CTC argmax stays at every step (or moves by one) is no cause.
A cause is judged against one bar for every part: the part with the lowest SQNR counts.

Entries are ranked by it; an entry whose output SQNR alone is under `CAUSE_DB` is a cause,
and so is a layer's weights that lose an input channel (its weights keep less than 15 dB
of SQNR: most round to zero) while damaging the output measurably (under `CANDIDATE_DB`):
that layer then all but discards one of its input features, a systematic error that costs
more accuracy than its SQNR says (an outlier channel's consumer, whose weights for that
channel were scaled down to match).
An entry whose own error is low everywhere (every channel above `CANDIDATE_DB`, almost
nothing rounded to zero, and not a concatenation or addition of inputs whose ranges differ
`UNBALANCED_RATIO` times or more) is not run: its impact cannot be large unless the layers after it
amplify its noise a hundredfold, and the report says it was not measured. Nor is any entry
run alone where the quantized model, every quantizer on, keeps each output part
`SKIP_MARGIN_DB` over `CAUSE_DB`: the noise of quantizers together adds up, so one alone
leaves the outputs no worse (`measure_impacts`; the report says so).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from model_compression_toolkit.core.backend import Backend
from model_compression_toolkit.core.calibration.quantizers import channel_view, node_weight
from model_compression_toolkit.core.graph import Graph, OpKind
from model_compression_toolkit.core.quant_config import NodeQuantConfig
from model_compression_toolkit.core.similarity.channels import HIGH_ERROR_DB, ChannelMeasures, ChannelSums
from model_compression_toolkit.core.similarity.downstream import Cut, cut_after
from model_compression_toolkit.core.similarity.parts import (
    DECISION_LEVEL,
    OutputImpact,
    measure,
    output_parts,
)

ACTIVATION, WEIGHTS = "activation", "weights"
CAUSE_DB = 20.0  # an entry whose output SQNR alone is under this causes damage
CANDIDATE_DB = 30.0  # an entry whose own error is under this (any measure) gets its impact measured
CANDIDATE_ZERO_ROUNDED_PERCENT = 25.0  # ... or that rounds this share of its non-zero values to zero
UNBALANCED_RATIO = 16.0  # ... or that joins inputs whose ranges differ this much (MCT's xquant)
# no candidate runs alone where the quantized model, every quantizer on, keeps its outputs this
# far over CAUSE_DB: one quantizer alone would have to add twice the noise of all of them
SKIP_MARGIN_DB = 3.0


@dataclass
class QuantizerEntry:
    """One quantizer of the quantized model: a layer's output activation or its weights.

    Attributes:
        name: the layer (graph node) it belongs to.
        kind: ``"activation"`` or ``"weights"``.
        layer_type: the layer's type.
        bits: its bit-width.
        sqnr_db: its own error alone, over the whole tensor: the activation quantizer on
            the float output, or the weights against their quantized version.
        channel_sqnr_median_db / channel_sqnr_worst_db: its own error per channel (output
            channels for weights): the median and the worst channel.
        high_error_channels_percent: the share of channels under 15 dB, in percent.
        zero_rounded_percent: the share of values not zero in float that quantize to zero.
        clipped_percent: the share of values outside the quantization range (activations).
        channel_range_spread: the largest channel's range over the median channel's.
        lost_input_channels_percent: weights only: the share of input channels whose
            weights keep less than 15 dB of SQNR (most of them round to zero).
        input_range_spread: a concatenation's or an addition's output only: the largest
            input's range over the smallest's (inputs whose ranges differ by orders of
            magnitude share one grid that fits only the largest).
        output_sqnr_db: the model output's SQNR with only this quantizer switched on (dB),
            the worst of each output whole and each part of an output
            (`core.similarity.parts`); None when it was not measured (its own error is low).
        output_whole_db: the same over the outputs whole, where a large part hides a small one.
        output_part: the part of an output ``output_sqnr_db`` was measured on, when worse
            than the outputs whole (``"cat_17 channels 4-21 (from sigmoid_3)"``).
        output_part_distinct: how many distinct values that part keeps.
        output_probability: whether that part (or the output) holds probabilities, judged on
            the values a decision reads (`core.similarity.parts.DECISION_LEVEL` and more).
        output_ranked: whether those probabilities are a softmax's, read by rank: judged on
            the rows whose top class changed (`core.similarity.parts.rank_sqnr_db`).
        cause: whether it damages the output on its own (``output_sqnr_db < CAUSE_DB``).
        rank: 1 for the entry that damages the output most.
    """

    name: str
    kind: str
    layer_type: str
    bits: int
    sqnr_db: float
    channel_sqnr_median_db: float | None = None
    channel_sqnr_worst_db: float | None = None
    high_error_channels_percent: float | None = None
    zero_rounded_percent: float | None = None
    clipped_percent: float | None = None
    channel_range_spread: float | None = None
    lost_input_channels_percent: float | None = None
    input_range_spread: float | None = None
    output_sqnr_db: float | None = None
    output_whole_db: float | None = None
    output_part: str | None = None
    output_part_distinct: int | None = None
    output_probability: bool = False
    output_ranked: bool = False
    cause: bool = False
    rank: int = 0

    @property
    def own_db(self) -> float:
        """Its own error in dB, as low as the whole tensor or its median channel says."""
        values = [v for v in (self.sqnr_db, self.channel_sqnr_median_db) if v is not None]
        return min(values)

    @property
    def is_candidate(self) -> bool:
        """Whether its own error is large enough to measure its impact on the output."""
        return (
            self.own_db < CANDIDATE_DB
            or (self.zero_rounded_percent or 0.0) >= CANDIDATE_ZERO_ROUNDED_PERCENT
            or bool(self.lost_input_channels_percent)
            or (self.input_range_spread or 0.0) >= UNBALANCED_RATIO
        )

    def set_impact(self, impact: OutputImpact) -> None:
        """Record what this quantizer alone does to the outputs: the part with the lowest
        SQNR, judged against `CAUSE_DB` like every part (`OutputImpact.cause_view`)."""
        impact = impact.cause_view()
        self.output_sqnr_db, self.output_whole_db = impact.sqnr_db, impact.whole_db
        self.output_part, self.output_part_distinct = impact.part, impact.distinct_values
        self.output_probability, self.output_ranked = impact.probability, impact.ranked

    def evidence(self) -> str:
        """What it does, in words: where its harm lands and why."""
        said = []
        if self.input_range_spread is not None and self.input_range_spread >= UNBALANCED_RATIO:
            said.append(f"joins inputs whose ranges differ {self.input_range_spread:.0f}x on one grid")
        read = (
            f" on the probabilities >= {DECISION_LEVEL:g} a decision reads" if self.output_probability else ""
        )
        if self.output_ranked:
            read = f" on the probabilities >= {DECISION_LEVEL:g} of the rows whose top class changes"
        if self.output_part is not None and self.output_sqnr_db is not None:
            distinct = (
                "" if self.output_part_distinct is None else f", {self.output_part_distinct} distinct values"
            )
            said.append(
                f"alone leaves {self.output_part} at {self.output_sqnr_db:.1f} dB{read}{distinct} "
                f"(the outputs whole: {self.output_whole_db:.1f} dB)"
            )
        elif self.output_sqnr_db is not None:
            said.append(f"alone leaves the output at {self.output_sqnr_db:.1f} dB{read}")
        if (self.zero_rounded_percent or 0.0) >= CANDIDATE_ZERO_ROUNDED_PERCENT:
            said.append(f"{self.zero_rounded_percent:.0f} % of its non-zero values round to 0")
        return "; ".join(said)

    def damages_output(self) -> bool:
        """Whether its measured impact makes it a cause (see the module doc)."""
        if self.output_sqnr_db is None:
            return False
        return self.output_sqnr_db < CAUSE_DB or (
            bool(self.lost_input_channels_percent) and self.output_sqnr_db < CANDIDATE_DB
        )

    @classmethod
    def of(
        cls,
        name: str,
        kind: str,
        layer_type: str,
        bits: int,
        channels: ChannelMeasures,
        clipped_percent: float | None = None,
    ) -> QuantizerEntry:
        return cls(
            name=name, kind=kind, layer_type=layer_type, bits=bits, sqnr_db=channels.whole_db,
            channel_sqnr_median_db=channels.median_db, channel_sqnr_worst_db=channels.worst_db,
            high_error_channels_percent=_percent(channels.high_error_share),
            zero_rounded_percent=_percent(channels.zero_rounded), clipped_percent=clipped_percent,
            channel_range_spread=channels.range_spread,
        )  # fmt: skip


def _percent(share: float | None) -> float | None:
    return None if share is None else 100.0 * share


def weight_entries(
    graph: Graph, weights: Mapping[str, Mapping[str, np.ndarray]] | None = None
) -> list[QuantizerEntry]:
    """An entry per layer with quantized weights: its own error measured on the weights."""
    entries = []
    for node in graph.nodes():
        names = [w for w, cfg in node.quant.weights.items() if cfg.grid is not None]
        if not names:
            continue
        sums, inputs = ChannelSums(channel_axis=0), ChannelSums(channel_axis=0)
        for wname in names:
            axes = node.quant.weights[wname].channel_axes or node.kernel_axes.get(wname, ())
            w = np.asarray(node.weights[wname])
            q = np.asarray(node_weight(node, wname, True, weights))
            # each weight tensor's channels are channels of their own (a separable conv's
            # depthwise and pointwise kernels have different counts)
            sums.extend(channel_view(w, tuple(axes)), channel_view(q, tuple(axes)))
            if wname in node.kernel_in_axis and node.kernel_in_axis[wname] % w.ndim not in {
                a % w.ndim for a in axes
            }:
                in_axis = (node.kernel_in_axis[wname],)
                inputs.extend(channel_view(w, in_axis), channel_view(q, in_axis))
        bits = node.quant.weights[names[0]].n_bits
        entry = QuantizerEntry.of(node.name, WEIGHTS, node.layer_type, bits, sums.result())
        if inputs.signal is not None:
            used = inputs.signal > 0  # an input channel with all-zero float weights loses nothing
            lost = inputs.result().sqnr_db[used] < HIGH_ERROR_DB
            entry.lost_input_channels_percent = 100.0 * float(lost.mean()) if used.any() else 0.0
        entries.append(entry)
    return entries


def input_range_spreads(graph: Graph, ranges: Mapping[str, float]) -> dict[str, float]:
    """For each quantized concatenation or addition, its largest input's range over its
    smallest's (``ranges``: a node's largest absolute output value)."""
    spreads = {}
    for node in graph.nodes():
        if node.kind not in (OpKind.CONCAT, OpKind.ADD) or node.quant.activation is None:
            continue
        sizes = [ranges[e.src] for e in graph.in_edges(node.name) if ranges.get(e.src, 0.0) > 0]
        if len(sizes) > 1:
            spreads[node.name] = max(sizes) / min(sizes)
    return spreads


def isolate(graph: Graph, entry: QuantizerEntry | None) -> Graph:
    """A copy of ``graph`` with every quantizer off but ``entry``'s (None: all off).

    The copy's nodes start with empty configs (``graph.copy(quant=False)``): none of the
    configs a deep copy would make survives here. ``entry``'s settings are the source
    graph's own objects, shared as before; nothing changes them in place.
    """
    out = graph.copy(quant=False)
    for node in out.nodes():
        original = graph.node(node.name).quant
        node.quant = NodeQuantConfig(fused_into=original.fused_into)
        if entry is not None and node.name == entry.name:
            if entry.kind == ACTIVATION:
                node.quant.activation = original.activation
            else:
                node.quant.weights = original.weights
                node.quant.input_mean = original.input_mean  # the bias corrected for these weights
                node.quant.input_moments = original.input_moments  # rounded as in the whole model
    return out


def without(graph: Graph, activations: Sequence[str], weights: Sequence[str]) -> Graph:
    """A copy of ``graph`` with the quantizers of these layers' outputs and weights off."""
    out = graph.copy()
    for name in activations:
        out.node(name).quant.activation = None
    for name in weights:
        q = out.node(name).quant
        q.weights, q.input_mean, q.input_moments = {}, None, None
    return out


class ImpactProbe:
    """Runs variants of a quantized graph on a few samples and measures their outputs.

    ``float model (every quantizer off) -> reference outputs``;
    ``variant -> outputs -> parts.measure(reference, outputs)``: each output whole and each
    part of it (`core.similarity.parts`), the worst counting.

    A variant that differs from the float model at one node only (one quantizer switched
    on) runs from that node on (`core.similarity.downstream`): `prepare` names those nodes,
    and the float pass that gives the reference outputs also keeps the float values that
    feed their cuts, as long as they fit in ``memory_cap`` bytes.

    The samples come as the chunks the analysis ran, each whole: a model traced for one
    batch size runs on those and on nothing else.
    """

    def __init__(
        self, backend: Backend, graph: Graph, chunks: list[list[np.ndarray]], memory_cap: int = 1 << 30
    ) -> None:
        self.backend, self.graph, self.chunks, self.memory_cap = backend, graph, chunks, memory_cap
        self.parts = output_parts(graph)
        self.cuts: dict[str, Cut] = {}
        self._reference: list[list[np.ndarray]] | None = None
        self._values: list[dict[str, np.ndarray]] = []

    @property
    def samples(self) -> int:
        return sum(len(chunk[0]) for chunk in self.chunks)

    @property
    def holds_reference(self) -> bool:
        """Whether the float outputs are at hand (given, or from `prepare`)."""
        return self._reference is not None

    @property
    def reference(self) -> list[list[np.ndarray]]:
        """The float model's outputs, chunk by chunk."""
        if self._reference is None:
            self.prepare([])
        assert self._reference is not None
        return self._reference

    def prepare(self, names: Sequence[str]) -> None:
        """Run the float model once: its outputs, and the values the cuts from ``names``
        need (the cuts whose values fit in the memory cap, nearest the output first)."""
        cuts = {n: c for n in names if (c := cut_after(self.graph, n)) is not None}
        kept: dict[str, Cut] = {}
        sources: set[str] = set()
        for name, cut in sorted(cuts.items(), key=lambda item: len(item[1].keep)):
            needed = sources | set(cut.sources)
            if self._bytes(needed) <= self.memory_cap:
                kept[name], sources = cut, needed
        extra = sorted(sources)
        model = self.backend.build(isolate(self.graph, None), quantized=False, extra_outputs=extra)
        count = len(self.graph.outputs)
        self._reference, self._values = [], []
        for chunk in self.chunks:
            out = self.backend.forward(model, chunk)
            self._reference.append(out[:count])
            self._values.append(dict(zip(extra, out[count:])))
        self.cuts = kept

    def _bytes(self, names: set[str]) -> float:
        per_sample = sum(self.graph.node(n).output_size() for n in names) * 4.0
        return per_sample * self.samples

    def impact(self, variant: Graph, at: str | None = None) -> OutputImpact:
        """The variant's outputs against the float outputs, whole and part by part.
        ``at``: the one node where the variant differs from the float model, if it is one."""
        cut = self.cuts.get(at) if at is not None else None
        if cut is None:
            outputs = self._outputs(self.backend.build(variant, quantized=True))
        else:
            model = self.backend.build(cut.graph(variant), quantized=True)
            outputs = []
            for chunk, values, reference in zip(self.chunks, self._values, self.reference):
                feeds = [values[src] for src in cut.sources] + [chunk[i] for i in cut.inputs]
                produced = self.backend.forward(model, feeds)
                out = list(reference)
                for index, value in zip(cut.outputs, produced):
                    out[index] = value
                outputs.append(out)
        return measure(self.parts, self.reference, outputs)

    def output_sqnr_db(self, variant: Graph, at: str | None = None) -> float:
        """The variant's output SQNR (dB): the output or part of an output furthest under
        its own bar (`parts.OutputImpact`)."""
        return self.impact(variant, at).sqnr_db

    def _outputs(self, model: object) -> list[list[np.ndarray]]:
        """Every chunk's outputs, chunk by chunk."""
        return [self.backend.forward(model, chunk) for chunk in self.chunks]


def measure_impacts(
    probe: ImpactProbe, entries: list[QuantizerEntry], limit: int, progress: Callable[..., None] | None = None
) -> ImpactRuns:
    """Set ``output_sqnr_db`` of the entries that could matter (the ``limit`` candidates
    with the worst own error), then rank every entry and flag the causes.
    ``progress(step, done, total, unit)`` after each one.

    The quantized model itself is measured first (on the outputs the comparison kept: no
    run, `probe.ComparedProbe`). The noise of quantizers switched on together adds up, so
    one quantizer alone leaves the outputs no worse than all of them do: where every
    quantizer together keeps each output part `SKIP_MARGIN_DB` over `CAUSE_DB`, no entry
    can be a cause by its impact and none is run alone (a weights entry that loses an input
    channel still is while the outputs are under `CANDIDATE_DB`, its own bar)."""
    candidates = [e for e in entries if e.is_candidate]
    chosen = sorted(candidates, key=lambda e: (e.own_db, -(e.zero_rounded_percent or 0.0)))[:limit]
    prepared = bool(chosen) and not probe.holds_reference
    if prepared:  # one float run: the reference outputs and the values the cuts read
        probe.prepare([e.name for e in chosen])
    whole = probe.impact(probe.graph).cause_view() if chosen else None
    skipped = 0
    if whole is not None and whole.sqnr_db >= CAUSE_DB + SKIP_MARGIN_DB:
        kept = [e for e in chosen if e.lost_input_channels_percent and whole.sqnr_db < CANDIDATE_DB]
        skipped, chosen = len(chosen) - len(kept), kept
    if chosen and not prepared:
        probe.prepare([e.name for e in chosen])
    for i, entry in enumerate(chosen, start=1):
        entry.set_impact(probe.impact(isolate(probe.graph, entry), at=entry.name))
        if progress is not None:
            progress("output impact", i, len(chosen), "quantizers")
    for entry in entries:
        entry.cause = entry.damages_output()
    ordered = sorted(entries, key=_worst_first)
    for rank, entry in enumerate(ordered, start=1):
        entry.rank = rank
    entries[:] = ordered
    if whole is None:
        return ImpactRuns(None, skipped)
    return ImpactRuns(whole.sqnr_db, skipped, "rank" if whole.ranked else "decision" if whole.probability else None)


@dataclass(frozen=True)
class ImpactRuns:
    """What `measure_impacts` ran.

    Attributes:
        quantized_db: the quantized model's output SQNR on the impact samples, every
            quantizer on (its worst part, judged as a cause is); None: no candidate.
        skipped: the candidates not run alone because ``quantized_db`` bounds their
            impact over `CAUSE_DB` (`SKIP_MARGIN_DB`).
        read_as: how that part's noise was counted: ``"rank"``, a softmax read by rank
            (only the rows whose top class changed); ``"decision"``, probabilities on the
            values a decision reads; None, every value.
    """

    quantized_db: float | None = None
    skipped: int = 0
    read_as: str | None = None


def _worst_first(entry: QuantizerEntry) -> tuple:
    """Measured entries by output impact; then the others by their own error."""
    if entry.output_sqnr_db is not None:
        return (0, entry.output_sqnr_db, entry.own_db)
    return (1, entry.own_db, 0.0)
