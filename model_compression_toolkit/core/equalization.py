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

Across a join, as real models are built (``find_pairs`` finds these too)::

    a -> relu -> concat -> relu / pool -> c      a's channel c is c's input channel c
    b -> relu ---^                               b's channel c is c's input channel n_a + c

    a -> bn ---> add -> relu -> c, d             a's and b's channel c both / s_c (one
    b -> bn ----^                                scale: the add sums them), c's and d's x s_c

Each input of a concat is a pair of its own with a slice of the consumer's input channels
(`EqualizationPair.offset`); the inputs of an add share one scale (`EqualizationPair.partners`),
taken from the largest of their ranges. A join's output may feed several consumers
(`EqualizationPair.also`), each through homogeneous ops only; an add with an input that
is not a producer's, or whose output reaches anything but a weighted layer (the next
residual add, a model output), is left alone.

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
_JOINS = frozenset({OpKind.CONCAT, OpKind.ADD})
_LIMIT = 1e6  # a scale further than this from 1 is not applied (a dead channel, a zero kernel)


@dataclass(frozen=True)
class Branch:
    """A producer and the homogeneous ops between it and a join.

    Attributes:
        producer: the conv, dense or batch norm whose output channels are scaled down.
        between: the ops from it to the join (``("bn_relu",)``).
        kernel_of: the layer whose kernel gives the producer's range.
    """

    producer: str
    between: tuple[str, ...] = ()
    kernel_of: str = ""


@dataclass(frozen=True)
class EqualizationPair:
    """A producer, the homogeneous ops after it, and the layer that consumes them.

    Attributes:
        producer: the conv, dense or batch norm whose output channels are scaled down.
        consumer: the conv or dense whose input channels are scaled up.
        between: the ops between them (``("act2", "pool")``), whose outputs change scale
            too; through a join, the join and the ops after it included.
        kernel_of: the layer whose kernel gives the producer's range (the producer, or the
            conv a batch norm follows).
        join: the concat or add on the way, or ``""``.
        offset: the consumers' input channel of the producer's channel 0 (a concat's
            second input: the first input's channel count).
        partners: the other inputs of an add, scaled by the same ``s_c``.
        also: the join's other consumers, whose input channels are scaled up as well.
    """

    producer: str
    consumer: str
    between: tuple[str, ...] = ()
    kernel_of: str = ""
    join: str = ""
    offset: int = 0
    partners: tuple[Branch, ...] = ()
    also: tuple[str, ...] = ()

    @property
    def branches(self) -> tuple[Branch, ...]:
        """The producers scaled down with the ops up to the join: the producer's, then the partners'."""
        own = self.between[: self.between.index(self.join)] if self.join else self.between
        return (Branch(self.producer, own, self.kernel_of), *self.partners)

    @property
    def consumers(self) -> tuple[str, ...]:
        return (self.consumer, *self.also)

    @property
    def changed_outputs(self) -> tuple[str, ...]:
        """The nodes whose outputs equalization rescales channel by channel."""
        partners = tuple(n for b in self.partners for n in (b.producer, *b.between))
        return (self.producer, *self.between, *partners)

    @property
    def changed_weights(self) -> tuple[str, ...]:
        """The nodes whose weights equalization changes: the producers, then the consumers."""
        return (*(b.producer for b in self.branches), *self.consumers)

    def text(self) -> str:
        """``conv2 -> act2 -> pool -> conv3``; through an add, ``(a -> bn_a) + (b) -> add -> relu -> c``;
        through a concat, its channels: ``a -> relu_a -> cat[4:8] -> c``."""
        if not self.join:
            return " -> ".join((self.producer, *self.between, self.consumer))
        after = self.between[self.between.index(self.join) + 1 :]
        branches = [" -> ".join((b.producer, *b.between)) for b in self.branches]
        head = " + ".join(f"({b})" for b in branches) if self.partners else branches[0]
        return " -> ".join((head, self.join, *after, ", ".join(self.consumers)))


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
    axis = _out_axis(prev)
    if prev.kind not in WEIGHTED or prev.fused_activation is not None or axis is None:
        return None
    if graph.consumers_count(prev.name) != 1 or prev.weights["kernel"].shape[axis] != _channels(node):
        return None
    return prev


def _consumer_fits(graph: Graph, consumer: Node, reads: Node, channels: int) -> bool:
    """Whether ``consumer`` reads ``reads``' output alone, its kernel's input channels its channels."""
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
        rank = len(reads.output_shapes[0]) if reads.output_shapes else 0
        axis = reads.channel_axis
        return rank == 2 or (axis is not None and rank > 0 and axis % rank == rank - 1)
    return True


def _chain_pair(graph: Graph, node: Node) -> EqualizationPair | None:
    """``node -> homogeneous ops -> consumer``, each read once, or None."""
    source = _kernel_source(graph, node)
    channels = _channels(node) if source is not None else None
    if source is None or channels is None:
        return None
    between: list[str] = []
    current = node
    while graph.consumers_count(current.name) == 1 and not graph.is_output(current.name):
        (nxt,) = graph.successors(current.name)
        if nxt.kind in WEIGHTED:
            fits = _consumer_fits(graph, nxt, node, channels)
            return EqualizationPair(node.name, nxt.name, tuple(between), source.name) if fits else None
        if not _homogeneous(nxt) or len(graph.in_edges(nxt.name)) != 1:
            return None
        between.append(nxt.name)
        current = nxt
    return None


def _branch(graph: Graph, name: str) -> tuple[Branch, int] | None:
    """The producer behind a join's input ``name`` through homogeneous ops, each read once
    (by the next), and its channel count; None when the input is no producer's."""
    between: list[str] = []
    node = graph.node(name)
    while graph.consumers_count(node.name) == 1 and not graph.is_output(node.name):
        source = _kernel_source(graph, node)
        channels = _channels(node) if source is not None else None
        if source is not None and channels is not None:
            return Branch(node.name, tuple(reversed(between)), source.name), channels
        ins = graph.in_edges(node.name)
        if not _homogeneous(node) or len(ins) != 1:
            return None
        between.append(node.name)
        node = graph.node(ins[0].src)
    return None


def _join_axis(node: Node) -> int | None:
    """The channel axis of a concat or add (positive), when its inputs are joined along it,
    or None (a stack, a broadcast, shapes unknown)."""
    if not node.output_shapes or not node.input_shapes or node.channel_axis is None:
        return None
    out, shapes = node.output_shapes[0], node.input_shapes
    rank = len(out)
    axis = node.channel_axis % rank if rank else 0
    if rank < 2 or any(len(s) != rank for s in shapes) or out[axis] is None:
        return None
    if any(s[a] != out[a] for s in shapes for a in range(1, rank) if a != axis):
        return None
    sizes = [s[axis] for s in shapes]
    joined = sum(sizes) == out[axis] if node.kind == OpKind.CONCAT else all(n == out[axis] for n in sizes)
    return axis if None not in sizes and joined else None


def _after(graph: Graph, join: Node, channels: int) -> tuple[list[str], list[str]] | None:
    """The homogeneous ops after ``join`` and the weighted layers they lead to, every
    path from ``join`` ending in one that fits; None when one goes anywhere else."""
    ops: list[str] = []
    consumers: list[str] = []
    frontier = [join]
    while frontier:
        current = frontier.pop()
        if graph.is_output(current.name):
            return None
        for nxt in graph.successors(current.name):
            if nxt.kind in WEIGHTED and _consumer_fits(graph, nxt, current, channels):
                consumers.append(nxt.name)
            elif _homogeneous(nxt) and len(graph.in_edges(nxt.name)) == 1:
                ops.append(nxt.name)
                frontier.append(nxt)
            else:
                return None
    return (ops, consumers) if consumers else None


def _join_pairs(graph: Graph, join: Node) -> list[EqualizationPair]:
    """The pairs through a concat (one per input a producer's) or an add (one for all its
    inputs, each a producer's)."""
    axis = _join_axis(join)
    ins = graph.in_edges(join.name)
    if axis is None or len(ins) < 2 or len(ins) != len(join.input_shapes):
        return []
    total = join.output_shapes[0][axis]
    after = _after(graph, join, total) if total is not None else None
    if after is None:
        return []
    ops, (consumer, *also) = after
    found = [_branch(graph, e.src) for e in ins]
    sizes = [join.input_shapes[e.dst_index][axis] for e in ins]
    if join.kind == OpKind.ADD:
        if any(f is None or f[1] != total for f in found):
            return []
        (main, *partners) = [f[0] for f in found if f is not None]
        tail = (*main.between, join.name, *ops)
        pair = EqualizationPair(main.producer, consumer, tail, main.kernel_of, join=join.name,
                                partners=tuple(partners), also=tuple(also))  # fmt: skip
        return [pair]
    pairs, offset = [], 0
    for f, size in zip(found, sizes):
        if f is not None and f[1] == size:
            b = f[0]
            tail = (*b.between, join.name, *ops)
            pairs.append(EqualizationPair(b.producer, consumer, tail, b.kernel_of, join=join.name,
                                          offset=offset, also=tuple(also)))  # fmt: skip
        offset += int(size or 0)
    return pairs


def find_pairs(graph: Graph) -> list[EqualizationPair]:
    """Every producer -> homogeneous ops -> consumer chain of ``graph`` whose values go
    nowhere else (each node of the chain read once, none a model output), and every
    concat or add whose inputs are producers' and whose output reaches weighted layers only
    (the module doc); in graph order."""
    pairs = []
    for node in graph.nodes():
        if node.kind in _JOINS:
            pairs += _join_pairs(graph, node)
        elif (pair := _chain_pair(graph, node)) is not None:
            pairs.append(pair)
    return pairs


def _along(values: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    shape = [1] * ndim
    shape[axis] = -1
    return values.reshape(shape)


def _channel_max(kernel: np.ndarray, axis: int) -> np.ndarray:
    moved = np.moveaxis(np.abs(kernel.astype(np.float64)), axis, 0)
    return moved.reshape(moved.shape[0], -1).max(axis=1)


def _kernel(node: Node) -> tuple[np.ndarray, int]:
    """A producer's kernel and its output channel axis."""
    axis = _out_axis(node)
    if axis is None:
        raise ValueError(
            f"expected a kernel with one output channel axis in {node.name!r}; got {node.kernel_axes}"
        )
    return node.weights["kernel"], axis


def _in_axis(node: Node) -> int:
    return node.kernel_in_axis["kernel"]


def _producer_range(graph: Graph, branch: Branch) -> np.ndarray:
    """``r1_c``: the largest absolute weight of each output channel, a batch norm's factor included."""
    producer = graph.node(branch.producer)
    r1 = _channel_max(*_kernel(graph.node(branch.kernel_of or branch.producer)))
    if producer.kind == OpKind.BATCH_NORM:
        w = producer.weights
        eps = float(producer.attrs.get("epsilon", 1e-3))
        r1 = r1 * np.abs(w["gamma"].astype(np.float64) / np.sqrt(w["variance"].astype(np.float64) + eps))
    return r1


def pair_scales(graph: Graph, pair: EqualizationPair) -> np.ndarray:
    """``s_c = sqrt(r1_c / r2_c)`` of one pair (1 where a range is zero or the scale
    extreme); through an add ``r1_c`` is the largest of its inputs', and with several
    consumers ``r2_c`` the largest of theirs."""
    r1 = np.max([_producer_range(graph, b) for b in pair.branches], axis=0)
    stop = pair.offset + r1.size
    r2 = np.max([_channel_max(graph.node(c).weights["kernel"], _in_axis(graph.node(c)))[pair.offset : stop]
                 for c in pair.consumers], axis=0)  # fmt: skip
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.sqrt(r1 / r2)
    keep = ~np.isfinite(s) | (s <= 1 / _LIMIT) | (s >= _LIMIT)
    return np.where(keep, 1.0, s)


def _scale_down(node: Node, s: np.ndarray) -> None:
    """A producer's output channel ``c`` divided by ``s_c``: gamma and beta, or kernel and bias."""
    if node.kind == OpKind.BATCH_NORM:
        for name in ("gamma", "beta"):
            w = node.weights[name]
            node.weights[name] = (w / s).astype(w.dtype)
        return
    kernel, axis = _kernel(node)
    node.weights["kernel"] = (kernel / _along(s, axis, kernel.ndim)).astype(kernel.dtype)
    if "bias" in node.weights:
        bias = node.weights["bias"]
        node.weights["bias"] = (bias / s).astype(bias.dtype)


def _scale_up(node: Node, s: np.ndarray, offset: int) -> None:
    """A consumer's input channel ``offset + c`` multiplied by ``s_c`` (and its bias
    correction's input mean divided by it)."""
    kernel, axis = node.weights["kernel"], _in_axis(node)
    full = np.ones(kernel.shape[axis])
    full[offset : offset + s.size] = s
    node.weights["kernel"] = (kernel * _along(full, axis, kernel.ndim)).astype(kernel.dtype)
    moments = node.quant.input_moments  # error-compensated rounding: the input's channels are divided by s
    node.quant.input_moments = None if moments is None else moments.scaled(full)
    mean = node.quant.input_mean
    if mean is not None and np.size(mean) == full.size:
        mean = np.asarray(mean)
        node.quant.input_mean = (mean / full.reshape(mean.shape)).astype(mean.dtype)


def equalize(
    graph: Graph, pairs: Sequence[EqualizationPair] | None = None
) -> tuple[Graph, dict[str, np.ndarray]]:
    """A copy of ``graph`` with ``pairs`` (None: every pair `find_pairs` finds) equalized.

    ``producer -> ops -> consumer`` becomes ``producer' -> ops -> consumer'`` with the
    producer's output channel ``c`` (kernel and bias, or gamma and beta) divided by
    ``s_c`` and the consumer's input channel ``c`` (``offset + c`` behind a concat)
    multiplied by it; an add's partners are divided by the same ``s_c``, a join's other
    consumers multiplied by it. A consumer's ``quant.input_mean`` (bias correction) is
    divided by ``s_c`` as its input is, and so are its input moments (error-compensated
    rounding); grids are left as they were (select them again on the new values).

    Returns:
        The new graph, and the scales applied by producer name.
    """
    out = graph.copy()
    applied: dict[str, np.ndarray] = {}
    for pair in find_pairs(out) if pairs is None else pairs:
        s = pair_scales(out, pair)
        if np.allclose(s, 1.0):
            continue
        for branch in pair.branches:
            _scale_down(out.node(branch.producer), s)
        for name in pair.consumers:
            _scale_up(out.node(name), s, pair.offset)
        applied[pair.producer] = s
    return out, applied
