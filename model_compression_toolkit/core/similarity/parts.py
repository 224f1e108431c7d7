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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.core.similarity.metrics import SQNR_CEILING_DB, compare

# ops whose output has the same layout as their only tensor input
_SAME_LAYOUT = frozenset({OpKind.ACTIVATION, OpKind.IDENTITY, OpKind.DROPOUT})


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
    """

    output: int
    name: str
    axis: int | None = None
    start: int = 0
    stop: int = 0
    source: str | None = None
    channels: bool = False  # ``axis`` is the output's channel axis

    @property
    def label(self) -> str:
        """``"cat_17"`` or ``"cat_17 channels 4-21 (from sigmoid_3)"``."""
        if self.axis is None:
            return self.name
        where = "channels" if self.channels else f"axis {self.axis} indices"
        return f"{self.name} {where} {self.start}-{self.stop - 1}" + (f" (from {self.source})" if self.source else "")

    def of(self, output: np.ndarray) -> np.ndarray:
        """This part of one output (samples first)."""
        if self.axis is None:
            return output
        index = [slice(None)] * output.ndim
        index[self.axis] = slice(self.start, self.stop)
        return output[tuple(index)]


def output_parts(graph: Graph) -> list[OutputPart]:
    """Every output whole, then the parts of each output a concatenation makes."""
    parts = [OutputPart(i, name) for i, (name, _) in enumerate(graph.outputs)]
    for i, (name, _) in enumerate(graph.outputs):
        parts += _concat_parts(graph, i, name)
    return parts


def _concat_parts(graph: Graph, index: int, name: str) -> list[OutputPart]:
    node = graph.node(name)
    while node.kind in _SAME_LAYOUT and len(graph.in_edges(node.name)) == 1:
        node = graph.node(graph.in_edges(node.name)[0].src)
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
        parts.append(OutputPart(index, name, axis, start, start + size, edge.src, channels))
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


@dataclass
class OutputImpact:
    """A model's outputs measured against the float outputs, whole and part by part.

    Attributes:
        sqnr_db: the worst of the parts' SQNRs (dB): what ranks a quantizer.
        whole_db: the SQNR over every output whole (dB).
        part: the label of the worst part, when it is a part of an output (not a whole output).
        part_db: that part's SQNR (dB).
        distinct_values: how many distinct values the worst part holds (on the samples measured).
    """

    sqnr_db: float
    whole_db: float
    part: str | None = None
    part_db: float | None = None
    distinct_values: int | None = None


def sqnr_db(reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> float:
    """The outputs' SQNR against the reference: the mean noise-to-signal ratio over samples
    and outputs, in dB (a few badly damaged samples weigh as they should)."""
    nsr = np.concatenate([compare(r, o).nsr for r, o in zip(reference, outputs)])
    mean = float(nsr.mean()) if nsr.size else 0.0
    if mean <= 0:
        return SQNR_CEILING_DB
    return float(np.clip(-10 * math.log10(mean), -SQNR_CEILING_DB, SQNR_CEILING_DB))


def measure(
    parts: Sequence[OutputPart], reference: Sequence[Sequence[np.ndarray]], outputs: Sequence[Sequence[np.ndarray]]
) -> OutputImpact:
    """``outputs`` against ``reference`` (each a list over chunks of a list over outputs):
    over every output together, each output alone (when there are several) and each part."""
    whole = sqnr_db(
        [r for chunk in reference for r in chunk], [o for chunk in outputs for o in chunk]
    )
    impact = OutputImpact(whole, whole)
    several = len({part.output for part in parts}) > 1
    for part in parts:
        if part.axis is None and not several:
            continue  # the one output whole is measured above
        ref = [part.of(chunk[part.output]) for chunk in reference]
        out = [part.of(chunk[part.output]) for chunk in outputs]
        db = sqnr_db(ref, out)
        if db < impact.sqnr_db:
            distinct = len(np.unique(np.concatenate([o.ravel() for o in out])))
            impact = OutputImpact(db, whole, part.label, db, distinct)
    return impact
