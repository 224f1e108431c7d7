"""Nodes that compute no activation: indices, positions and attention masks.

A model computes more than activations: a Hugging Face model turns ``attention_mask`` into
a boolean or additive mask, T5 buckets relative positions with ``log`` on integer
positions, a ViT builds position ids. Those nodes have nothing to quantize (a mask's
``-inf`` on an 8-bit grid would even break the attention), so they become OpKind.SHAPE::

    ids -> ge -> and -> sdpa(q, k, v, attn_mask=.)       every node before attn_mask: SHAPE
    positions -> float -> log -> long -> embedding        log, float: SHAPE

A node is SHAPE when its outputs hold no floating-point tensor, or when everything that
reads it is SHAPE (a layer with weights excepted: its kind is its op's) or the attention mask of a scaled dot-product attention, or when its
value is computed from shapes (and constants) alone, as YOLOv8's anchor grid exported to
ONNX is (an 8-bit grid on pixel coordinates would move the boxes)::

    x -> Shape -> Gather -> Cast -> Range -> Add(0.5) -> Expand -> Concat -> Sub(., boxes)
                                    Range ... Concat: SHAPE             Sub: an activation
"""

from __future__ import annotations

from model_compression_toolkit.core.graph import VALUE_PRESERVING, Graph, Node, OpKind
from model_compression_toolkit.pytorch.ops import Ref

_MASK_KEYWORD, _MASK_POSITION = "attn_mask", 3  # F.scaled_dot_product_attention(q, k, v, attn_mask)


def mask_inputs(graph: Graph, name: str) -> set[int]:
    """The input indices of an ATTENTION node that carry its mask."""
    node = graph.node(name)
    payload = node.payload or {}
    args, kwargs = payload.get("args", ()), payload.get("kwargs", {})
    mask = args[_MASK_POSITION] if len(args) > _MASK_POSITION else kwargs.get(_MASK_KEYWORD)
    return {mask.index} if isinstance(mask, Ref) else set()


def no_activation(graph: Graph) -> list[str]:
    """Turn every node on the way to indices or an attention mask into OpKind.SHAPE (see the
    module docstring). Returns their names."""
    masks = {n.name: mask_inputs(graph, n.name) for n in graph.find((OpKind.ATTENTION,))}
    changed = from_shapes(graph)
    for name in reversed(graph.topological_order()):
        node = graph.node(name)
        if node.kind in (OpKind.INPUT, OpKind.CONSTANT, OpKind.SHAPE) or graph.is_output(name):
            continue
        if node.weights:  # a layer's kind is its op's: a Linear before argmax keeps its kernel quantized
            continue
        uses = graph.out_edges(name)
        if uses and all(
            graph.node(e.dst).kind == OpKind.SHAPE or e.dst_index in masks.get(e.dst, ()) for e in uses
        ):
            node.kind = OpKind.SHAPE
            changed.append(name)
    return changed


def from_shapes(graph: Graph) -> list[str]:
    """Turn every node whose value depends on the inputs' shapes only, not on their values,
    into OpKind.SHAPE: an op that moves values (`VALUE_PRESERVING`) when its first input is
    such a node (the others give sizes: ``class_token.expand(n, -1, -1)`` stays a reshape
    of a constant), any other op when one of its inputs is. Token ids reshaped to a SHAPE
    node still carry the input's values: an embedding of them stays an activation.
    Returns their names."""
    valued: dict[str, bool] = {}  # the value depends on an input's values
    derived: set[str] = set()
    changed = []
    for name in graph.topological_order():
        node = graph.node(name)
        edges = sorted(graph.in_edges(name), key=lambda e: e.dst_index)
        sources = [e.src for e in edges]
        if node.kind in (OpKind.INPUT, OpKind.CONSTANT) or _reads_shape(node):
            valued[name] = node.kind == OpKind.INPUT
        else:
            valued[name] = any(valued.get(s, True) for s in sources)
        if valued[name] or node.kind in (OpKind.INPUT, OpKind.CONSTANT) or not edges:
            continue
        if node.kind == OpKind.SHAPE:
            derived.add(name)
            continue
        first = sources[0] in derived
        if first if node.kind in VALUE_PRESERVING else any(s in derived for s in sources):
            node.kind = OpKind.SHAPE
            derived.add(name)
            changed.append(name)
    return changed


_SHAPE_READERS = frozenset({"size", "dim", "numel", "sym_size", "sym_numel", "len", "OnnxShape"})


def _reads_shape(node: Node) -> bool:
    """Whether the node reads its input's shape only: ``x.size(0)``, ``x.shape``, ``len(x)``,
    ATen's ``sym_size``, onnx2torch's Shape."""
    payload = node.payload or {}
    op, target, args = payload.get("op"), payload.get("target"), payload.get("args", ())
    if op == "call_method":
        return target in _SHAPE_READERS
    if op == "call_module":
        return type(payload.get("module")).__name__ in _SHAPE_READERS
    if op != "call_function":
        return False
    if target is getattr:
        return len(args) > 1 and args[1] == "shape"
    packet = getattr(target, "overloadpacket", target)
    return getattr(packet, "__name__", "") in _SHAPE_READERS
