"""The framework-agnostic graph every stage works on.

A `Graph` holds a networkx `MultiDiGraph` (it does not inherit from it). Nodes are
`Node` objects keyed by their unique name; edges carry the index of the source's output
tensor and the index of the target's input, so a node's inputs are ordered and a node
feeding the same consumer twice (``x + x``) is two edges.

Backends read a model into a Graph and build a model back from one. Every transform goes
through the methods here, and `validate` checks the invariants after each.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import networkx as nx
import numpy as np

from model_compression_toolkit.core.quant_config import NodeQuantConfig
from model_compression_toolkit.errors import GraphValidationError

Shape = tuple  # a tensor shape; the batch dimension is None


class OpKind(str, Enum):
    """The neutral kind of a layer: what the core needs to know, whatever the framework."""

    INPUT = "input"
    CONSTANT = "constant"  # a tensor attribute read in the forward pass
    CONV = "conv"  # convolution, grouped and depthwise included
    CONV_TRANSPOSE = "conv_transpose"
    DENSE = "dense"  # fully connected / linear
    BATCH_NORM = "batch_norm"
    LAYER_NORM = "layer_norm"
    NORMALIZATION = "normalization"  # fixed affine rescaling (Rescaling, Normalization)
    ACTIVATION = "activation"  # elementwise non-linearity; attrs["function"] names it
    SOFTMAX = "softmax"
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    CONCAT = "concat"
    MATMUL = "matmul"  # product of two activations: matmul, bmm, einsum
    ATTENTION = "attention"  # scaled dot-product attention of query, key and value activations
    EMBEDDING = "embedding"  # a table lookup by integer ids; its output is an activation
    ELEMENTWISE = "elementwise"  # average, maximum, other elementwise merges
    POOL = "pool"  # max/avg pooling, adaptive or global included
    MEAN = "mean"  # reduction over axes
    RESHAPE = "reshape"  # flatten, view, reshape, permute, transpose
    PAD = "pad"  # zero padding, cropping
    RESIZE = "resize"  # upsampling
    DROPOUT = "dropout"
    IDENTITY = "identity"
    SHAPE = "shape"  # no activation: a non-tensor value (x.size(0)), indices or masks (integer,
    # bool, or float on the way to them or to an attention mask)
    UNKNOWN = "unknown"  # anything else: kept in float and passed through unchanged


# Ops whose output only moves or selects values of their input: quantizing their output
# again adds nothing, so they inherit their input's quantization.
VALUE_PRESERVING = frozenset({OpKind.RESHAPE, OpKind.DROPOUT, OpKind.IDENTITY, OpKind.PAD})
# Ops that carry a kernel quantized per output channel.
WEIGHTED = frozenset({OpKind.CONV, OpKind.CONV_TRANSPOSE, OpKind.DENSE})


@dataclass
class Node:
    """One layer or operation.

    Attributes:
        name: unique name, as the user knows the layer (module path, Keras layer name).
        kind: the neutral kind the core reasons about.
        layer_type: the framework's name for it (``Conv2d``, ``Conv2D``, ``add``).
        attrs: framework attributes as plain values (ints, floats, strings, tuples);
            shown in TensorBoard.
        weights: numpy arrays by neutral name (``kernel``, ``bias``; batch norm:
            ``gamma``, ``beta``, ``mean``, ``variance``).
        kernel_axes: for each quantizable weight, the axes of its output channels
            (``{"kernel": (0,)}`` for a PyTorch conv, ``{"kernel": (3,)}`` for Keras).
        kernel_in_axis: for each quantizable weight, the axis of its input channels
            (``{"kernel": 1}`` for a PyTorch conv or linear, ``{"kernel": 2}`` for a Keras
            Conv2D or DepthwiseConv2D, ``{"kernel": 0}`` for a Keras Dense); bias correction
            needs it, and leaves layers without it alone.
        input_shapes / output_shapes: with None for the batch dimension.
        channel_axis: the channel axis of the output activation (1 NCHW, -1 NHWC).
        fused_activation: a non-linearity the layer applies itself (Keras
            ``activation="relu"``), or None.
        origin: names of the original nodes this node stands for; its output equals
            the output of the last one (a conv with a folded batch norm: conv, bn).
        quant: the quantization configuration of the node at the current stage.
        payload: backend-private data needed to build the layer back; never logged.
    """

    name: str
    kind: OpKind
    layer_type: str
    attrs: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    kernel_axes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    kernel_in_axis: dict[str, int] = field(default_factory=dict)
    input_shapes: list[Shape] = field(default_factory=list)
    output_shapes: list[Shape] = field(default_factory=list)
    channel_axis: int | None = None
    fused_activation: str | None = None
    origin: list[str] = field(default_factory=list)
    quant: NodeQuantConfig = field(default_factory=NodeQuantConfig)
    payload: Any = None

    def __post_init__(self) -> None:
        if not self.origin:
            self.origin = [self.name]

    @property
    def output_reference(self) -> str:
        """The original node whose output this node's output reproduces."""
        return self.origin[-1]

    def weights_size(self) -> int:
        return int(sum(w.size for w in self.weights.values()))

    def output_size(self) -> int:
        """Elements of all output tensors for one sample (batch dimension dropped)."""
        total = 0
        for shape in self.output_shapes:
            total += int(np.prod([d for d in shape[1:] if d is not None], dtype=np.int64))
        return total


@dataclass(frozen=True)
class Edge:
    """``src`` output ``src_index`` feeds ``dst`` input ``dst_index``."""

    src: str
    dst: str
    src_index: int = 0
    dst_index: int = 0


class Graph:
    """A directed multigraph of `Node`s with ordered inputs and outputs."""

    def __init__(self, name: str, framework: str) -> None:
        self.name = name
        self.framework = framework
        self._g = nx.MultiDiGraph()
        self.inputs: list[str] = []  # input nodes, in the model's input order
        self.outputs: list[tuple[str, int]] = []  # (node, output index), in output order
        self.meta: dict[str, Any] = {}  # backend data about the whole model; never logged
        self._order: list[str] | None = None
        self._nodes: tuple[list[str], list[Node]] | None = None  # the nodes of that very order
        # node -> its sorted in/out edges, kept until an edit touches that node
        self._in: dict[str, tuple[Edge, ...]] = {}
        self._out: dict[str, tuple[Edge, ...]] = {}

    # ---------------------------------------------------------------- reading
    def __contains__(self, name: str) -> bool:
        return name in self._g

    def __len__(self) -> int:
        return self._g.number_of_nodes()

    def node(self, name: str) -> Node:
        try:
            return self._g.nodes[name]["node"]
        except KeyError:
            raise KeyError(f"no node named {name!r} in graph {self.name!r}") from None

    def nodes(self) -> list[Node]:
        """All nodes in a stable topological order."""
        if self._order is None or self._nodes is None or self._nodes[0] is not self._order:
            self.topological_order()  # a new order list: an edit forgot the old one
            assert self._order is not None
            self._nodes = (self._order, [self._g.nodes[n]["node"] for n in self._order])
        return list(self._nodes[1])

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes())

    def topological_order(self) -> list[str]:
        if self._order is None:
            self._order = list(nx.topological_sort(self._g))
        return list(self._order)

    def edges(self) -> list[Edge]:
        return [data["edge"] for _, _, data in self._g.edges(data=True)]

    def in_edges(self, name: str) -> list[Edge]:
        """Edges into ``name``, sorted by the input they feed (sorted once per edit of the node)."""
        edges = self._in.get(name)
        if edges is None:
            found = [d["edge"] for _, _, d in self._g.in_edges(name, data=True)]
            edges = self._in[name] = tuple(sorted(found, key=lambda e: e.dst_index))
        return list(edges)

    def out_edges(self, name: str) -> list[Edge]:
        """Edges out of ``name``, sorted by output, then consumer and its input."""
        edges = self._out.get(name)
        if edges is None:
            found = [d["edge"] for _, _, d in self._g.out_edges(name, data=True)]
            edges = self._out[name] = tuple(sorted(found, key=lambda e: (e.src_index, e.dst, e.dst_index)))
        return list(edges)

    def _edited(self, src: str, dst: str) -> None:
        """Forget what an edit of the edge ``src -> dst`` changes: the order, the edge lists."""
        self._order = None
        self._out.pop(src, None)
        self._in.pop(dst, None)

    def predecessors(self, name: str) -> list[Node]:
        return [self.node(e.src) for e in self.in_edges(name)]

    def successors(self, name: str) -> list[Node]:
        seen: dict[str, None] = {}
        for e in self.out_edges(name):
            seen.setdefault(e.dst)
        return [self.node(n) for n in seen]

    def ancestors(self, name: str) -> set[str]:
        """Every node whose output reaches ``name``."""
        return set(nx.ancestors(self._g, name))

    def descendants(self, name: str) -> set[str]:
        """Every node ``name``'s output reaches."""
        return set(nx.descendants(self._g, name))

    def is_output(self, name: str) -> bool:
        return any(n == name for n, _ in self.outputs)

    def consumers_count(self, name: str) -> int:
        """Uses of the node's outputs, graph outputs included."""
        return len(self.out_edges(name)) + sum(1 for n, _ in self.outputs if n == name)

    def output_nodes(self) -> list[Node]:
        seen: dict[str, None] = {}
        for n, _ in self.outputs:
            seen.setdefault(n)
        return [self.node(n) for n in seen]

    def input_nodes(self) -> list[Node]:
        return [self.node(n) for n in self.inputs]

    # ---------------------------------------------------------------- editing
    def add_node(self, node: Node) -> Node:
        if node.name in self._g:
            raise GraphValidationError(f"a node named {node.name!r} already exists in {self.name!r}")
        self._g.add_node(node.name, node=node)
        self._edited(node.name, node.name)
        return node

    def add_edge(self, src: str, dst: str, src_index: int = 0, dst_index: int = 0) -> Edge:
        for n in (src, dst):
            if n not in self._g:
                raise GraphValidationError(f"edge {src!r} -> {dst!r}: no node named {n!r}")
        edge = Edge(src, dst, src_index, dst_index)
        self._g.add_edge(src, dst, edge=edge)
        self._edited(src, dst)
        return edge

    def remove_edge(self, edge: Edge) -> None:
        for key, data in list(self._g.get_edge_data(edge.src, edge.dst, default={}).items()):
            if data["edge"] == edge:
                self._g.remove_edge(edge.src, edge.dst, key)
                self._edited(edge.src, edge.dst)
                return
        raise GraphValidationError(f"no edge {edge} in {self.name!r}")

    def remove_node(self, name: str) -> None:
        """Remove a node that nothing uses any more."""
        if self.out_edges(name) or self.is_output(name):
            raise GraphValidationError(f"cannot remove {name!r}: its output is still used")
        self._g.remove_node(name)
        self.inputs = [n for n in self.inputs if n != name]
        self._order = None
        self._in.clear()  # its input edges went with it: their sources' lists changed
        self._out.clear()

    def redirect_uses(self, old: str, new: str, old_index: int = 0, new_index: int = 0) -> None:
        """Make every user of ``old``'s output ``old_index`` read ``new``'s output ``new_index``.

        ``old -> consumer`` becomes ``new -> consumer``, graph outputs included.
        """
        for e in self.out_edges(old):
            if e.src_index == old_index:
                self.remove_edge(e)
                self.add_edge(new, e.dst, new_index, e.dst_index)
        self.outputs = [(new, new_index) if (n, i) == (old, old_index) else (n, i) for n, i in self.outputs]

    def bypass(self, name: str) -> None:
        """Remove a one-input, one-output node, wiring its input to its users.

        ``prev -> node -> next`` becomes ``prev -> next``.
        """
        ins = self.in_edges(name)
        if len(ins) != 1:
            raise GraphValidationError(f"cannot bypass {name!r}: it has {len(ins)} inputs, expected 1")
        self.redirect_uses(name, ins[0].src, 0, ins[0].src_index)
        self.remove_edge(ins[0])
        self.remove_node(name)

    def copy(self, quant: bool = True) -> Graph:
        """A copy whose nodes, edges and lists can change without touching this graph.

        Weight arrays and backend payloads are shared: transforms replace them, never
        modify them in place.

        Args:
            quant: copy each node's quantization config (deeply); False gives every node
                an empty `NodeQuantConfig` instead, for a caller that sets its own (the
                similarity's variants with one quantizer on): no deep copy thrown away.
        """
        new = Graph(self.name, self.framework)
        for node in self.nodes():
            new.add_node(
                dataclasses.replace(
                    node,
                    attrs=dict(node.attrs),
                    weights=dict(node.weights),
                    kernel_axes=dict(node.kernel_axes),
                    kernel_in_axis=dict(node.kernel_in_axis),
                    input_shapes=list(node.input_shapes),
                    output_shapes=list(node.output_shapes),
                    origin=list(node.origin),
                    quant=copy.deepcopy(node.quant) if quant else NodeQuantConfig(),
                )
            )
        for e in self.edges():
            new.add_edge(e.src, e.dst, e.src_index, e.dst_index)
        new.inputs, new.outputs, new.meta = list(self.inputs), list(self.outputs), dict(self.meta)
        new._order = None if self._order is None else list(self._order)  # same nodes, same edges
        new._in, new._out = dict(self._in), dict(self._out)  # equal, immutable edges
        return new

    # ---------------------------------------------------------------- checks
    def validate(self) -> None:
        """Check the invariants every stage relies on; raise GraphValidationError if one fails."""
        problems: list[str] = []
        if not nx.is_directed_acyclic_graph(self._g):
            problems.append("the graph has a cycle")
        for name in self._g.nodes:
            node = self.node(name)
            if node.name != name:
                problems.append(f"node keyed {name!r} is named {node.name!r}")
            indices = sorted(e.dst_index for e in self.in_edges(name))
            if indices != list(range(len(indices))):
                problems.append(f"{name!r} has input indices {indices}, expected 0..{len(indices) - 1}")
            for e in self.out_edges(name):
                if node.output_shapes and e.src_index >= len(node.output_shapes):
                    problems.append(f"{name!r} has no output {e.src_index} (used by {e.dst!r})")
            for wname in node.kernel_axes:
                if wname not in node.weights:
                    problems.append(f"{name!r} quantizes weight {wname!r} that it does not have")
        for n in self.inputs:
            if n not in self._g:
                problems.append(f"input {n!r} is not a node")
            elif self.in_edges(n):
                problems.append(f"input {n!r} has incoming edges")
        if not self.outputs:
            problems.append("the graph has no outputs")
        for n, _ in self.outputs:
            if n not in self._g:
                problems.append(f"output {n!r} is not a node")
        if problems:
            raise GraphValidationError(f"graph {self.name!r} is inconsistent: " + "; ".join(problems))

    # ---------------------------------------------------------------- helpers
    def find(self, kinds: Iterable[OpKind]) -> list[Node]:
        wanted = set(kinds)
        return [n for n in self.nodes() if n.kind in wanted]

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {self.framework}, {len(self)} nodes)"
