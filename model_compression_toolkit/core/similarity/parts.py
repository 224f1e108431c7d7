"""Where a quantizer's harm lands: each model output, and each part of an output.

The output SQNR over a whole tensor is the SQNR of its largest values. A detection head
that concatenates box coordinates in pixels (0-320) with class scores (0-1) into one
output keeps a high SQNR when one 8-bit grid (step ~1.3) rounds every score to 0 or 1:
the boxes carry all the signal power. So an output made by a concatenation is measured
part by part, each input of the concatenation on its own, and the worst part counts::

    boxes (N, 4, A) --\\
                       cat(axis=1) -> output (N, 22, A)   parts: [0:4] from boxes
    scores (N, 18, A) -/                                          [4:22] from scores

An output's parts are found through the ops that keep the concatenated axis where it is
(an activation, a quantizer, identity); the whole tensor is always a part too.

A part that holds *probabilities* (the output of a sigmoid, hard sigmoid or softmax) is read
by a decision: a detection over a confidence threshold, a text pixel over 0.3, the class with
the highest score. Most of such a map is background, probabilities of 0.001 whose noise of
a few thousandths no threshold ever sees, yet over the whole map that noise outweighs the
few probabilities that decide anything. So a probability part is judged on the values that
can take part in a decision: its SQNR is taken over the elements whose float or quantized
value reaches `DECISION_LEVEL` (the noise there, against the signal there)::

    float     0.001 0.002 0.90 0.30 0.12        elements judged: float or quantized >= 0.05
    quantized 0.004 0.000 0.89 0.31 0.00        -> the 0.90, 0.30 and 0.12 (wiped out: noise)

A probability map whose decisions stay is not harmed, however its background moves; one
whose small probabilities are wiped out (a grid too coarse for them) is, by the noise of
exactly those.

A dense probability *map* (two spatial axes: a text detector's, a segmentation's) is also
compared with the spatial tolerance boundary benchmarks use (BSDS: 0.75 % of the map's
diagonal, 3 pixels on a 320x320 map): a quantized value is noise only by how far it lies
outside the float values within that distance. A region whose border moves by a pixel or
two keeps every decision a user reads off it; one that vanishes does not::

    float      0 0 1 1 1 1 0 0        quantized  0 0 0 1 1 1 0 0   (the border moved: no noise)
                                      quantized  0 0 0 0 0 0 0 0   (the region gone: noise)

A softmax's part is a distribution over classes, read by *rank*: a classifier's argmax, a
CTC decoder's argmax at each time step. It is harmed when its decisions change, not when
its probabilities move and every argmax stays: its noise is counted on the rows (the
positions along every axis but the classes) whose top class changed, over their values a
decision reads; a row whose top class stays is no noise (`rank_sqnr_db`). Along a sequence
a decision may move by `SEQUENCE_TOLERANCE` step (a CTC alignment: a character's frame one
step later decodes the same text), along a map by the spatial tolerance; one that
vanishes or changes class does not::

    float argmax      94 0 0 631 0 0        quantized  94 0 0 0 631 0   (moved a step: kept)
                                            quantized  94 0 0 0 0   0   (631 gone: changed)

PP-OCRv4's recognizer at 8 bits keeps every text line: one quantizer alone leaves its CTC
softmax at 17.8 dB on the probabilities >= 0.05, its argmax moved a step at 3 of 320 steps
and changed at none.

Each part is judged against its own bar (`restore_bar_db`): `RESTORE_DB` for values read
as they are (box coordinates, logits), `DECISION_RESTORE_DB` for probabilities a decision
reads, which lose detections just over the cause bound (YOLOv8n's class scores at 21 dB).
The part that counts (`OutputImpact`) is the one furthest under its own bar: PicoDet's box
distributions at 23 dB pass theirs while its class scores under 30 dB do not, and a fix
restores only when every part is at its bar. A cause is judged against one bar for every
part (`causes.CAUSE_DB`): `OutputImpact.cause_view` is the part with the lowest SQNR.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from model_compression_toolkit.core.graph import VALUE_PRESERVING, Graph, Node, OpKind
from model_compression_toolkit.core.similarity.metrics import SQNR_CEILING_DB, compare

# ops whose output has the same layout as their only tensor input
_SAME_LAYOUT = frozenset({OpKind.ACTIVATION, OpKind.IDENTITY, OpKind.DROPOUT})
# inputs that carry no values of the model's tensors: a reshape's target shape, a constant
_NOT_VALUES = frozenset({OpKind.CONSTANT, OpKind.SHAPE})
# elementwise functions whose outputs are probabilities in [0, 1] (besides a softmax)
PROBABILITY_FUNCTIONS = frozenset({"sigmoid", "hardsigmoid", "hard_sigmoid"})
# a probability under this in float and quantized alike takes part in no decision
DECISION_LEVEL = 0.05
# a dense map's spatial tolerance, as a share of its diagonal (BSDS's boundary benchmark)
SPATIAL_TOLERANCE = 0.0075
# a sequence of decisions (a CTC decoder's time steps): a decision may move this many steps
SEQUENCE_TOLERANCE = 1
# the part SQNR (dB) with which a fix gives the task back: values read as they are (box
# coordinates, logits: the digits CNN's outlier channel equalized, 27.7 dB, keeps accuracy
# within a point) keep the cause bound; probabilities a decision reads need more (YOLOv8n's
# class scores at 21 dB, every activation at 16 bits, leave AP50 a point or more under float)
RESTORE_DB = 20.0
DECISION_RESTORE_DB = 30.0
# the float values of a softmax row sum to one within this: the axis a decision ranks
_SUMS_TO_ONE = 1e-3


def restore_bar_db(probability: bool) -> float:
    """The SQNR (dB) a part needs to give its task back: `DECISION_RESTORE_DB` for
    probabilities a decision reads, else `RESTORE_DB`."""
    return DECISION_RESTORE_DB if probability else RESTORE_DB


@dataclass(frozen=True)
class OutputPart:
    """One output (``axis`` None) or the slice ``start:stop`` of it along ``axis``.

    Attributes:
        output: the index of the output in the model's outputs.
        name: the node that produces the output.
        axis: the concatenated axis (batch axis 0 included), or None for the whole tensor.
        start / stop: the slice of ``axis`` the part holds.
        source: the node whose values the part holds (an input of the concatenation).
        channels: whether ``axis`` is the output's channel axis.
        probability: whether the part holds probabilities (a sigmoid's or softmax's
            output), judged on the values a decision reads (see the module doc).
        spatial: a probability map's two spatial axes (batch axis 0 included), compared
            with `SPATIAL_TOLERANCE`; empty: no spatial tolerance.
        ranked: whether the probabilities are a softmax's, read by rank (`rank_sqnr_db`).
    """

    output: int
    name: str
    axis: int | None = None
    start: int = 0
    stop: int = 0
    source: str | None = None
    channels: bool = False  # ``axis`` is the output's channel axis
    probability: bool = False
    spatial: tuple[int, ...] = ()
    ranked: bool = False

    @property
    def label(self) -> str:
        """``"cat_17"`` or ``"cat_17 channels 4-21 (from sigmoid_3)"``."""
        if self.axis is None:
            return self.name
        where = "channels" if self.channels else f"axis {self.axis} indices"
        return f"{self.name} {where} {self.start}-{self.stop - 1}" + (
            f" (from {self.source})" if self.source else ""
        )

    def of(self, output: np.ndarray) -> np.ndarray:
        """This part of one output (samples first)."""
        if self.axis is None:
            return output
        index = [slice(None)] * output.ndim
        index[self.axis] = slice(self.start, self.stop)
        return output[tuple(index)]


def output_parts(graph: Graph) -> list[OutputPart]:
    """Every output whole, then the parts of each output a concatenation makes."""
    parts = [
        OutputPart(
            i, name, probability=is_probability(graph, name), spatial=_spatial_axes(graph.node(name)),
            ranked=is_ranked(graph, name),
        )
        for i, (name, _) in enumerate(graph.outputs)
    ]  # fmt: skip
    for i, (name, _) in enumerate(graph.outputs):
        parts += _concat_parts(graph, i, name)
    return parts


def is_probability(graph: Graph, name: str) -> bool:
    """Whether node ``name``'s output holds probabilities: a sigmoid, a hard sigmoid or a
    softmax makes it, through ops that keep values as they are (identity, dropout, a
    reshape or transpose: a detector's scores laid out as (batch, anchors, classes), a pad),
    whose other inputs are constants or shapes (an ONNX Reshape's target shape)."""
    return _probability_function(graph, name) is not None


def is_ranked(graph: Graph, name: str) -> bool:
    """Whether node ``name``'s output holds a softmax's probabilities (read by rank)."""
    return _probability_function(graph, name) == "softmax"


def _probability_function(graph: Graph, name: str) -> str | None:
    """``"softmax"``, the sigmoid's name, or None: what makes node ``name``'s probabilities."""
    node = graph.node(name)
    while node.kind in VALUE_PRESERVING and (source := _value_input(graph, node.name)) is not None:
        node = graph.node(source)
    if node.kind == OpKind.SOFTMAX:
        return "softmax"
    function = str(node.attrs.get("function") or node.fused_activation or "").lower()
    if (node.kind == OpKind.ACTIVATION or node.fused_activation) and (
        function in PROBABILITY_FUNCTIONS or function == "softmax"
    ):
        return function
    return None


def _value_input(graph: Graph, name: str) -> str | None:
    """The one input of node ``name`` that carries values: a reshape's shape, a constant or a
    shape computation (an ONNX Reshape's second input) is none; None: none or several."""
    sources = [e.src for e in graph.in_edges(name) if graph.node(e.src).kind not in _NOT_VALUES]
    return sources[0] if len(sources) == 1 else None


def _spatial_axes(node: Node) -> tuple[int, ...]:
    """The two spatial axes of an image-like output ``(N, C, H, W)`` or ``(N, H, W, C)``;
    empty for any other (a sequence, anchors, a vector)."""
    shape = node.output_shapes[0] if node.output_shapes else ()
    if len(shape) != 4 or node.channel_axis is None:
        return ()
    return tuple(a for a in (1, 2, 3) if a != node.channel_axis % 4)


def _concat_parts(graph: Graph, index: int, name: str) -> list[OutputPart]:
    node = graph.node(name)
    while node.kind in _SAME_LAYOUT and (source := _value_input(graph, node.name)) is not None:
        if is_probability(graph, node.name):
            return []  # a probability made of a concatenation: its parts are not what it is
        node = graph.node(source)
    if node.kind != OpKind.CONCAT:
        return []
    axis = _concat_axis(node)
    if axis is None:
        return []
    rank = len(node.output_shapes[0])
    channels = node.channel_axis is not None and node.channel_axis % rank == axis
    parts, start = [], 0
    for edge, shape in zip(graph.in_edges(node.name), node.input_shapes):
        size = shape[axis]
        probability = is_probability(graph, edge.src)
        spatial = _spatial_axes(node) if probability else ()
        ranked = is_ranked(graph, edge.src)
        parts.append(
            OutputPart(
                index, name, axis, start, start + size, edge.src, channels, probability, spatial, ranked
            )
        )
        start += size
    return parts if len(parts) > 1 else []


def _concat_axis(node: Node) -> int | None:
    """The axis along which ``node`` joins its inputs, read from the shapes (None: a stack,
    or shapes that do not say)."""
    if not node.output_shapes or not node.input_shapes:
        return None
    out, shapes = node.output_shapes[0], node.input_shapes
    if any(len(s) != len(out) for s in shapes):
        return None
    for axis in range(1, len(out)):
        sizes = [s[axis] for s in shapes]
        if None in sizes or out[axis] is None or sum(sizes) != out[axis]:
            continue
        if all(s[a] == out[a] for s in shapes for a in range(1, len(out)) if a != axis):
            return axis
    return None


@dataclass(frozen=True)
class PartImpact:
    """One output part measured: its label (None: the one output whole), its SQNR (dB) and
    whether it holds probabilities a decision reads (its bar: `restore_bar_db`)."""

    label: str | None
    sqnr_db: float
    probability: bool = False

    @property
    def margin_db(self) -> float:
        """How far (dB) the part is over its own bar (negative: under it)."""
        return self.sqnr_db - restore_bar_db(self.probability)


@dataclass
class OutputImpact:
    """A model's outputs measured against the float outputs, whole and part by part.

    The fields describe the part furthest under its own bar (`restore_bar_db`; the lowest
    margin, see the module doc): what a fix is judged by.

    Attributes:
        sqnr_db: that part's SQNR (dB), a probability part on the values a decision reads.
        whole_db: the SQNR over every output whole (dB), every value counted.
        part: the label of that part, when it is a part of an output or one of several
            outputs (None: the one output whole).
        part_db: that part's SQNR (dB).
        distinct_values: how many distinct values that part holds (on the samples measured).
        probability: whether that part holds probabilities, judged on the values at or
            above `DECISION_LEVEL` (see the module doc), against `DECISION_RESTORE_DB`.
        ranked: whether those probabilities are read by rank (a softmax's: `rank_sqnr_db`).
        parts: every part measured, in the order of the parts given.
        lowest: the part with the lowest SQNR where it is another part (what a cause is
            judged by, one bar for every part); None: this one (`cause_view`).
    """

    sqnr_db: float
    whole_db: float
    part: str | None = None
    part_db: float | None = None
    distinct_values: int | None = None
    probability: bool = False
    ranked: bool = False
    parts: tuple[PartImpact, ...] = ()
    lowest: OutputImpact | None = field(default=None, repr=False)

    @property
    def margin_db(self) -> float:
        """How far (dB) the worst part is over its own bar: every part is at its bar when
        it is 0 or more (negative: the worst part is that far under its bar)."""
        return self.sqnr_db - restore_bar_db(self.probability)

    @property
    def restored(self) -> bool:
        """Whether every part is at its own bar."""
        return self.margin_db >= 0

    def cause_view(self) -> OutputImpact:
        """The part with the lowest SQNR (this impact where it is the same part): a cause is
        judged against one bar for every part (`causes.CAUSE_DB`)."""
        return self.lowest if self.lowest is not None else self


def sqnr_db(reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> float:
    """The outputs' SQNR against the reference: the mean noise-to-signal ratio over samples
    and outputs, in dB (a few badly damaged samples weigh as they should)."""
    nsr = np.concatenate([compare(r, o).nsr for r, o in zip(reference, outputs)])
    mean = float(nsr.mean()) if nsr.size else 0.0
    return _db(mean)


def decision_sqnr_db(
    reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray], spatial: tuple[int, ...] = ()
) -> float:
    """The SQNR (dB) of probabilities over the elements a decision can read: those whose
    reference or output value is `DECISION_LEVEL` or more, every sample together (a sample
    may have none). No such element: nothing a decision reads changed (the ceiling).
    ``spatial``: a map's two spatial axes; an output value is then noise only by how far it
    lies outside the reference values within the `SPATIAL_TOLERANCE` (`spatial_noise`)."""
    signal = noise = 0.0
    for r, o in zip(reference, outputs):
        r64, o64 = np.asarray(r, np.float64), np.asarray(o, np.float64)
        read = (r64 >= DECISION_LEVEL) | (o64 >= DECISION_LEVEL)
        error = spatial_noise(r64, o64, spatial) if spatial else r64 - o64
        signal += float(np.square(r64[read]).sum())
        noise += float(np.square(error[read]).sum())
    if noise <= 0:
        return SQNR_CEILING_DB
    return _db(noise / signal if signal > 0 else math.inf)


def spatial_noise(reference: np.ndarray, output: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """How far each output value lies outside the range of the reference values within
    ``radius = round(SPATIAL_TOLERANCE * diagonal)`` elements along ``axes`` (a square
    window, edges repeated): 0 where a value the reference has nearby was produced."""
    radius = int(round(SPATIAL_TOLERANCE * math.hypot(*(reference.shape[a] for a in axes))))
    low, high = reference, reference
    for axis in axes:
        low, high = _window(low, axis, radius, np.minimum), _window(high, axis, radius, np.maximum)
    return np.maximum(low - output, 0.0) + np.maximum(output - high, 0.0)


def _window(x: np.ndarray, axis: int, radius: int, reduce) -> np.ndarray:
    """``reduce`` over a window of ``2 radius + 1`` elements along ``axis`` (edges repeated)."""
    if radius <= 0:
        return x
    size = x.shape[axis]
    padding = [(0, 0)] * x.ndim
    padding[axis] = (radius, radius)
    padded = np.pad(x, padding, mode="edge")
    out = x.copy()
    index = [slice(None)] * x.ndim
    for shift in range(2 * radius + 1):
        index[axis] = slice(shift, shift + size)
        reduce(out, padded[tuple(index)], out=out)
    return out


def _db(nsr: float) -> float:
    if nsr <= 0:
        return SQNR_CEILING_DB
    if not math.isfinite(nsr):
        return -SQNR_CEILING_DB
    return float(np.clip(-10 * math.log10(nsr), -SQNR_CEILING_DB, SQNR_CEILING_DB))


def measure(
    parts: Sequence[OutputPart],
    reference: Sequence[Sequence[np.ndarray]],
    outputs: Sequence[Sequence[np.ndarray]],
) -> OutputImpact:
    """``outputs`` against ``reference`` (each a list over chunks of a list over outputs):
    over every output together, each output alone and each part, a probability part on
    the values a decision reads (`decision_sqnr_db`; a softmax's on the decisions it changes,
    `rank_sqnr_db`). The output or part furthest under its own bar counts (`OutputImpact`);
    the one with the lowest SQNR is kept too (`OutputImpact.cause_view`)."""
    whole = sqnr_db([r for chunk in reference for r in chunk], [o for chunk in outputs for o in chunk])
    several = len({part.output for part in parts}) > 1
    measured: list[tuple[OutputPart, PartImpact, list[np.ndarray]]] = []
    for part in parts:
        ref = [part.of(chunk[part.output]) for chunk in reference]
        out = [part.of(chunk[part.output]) for chunk in outputs]
        label = part.label if part.axis is not None or several else None
        measured.append((part, PartImpact(label, part_db(part, ref, out), part.probability), out))
    if not measured:
        return OutputImpact(whole, whole)
    # the first of equals counts (an output whole before its parts)
    worst = min(measured, key=lambda m: (m[1].margin_db, m[1].sqnr_db))
    lowest = min(measured, key=lambda m: m[1].sqnr_db)
    every = tuple(m[1] for m in measured)
    impact = _impact(worst, whole, every)
    if lowest[0] is not worst[0] and lowest[1].sqnr_db < worst[1].sqnr_db:
        impact.lowest = _impact(lowest, whole, every)
    return impact


def part_db(part: OutputPart, reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> float:
    """One part's SQNR (dB): a softmax's on the decisions it changes, a probability part's on
    the values a decision reads, any other's over every value."""
    if part.ranked:
        ranked = rank_sqnr_db(reference, outputs)
        if ranked is not None:
            return ranked
    if part.probability:
        return decision_sqnr_db(reference, outputs, part.spatial)
    return sqnr_db(reference, outputs)


def _impact(
    measured: tuple[OutputPart, PartImpact, list[np.ndarray]], whole: float, every: tuple[PartImpact, ...]
) -> OutputImpact:
    part, result, out = measured
    distinct = None if result.label is None else len(np.unique(np.concatenate([o.ravel() for o in out])))
    return OutputImpact(
        result.sqnr_db, whole, result.label, result.sqnr_db if result.label else None, distinct,
        part.probability, part.ranked, every,
    )  # fmt: skip


def rank_sqnr_db(reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> float | None:
    """The SQNR (dB) of a softmax's probabilities read by rank: the noise of the rows whose
    top class changed (`changed_decisions`), over their values a decision reads (reference
    or output at `DECISION_LEVEL` or more), against the signal of every row's such values.
    No row changed: the ceiling. None where no axis holds a distribution (the float values
    summing to one along it): not read by rank."""
    axis = class_axis(reference)
    if axis is None:
        return None
    signal = noise = 0.0
    for r, o in zip(reference, outputs):
        r, o = np.asarray(r), np.asarray(o)
        read = (r >= DECISION_LEVEL) | (o >= DECISION_LEVEL)  # a few values a row: summed in float64
        changed = read & np.expand_dims(changed_decisions(r, o, axis), axis)
        signal += float(np.square(r[read], dtype=np.float64).sum())
        noise += float(np.square(r[changed].astype(np.float64) - o[changed]).sum())
    if noise <= 0:
        return SQNR_CEILING_DB
    return _db(noise / signal if signal > 0 else math.inf)


def class_axis(reference: Sequence[np.ndarray]) -> int | None:
    """The axis (batch axis 0 included) along which every float row sums to one, the last
    such; None: none (a softmax laid out again, flattened with another axis)."""
    arrays = [np.asarray(r, np.float64) for r in reference if np.size(r)]
    if not arrays or any(a.ndim < 2 for a in arrays):
        return None
    for axis in range(arrays[0].ndim - 1, 0, -1):
        if arrays[0].shape[axis] > 1 and all(
            np.allclose(a.sum(axis=axis), 1.0, rtol=0, atol=_SUMS_TO_ONE) for a in arrays
        ):
            return axis
    return None


def changed_decisions(reference: np.ndarray, output: np.ndarray, axis: int) -> np.ndarray:
    """Per row (every axis but ``axis``), whether the top class changed: the output's top
    class is none of the reference's within the tolerance, or the reference's none of the
    output's (a decision that vanished). Tolerance: `SEQUENCE_TOLERANCE` steps along one
    axis besides the batch (a sequence), the spatial tolerance over two (a map), else none::

        reference  94 0 0 631 0 0   output  94 0 0 0 631 0   changed  0 0 0 0 0 0
                                    output  94 0 0 0 0   0   changed  0 0 0 1 0 0
    """
    ref, out = reference.argmax(axis=axis), output.argmax(axis=axis)
    axes = tuple(range(1, ref.ndim))
    if len(axes) == 1:
        radius = SEQUENCE_TOLERANCE
    elif len(axes) == 2:
        radius = int(round(SPATIAL_TOLERANCE * math.hypot(*(ref.shape[a] for a in axes))))
    else:
        axes, radius = (), 0
    return ~(_found_near(out, ref, axes, radius) & _found_near(ref, out, axes, radius))


def _found_near(values: np.ndarray, among: np.ndarray, axes: tuple[int, ...], radius: int) -> np.ndarray:
    """Whether each of ``values`` equals one of ``among`` within ``radius`` elements along
    ``axes`` (a square window, edges repeated)."""
    found = values == among
    if radius <= 0 or not axes:
        return found
    shifts = [np.clip(np.arange(among.shape[a])[:, None] + np.arange(-radius, radius + 1), 0, among.shape[a] - 1)
              for a in axes]  # fmt: skip
    for offsets in np.ndindex(*(2 * radius + 1,) * len(axes)):
        moved = among
        for a, shift, offset in zip(axes, shifts, offsets):
            moved = np.take(moved, shift[:, offset], axis=a)
        found |= values == moved
    return found
