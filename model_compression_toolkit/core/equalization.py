"""Cross-layer scale equalization (Nagel et al. 2019, "Data-Free Quantization"): the scale
of each channel moved from a producer's weights into its consumer's, the float function
unchanged::

    producer (output channel c / s_c) -> relu / pool -> consumer (input channel c * s_c)

ReLU, leaky ReLU, max and average pooling, dropout and identity are positively
homogeneous per channel (``f(x / s) = f(x) / s`` for ``s > 0``), so the consumer sees
exactly what it saw before. A clipped activation (ReLU6, hard tanh) is not: its cap
would have to shrink too, so a pair through one is left alone.

``s_c = sqrt(r1_c / r2_c)``, with ``r1_c`` the largest absolute weight of the producer's
output channel ``c`` (through a batch norm, the weights it folds into) and ``r2_c`` that
of the consumer's input channel ``c``: both become ``sqrt(r1_c * r2_c)``. An outlier
channel, ``k`` times larger in the producer and ``k`` times smaller in the consumer, comes
back to the others' range, and so does its activation, which then no longer ruins a
per-tensor grid.

The producer is a conv or dense layer (its kernel's output channels and its bias scaled),
or a batch norm that follows one (its gamma and beta scaled: the graph as read, before
batch norms are folded). Pure numpy: the transform returns a new graph and never changes
the arrays of the one it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from model_compression_toolkit.core.graph import WEIGHTED, Graph, Node, OpKind

HOMOGENEOUS_FUNCTIONS = frozenset({"relu", "leaky_relu"})  # f(x / s) = f(x) / s for s > 0
_PASSING = frozenset({OpKind.POOL, OpKind.DROPOUT, OpKind.IDENTITY})
_LIMIT = 1e6  # a scale further than this from 1 is not applied (a dead channel, a zero kernel)


@dataclass(frozen=True)
class EqualizationPair:
    """A producer, the homogeneous ops after it, and the layer that consumes them.

    Attributes:
        producer: the conv, dense or batch norm whose output channels are scaled down.
        consumer: the conv or dense whose input channels are scaled up.
        between: the ops between them (``("act2", "pool")``), whose outputs change scale too.
        kernel_of: the layer whose kernel gives the producer's range (the producer, or the
            conv a batch norm follows).
    """

    producer: str
    consumer: str
    between: tuple[str, ...] = ()
    kernel_of: str = ""

    @property
    def changed_outputs(self) -> tuple[str, ...]:
        """The nodes whose outputs equalization rescales channel by channel."""
        return (self.producer, *self.between)


def _homogeneous(node: Node) -> bool:
    if node.kind == OpKind.ACTIVATION:
        capped = node.attrs.get("max_value") is not None or bool(node.attrs.get("threshold"))  # Keras ReLU(4)
        return str(node.attrs.get("function") or "").lower() in HOMOGENEOUS_FUNCTIONS and not capped
    return node.kind in _PASSING


def _out_axis(node: Node) -> int | None:
    axes = node.kernel_axes.get("kernel")
    return axes[0] if axes and len(axes) == 1 and "kernel" in node.weights else None


def _channels(node: Node) -> int | None:
    """The producer's output channels."""
    if node.kind == OpKind.BATCH_NORM:
        return int(node.weights["gamma"].size) if "gamma" in node.weights and "beta" in node.weights else None
    axis = _out_axis(node)
    return None if axis is None else int(node.weights["kernel"].shape[axis])


def _kernel_source(graph: Graph, node: Node) -> Node | None:
    """The layer whose kernel gives ``node``'s per-channel range: itself, or the conv or
    dense a batch norm reads alone."""
    if node.kind in WEIGHTED:
        fused = node.fused_activation
        return node if fused is None or str(fused).lower() in HOMOGENEOUS_FUNCTIONS else None
    if node.kind != OpKind.BATCH_NORM or node.fused_activation is not None:
        return None
    ins = graph.in_edges(node.name)
    if len(ins) != 1:
        return None
    prev = graph.node(ins[0].src)
    if prev.kind not in WEIGHTED or prev.fused_activation is not None or _out_axis(prev) is None:
        return None
    if graph.consumers_count(prev.name) != 1 or prev.weights["kernel"].shape[_out_axis(prev)] != _channels(
        node
    ):
        return None
    return prev


def _consumer_fits(graph: Graph, consumer: Node, producer: Node, channels: int) -> bool:
    in_axis = consumer.kernel_in_axis.get("kernel")
    if (
        consumer.kind not in (OpKind.CONV, OpKind.DENSE)
        or in_axis is None
        or "kernel" not in consumer.weights
    ):
        return False
    if consumer.weights["kernel"].shape[in_axis] != channels or len(graph.in_edges(consumer.name)) != 1:
        return False
    if consumer.kind == OpKind.DENSE:  # a dense layer reads the last axis: it must be the channel axis
        rank = len(producer.output_shapes[0]) if producer.output_shapes else 0
        axis = producer.channel_axis
        return rank == 2 or (axis is not None and rank > 0 and axis % rank == rank - 1)
    return True


def find_pairs(graph: Graph) -> list[EqualizationPair]:
    """Every producer -> homogeneous ops -> consumer chain of ``graph`` whose values go
    nowhere else (each node of the chain read once, none a model output)."""
    pairs = []
    for node in graph.nodes():
        source = _kernel_source(graph, node)
        channels = _channels(node) if source is not None else None
        if source is None or channels is None:
            continue
        between: list[str] = []
        current = node
        while graph.consumers_count(current.name) == 1 and not graph.is_output(current.name):
            (nxt,) = graph.successors(current.name)
            if nxt.kind in WEIGHTED:
                if _consumer_fits(graph, nxt, node, channels):
                    pairs.append(EqualizationPair(node.name, nxt.name, tuple(between), source.name))
                break
            if not _homogeneous(nxt) or len(graph.in_edges(nxt.name)) != 1:
                break
            between.append(nxt.name)
            current = nxt
    return pairs


def _along(values: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    shape = [1] * ndim
    shape[axis] = -1
    return values.reshape(shape)


def _channel_max(kernel: np.ndarray, axis: int) -> np.ndarray:
    moved = np.moveaxis(np.abs(kernel.astype(np.float64)), axis, 0)
    return moved.reshape(moved.shape[0], -1).max(axis=1)


def pair_scales(graph: Graph, pair: EqualizationPair) -> np.ndarray:
    """``s_c = sqrt(r1_c / r2_c)`` of one pair (1 where a range is zero or the scale extreme)."""
    producer, source, consumer = (
        graph.node(pair.producer),
        graph.node(pair.kernel_of),
        graph.node(pair.consumer),
    )
    r1 = _channel_max(source.weights["kernel"], _out_axis(source))
    if producer.kind == OpKind.BATCH_NORM:
        w = producer.weights
        r1 = r1 * np.abs(
            w["gamma"].astype(np.float64)
            / np.sqrt(w["variance"].astype(np.float64) + producer.attrs.get("epsilon", 1e-3))
        )
    r2 = _channel_max(consumer.weights["kernel"], consumer.kernel_in_axis["kernel"])
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.sqrt(r1 / r2)
    keep = ~np.isfinite(s) | (s <= 1 / _LIMIT) | (s >= _LIMIT)
    return np.where(keep, 1.0, s)


def equalize(
    graph: Graph, pairs: Sequence[EqualizationPair] | None = None
) -> tuple[Graph, dict[str, np.ndarray]]:
    """A copy of ``graph`` with ``pairs`` (None: every pair `find_pairs` finds) equalized.

    ``producer -> ops -> consumer`` becomes ``producer' -> ops -> consumer'`` with the
    producer's output channel ``c`` (kernel and bias, or gamma and beta) divided by
    ``s_c`` and the consumer's input channel ``c`` multiplied by it. A consumer's
    ``quant.input_mean`` (bias correction) is divided by ``s_c`` as its input is; grids
    are left as they were (select them again on the new values).

    Returns:
        The new graph, and the scales applied by producer name.
    """
    out = graph.copy()
    applied: dict[str, np.ndarray] = {}
    for pair in find_pairs(out) if pairs is None else pairs:
        s = pair_scales(out, pair)
        if np.allclose(s, 1.0):
            continue
        producer, consumer = out.node(pair.producer), out.node(pair.consumer)
        if producer.kind == OpKind.BATCH_NORM:
            for name in ("gamma", "beta"):
                w = producer.weights[name]
                producer.weights[name] = (w / s).astype(w.dtype)
        else:
            kernel, axis = producer.weights["kernel"], _out_axis(producer)
            producer.weights["kernel"] = (kernel / _along(s, axis, kernel.ndim)).astype(kernel.dtype)
            if "bias" in producer.weights:
                bias = producer.weights["bias"]
                producer.weights["bias"] = (bias / s).astype(bias.dtype)
        kernel, axis = consumer.weights["kernel"], consumer.kernel_in_axis["kernel"]
        consumer.weights["kernel"] = (kernel * _along(s, axis, kernel.ndim)).astype(kernel.dtype)
        mean = consumer.quant.input_mean
        if mean is not None and np.size(mean) == s.size:
            consumer.quant.input_mean = (np.asarray(mean) / s.reshape(np.shape(mean))).astype(
                np.asarray(mean).dtype
            )
        applied[pair.producer] = s
    return out, applied
