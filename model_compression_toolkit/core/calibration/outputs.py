"""The grid of a model's output: no clipping, and room for the samples calibration did not see.

Inside the model, a clipped value's error is one of many that the next layers weigh; at an
output it is what the user reads. A search that clips the output to the calibration
histogram's least error is tuned to exactly those samples: with a few dozen of them, the
next sample's largest value often lies past the range (MTCNN RNet's box offsets: 0.33 on
held-out faces against 0.26 in calibration, 26 dB of output SQNR where the grid's rounding
allows 44). So a model output quantized by default (`mark_model_outputs`) is not clipped
and its range reaches past each end of the collected values by as far as its ``r`` most
extreme values spread (``r`` the values one sample gives, at most `TAIL_VALUES`): a new
sample passes the largest of n with chance 1/(n + 1), by about the spacing of the largest
values (Robson and Whitlock's estimate of a distribution's end, ``2 x(N) - x(N - r)``;
`unseen_range`). It never reaches past what the output's function can give (a sigmoid's
or a softmax's [0, 1], a tanh's [-1, 1]) nor below 0 when no collected value was negative.

    histogram [low, high] -> [low - (x(r) - low), high + (high - x(N - r))]
"""

from __future__ import annotations

import numpy as np

from model_compression_toolkit.core.graph import VALUE_PRESERVING, Graph, Node, OpKind

TAIL_VALUES = 8  # at most this many extreme values measure the spread of a tail
# the range a function's output cannot leave
_BOUNDS = {
    "sigmoid": (0.0, 1.0), "hardsigmoid": (0.0, 1.0), "hard_sigmoid": (0.0, 1.0), "softmax": (0.0, 1.0),
    "tanh": (-1.0, 1.0), "hardtanh": (-1.0, 1.0), "relu6": (0.0, 6.0),
}  # fmt: skip


def output_carrier(graph: Graph, name: str) -> Node:
    """The node whose grid the model output ``name`` carries: the output itself, or the
    producer of an output that only moves its values (a reshape, a flatten)."""
    node = graph.node(name)
    while node.quant.activation is None and node.kind in VALUE_PRESERVING:
        edges = graph.in_edges(node.name)
        if len(edges) != 1:
            break
        node = graph.node(edges[0].src)
    return node


def keep_outputs_float(graph: Graph, reason: str) -> list[str]:
    """Leave each model output's grid off (``reason`` says why), as pt2e's and NNCF's
    default quantizers do: the layers computing the outputs read quantized inputs with
    quantized weights and hand their result on unrounded. A carrier that also feeds a
    layer inside the model keeps its grid (that layer reads integers). Returns the nodes
    left float."""
    left = []
    for name, _ in graph.outputs:
        node = output_carrier(graph, name)
        if node.quant.activation is None or node.name in left or not _only_outputs(graph, node.name):
            continue
        node.quant.activation, node.quant.activation_float_reason = None, reason
        for other in graph.nodes():  # ``conv -> relu``: the conv was to be quantized after the relu
            if other.quant.fused_into == node.name:
                other.quant.fused_into = None
                other.quant.activation_float_reason = f"fused with {node.name!r}, which is {reason}"
        left.append(node.name)
    return left


def _only_outputs(graph: Graph, name: str) -> bool:
    """Whether ``name``'s output reaches nothing but model outputs (through ops that only move values)."""
    return all(r.kind in VALUE_PRESERVING and _only_outputs(graph, r.name) for r in graph.successors(name))


def float_tail(graph: Graph) -> list[str]:
    """The nodes at the end of the model that compute in float: no grid on their output,
    and every value they give reaches only model outputs or other such nodes (a model
    output left unrounded, the ``conv`` of an unrounded ``conv -> relu`` output, a last
    layer kept float). A runtime computes them after dequantizing their inputs; nothing
    inside the model reads them. In topological order."""
    outputs = {n for n, _ in graph.outputs}
    tail: set[str] = set()
    for node in reversed(graph.nodes()):
        readers = graph.successors(node.name)
        if (
            node.kind != OpKind.INPUT
            and node.quant.activation is None
            and (readers or node.name in outputs)
            and all(r.name in tail for r in readers)
        ):
            tail.add(node.name)
    for node in graph.nodes():  # an op that only moves values is unrounded when what it moves is
        if node.name in tail and node.kind in VALUE_PRESERVING:
            if not all(e.src in tail for e in graph.in_edges(node.name)):
                tail.discard(node.name)
    return [n.name for n in graph.nodes() if n.name in tail]


def mark_model_outputs(graph: Graph) -> list[str]:
    """Mark the quantizer of each model output (the node itself, or the node whose grid an
    output that only moves values carries) as a model output, with the values each sample
    gives it and its function's bounds. Returns the nodes marked."""
    marked = []
    for name, _ in graph.outputs:
        node = output_carrier(graph, name)
        act = node.quant.activation
        if act is None or node.name in marked:
            continue
        shape = node.output_shapes[0] if node.output_shapes else None
        act.model_output = True
        act.values_per_sample = (
            int(np.prod(shape[1:]))
            if shape and all(isinstance(d, int) and d > 0 for d in shape[1:])
            else None
        )
        function = "softmax" if node.kind == OpKind.SOFTMAX else str(node.attrs.get("function") or "")
        act.bounds = _BOUNDS.get((node.fused_activation or function).lower())
        marked.append(node.name)
    return marked


def tail_value(values: tuple, fraction: float, top: bool) -> float:
    """The value with ``fraction`` of the histogram's values beyond it (above it with
    ``top``, below it otherwise), each bin's values spread uniformly over the bin."""
    lo, hi, counts = values
    total = float(counts.sum())
    if top:
        lo, hi, counts = -hi[::-1], -lo[::-1], counts[::-1]
    below = np.cumsum(counts) - counts  # values in the bins before each bin
    want = fraction * total
    i = int(np.clip(np.searchsorted(below + counts, want), 0, len(counts) - 1))
    inside = (want - below[i]) / counts[i] if counts[i] > 0 else 0.0
    value = float(lo[i] + np.clip(inside, 0.0, 1.0) * (hi[i] - lo[i]))
    return -value if top else value


def unseen_range(
    values: tuple,
    low: float,
    high: float,
    count: int,
    values_per_sample: int | None,
    bounds: tuple[float, float] | None,
) -> tuple[float, float]:
    """``[low, high]`` widened at each end by the spread of its ``r`` most extreme values
    (``r = min(values_per_sample, TAIL_VALUES)``; a single sample or an unknown size: no
    widening), kept within ``bounds`` and, when ``low >= 0``, above 0."""
    if not values[0].size or not high > low or not values_per_sample or count <= values_per_sample:
        return low, high
    fraction = min(values_per_sample, TAIL_VALUES) / count
    new_low = low - max(tail_value(values, fraction, top=False) - low, 0.0)
    new_high = high + max(high - tail_value(values, fraction, top=True), 0.0)
    if low >= 0:
        new_low = max(new_low, 0.0)
    if bounds is not None:
        new_low, new_high = max(new_low, min(bounds[0], low)), min(new_high, max(bounds[1], high))
    return float(new_low), float(new_high)
