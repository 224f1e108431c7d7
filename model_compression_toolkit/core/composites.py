"""Activations written as several ops: hard-swish and hard-sigmoid, found on the graph.

Models exported op by op (PaddlePaddle's ONNX files converted by onnx2torch, hand-written
PyTorch) spell a hard-swish as four ops::

    x -> add(x, 3) -> relu6 -> mul(x, .) -> div(., 6)      (or mul(., 1/6))
    x -> hardsigmoid -> mul(x, .)                          (x * hardsigmoid(x))
    x -> add(x, 3) -> relu6 -> div(., 6) -> mul(x, .)      (x * hard-sigmoid written as ops)

and a hard-sigmoid as three (``add(x, 3) -> relu6 -> div(., 6)``). Quantizing every op's
output puts an 8-bit grid on ``x * relu6(x + 3)`` (up to ~380 in PP-OCR) and on each
other intermediate: the errors of hundreds of needless quantizers add up. A fused
hard-swish (TFLite, MCT's platforms) has one quantizer, on its output: `find_composites`
names the ops that make one activation, so that only its last op is quantized.

A scale and shift by numbers, written as ops after a layer, is one more (PP-LCNetV3's
learnable affine blocks around each hard-swish; a batch norm exported as ``mul``/``add``)::

    conv -> mul(., 1.38) -> add(., 0.59) -> [hard-swish] -> mul(., 0.17) -> add(., 3e-5) -> conv

A runtime folds it into the layer before it; quantizing each op's output instead puts
five grids where one does, and each rounds again what the one before rounded: a value one
step off at the conv lands two steps off after ``mul(., 1.38)`` and four after the
hard-swish, so the rounding differences of any two runtimes grow through the depth
(PP-OCRv4's exported files drifted to a cosine of 0.989 from the quantized model they
came from). `find_composites` names the chain (``affine``) so that only its last op is
quantized.

A composite is matched only where each intermediate feeds nothing but the next op of the
same composite (no other consumer, not a graph output): otherwise its float value would
be seen outside. Scalars are read where the backends put them: a one-element CONSTANT
input (onnx2torch's initializers) or a number among the node's attributes (PyTorch's
``x + 3``: ``attrs["b"] = 3``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from model_compression_toolkit.core.graph import Graph, Node, OpKind

# Attribute names of a call's second operand (``operator.truediv(a, b)``, ``torch.div(input,
# other)``, a C method's ``arg1``): where a division's scalar divisor is recorded.
_SECOND_OPERAND = frozenset({"b", "other", "arg1", "x2", "y"})
_RELU6 = frozenset({"relu6"})
_HARD_SIGMOID = frozenset({"hardsigmoid", "hard_sigmoid"})
_SIGMOID = frozenset({"sigmoid"})
_LABELS = {
    "hardswish": "hard-swish",
    "hardsigmoid": "hard-sigmoid",
    "swish": "swish",
    "layernorm": "layer norm",
    "affine": "scale and shift by constants",
}
# a product of two activations keeps its own grid before a scale (attention's ``q @ k / 8``):
# the integer matmul kernels of the runtimes read and write grids
_PRODUCTS = frozenset({OpKind.MATMUL, OpKind.ATTENTION})
_AFFINE = frozenset({OpKind.MUL, OpKind.ADD, OpKind.SUB})  # with a number: ``x * a``, ``x + b``, ``b - x``


@dataclass(frozen=True)
class Composite:
    """One activation written as ops.

    Attributes:
        function: ``"hardswish"``, ``"hardsigmoid"``, ``"swish"``, ``"layernorm"`` or ``"affine"``
            (a scale and shift by constants).
        source: the node whose output is the activation's input ``x``.
        inner: the intermediate nodes, whose outputs stay inside the activation.
        output: the node whose output is the activation's output.
    """

    function: str
    source: str
    inner: tuple[str, ...]
    output: str

    def reason(self, quantized_at: str | None = None) -> str:
        """Why an intermediate's output is not quantized (the info's float reason);
        ``quantized_at``: the quantizer the activation's output is fused into, where it is
        not quantized itself (a hard-swish inside a scale-and-shift chain)."""
        return (
            f"inside a {_LABELS[self.function]} written as ops; its output is quantized after "
            f"{quantized_at or self.output!r}"
        )


def find_composites(graph: Graph) -> list[Composite]:
    """Every hard-swish, hard-sigmoid and scale-and-shift written as ops in ``graph``, in
    the order of their outputs in the graph (a composite that ends where another begins
    comes first: quantizing each only at its output then leaves one grid for the chain).

    Hard-swish is matched first, then hard-sigmoid, then the scale-and-shift chains between
    and around them; no node is inside or the output of two of them.
    """
    found: list[Composite] = []
    used: set[str] = set()
    for match in (_hard_swish, _hard_sigmoid, _swish, _layer_norm):
        for node in graph.nodes():
            composite = match(graph, node)
            if composite is None or used & {*composite.inner, composite.output}:
                continue
            found.append(composite)
            used.update((*composite.inner, composite.output))
    for node in graph.nodes():
        if node.name in used:
            continue
        composite = _affine(graph, node, used)
        if composite is not None:
            found.append(composite)
            used.update((*composite.inner, composite.output))
    order = {name: i for i, name in enumerate(graph.topological_order())}
    return sorted(found, key=lambda c: order[c.output])


# ---------------------------------------------------------------- the patterns
def _hard_swish(graph: Graph, out: Node) -> Composite | None:
    """``mul(x, r) / 6`` with ``r = relu6(x + 3)``, or ``mul(x, hard_sigmoid(x))``."""
    scaled = _scaled_by_sixth(graph, out)
    if scaled is not None:  # (x * relu6(x + 3)) / 6
        pair = _product(graph, scaled)
        if pair is not None:
            x, r = pair
            inner = _relu6_of_x_plus_3(graph, r, x)
            if inner is not None and _only_inside(graph, [*inner, scaled.name]):
                return Composite("hardswish", x[0], (*inner, scaled.name), out.name)
    pair = _product(graph, out)
    if pair is None:
        return None
    x, h = pair
    if h.kind == OpKind.ACTIVATION and _function(h) in _HARD_SIGMOID and _single_input(graph, h) == x:
        return Composite("hardswish", x[0], (h.name,), out.name) if _only_inside(graph, [h.name]) else None
    sigmoid = _hard_sigmoid(graph, h)
    if sigmoid is not None and sigmoid.source == x[0] and _only_inside(graph, [h.name]):
        return Composite("hardswish", x[0], (*sigmoid.inner, h.name), out.name)
    return None


def _swish(graph: Graph, out: Node) -> Composite | None:
    """``mul(x, sigmoid(x))``, or ``mul(x, sigmoid(x * a))`` (paddle2onnx's swish)."""
    pair = _product(graph, out)
    if pair is None:
        return None
    x, s = pair
    if s.kind != OpKind.ACTIVATION or _function(s) not in _SIGMOID or not _only_inside(graph, [s.name]):
        return None
    source = _single_input(graph, s)
    if source == x:
        return Composite("swish", x[0], (s.name,), out.name)
    scaled = graph.node(source[0]) if source is not None else None
    if scaled is not None and _scalar_source(graph, scaled) == x and _only_inside(graph, [scaled.name]):
        return Composite("swish", x[0], (scaled.name, s.name), out.name)
    return None


def _layer_norm(graph: Graph, out: Node) -> Composite | None:
    """``(x - mean(x)) / sqrt(mean((x - mean(x)) ** 2) + eps)``, the division ``out``::

    x -> mean -> sub(x, .) = d -> pow(d, 2) -> mean -> add(eps) -> sqrt -> div(d, .)
    """
    edges = graph.in_edges(out.name)
    if not _is_division(out) or len(edges) != 2:
        return None
    num, den = sorted(edges, key=lambda e: e.dst_index)
    d, sqrt = graph.node(num.src), graph.node(den.src)
    if d.kind != OpKind.SUB or "sqrt" not in sqrt.layer_type.lower():
        return None
    d_in = sorted(graph.in_edges(d.name), key=lambda e: e.dst_index)
    if len(d_in) != 2 or graph.node(d_in[1].src).kind != OpKind.MEAN:
        return None
    x, mean = (d_in[0].src, d_in[0].src_index), graph.node(d_in[1].src)
    add_in = _single_input(graph, sqrt)
    add = graph.node(add_in[0]) if add_in is not None else None
    mean_in = _scalar_source(graph, add) if add is not None and add.kind == OpKind.ADD else None
    mean2 = graph.node(mean_in[0]) if mean_in is not None else None
    sq_in = _single_input(graph, mean2) if mean2 is not None and mean2.kind == OpKind.MEAN else None
    square = graph.node(sq_in[0]) if sq_in is not None else None
    if add is None or mean2 is None or square is None or not _squares(graph, square, d.name):
        return None
    chain = [sqrt.name, add.name, mean2.name, square.name]
    if _single_input(graph, mean) != x:
        return None
    inner = (mean.name, d.name, *reversed(chain))
    if any(graph.is_output(n) for n in inner) or not all(
        e.dst in {*inner, out.name} for n in inner for e in graph.out_edges(n)
    ):
        return None
    return Composite("layernorm", x[0], inner, out.name)


def _squares(graph: Graph, node: Node, d: str) -> bool:
    """Whether ``node`` is ``pow(d, 2)`` (the 2 a constant input or an attribute) or ``mul(d, d)``."""
    edges = graph.in_edges(node.name)
    if node.kind == OpKind.MUL:
        return len(edges) == 2 and all(e.src == d for e in edges)
    if "pow" not in node.layer_type.lower():
        return False
    if len(edges) == 2:
        base, exponent = sorted(edges, key=lambda e: e.dst_index)
        value = graph.node(exponent.src).weights.get("value")
        return base.src == d and value is not None and value.size == 1 and float(value.reshape(())) == 2.0
    operand = _scalar_operand(graph, node)
    return operand is not None and operand[0] == 2.0 and operand[1][0] == d


def _hard_sigmoid(graph: Graph, out: Node) -> Composite | None:
    """``relu6(x + 3) / 6`` (or ``* 1/6``)."""
    r = _scaled_by_sixth(graph, out)
    if r is None:
        return None
    source = _single_input(graph, r)
    add = graph.node(source[0]) if source is not None else None
    x = _plus_three(graph, add) if add is not None else None
    inner = _relu6_of_x_plus_3(graph, r, x) if x is not None else None
    if x is None or inner is None or not _only_inside(graph, list(inner)):
        return None
    return Composite("hardsigmoid", x[0], inner, out.name)


def _affine(graph: Graph, out: Node, used: set[str]) -> Composite | None:
    """``x -> op(., a) -> ... -> out(., b)``: ops that each combine the one before with a
    number (`_AFFINE`, or a division by a number), ending at ``out``; None when ``out`` is
    no such op or is not the chain's end (its only use is the next op of one).

    The chain stops at the first op that is not one, has another use, or belongs to
    another composite (``used``): that op's output is ``x``. A chain after a product of two
    activations (`_PRODUCTS`) is left as it is.
    """
    if not _scales_or_shifts(graph, out) or (not graph.is_output(out.name) and _continues(graph, out, used)):
        return None
    inner: list[str] = []
    x = _scalar_source(graph, out)
    while x is not None:
        prev = graph.node(x[0])
        if prev.name in used or x[1] != 0 or not _only_inside(graph, [prev.name]):
            break
        if not _scales_or_shifts(graph, prev):
            break
        inner.append(prev.name)
        x = _scalar_source(graph, prev)
    if x is None or _product_of_activations(graph, graph.node(x[0])):
        return None
    return Composite("affine", x[0], tuple(reversed(inner)), out.name)


def _product_of_activations(graph: Graph, node: Node) -> bool:
    """Whether ``node`` multiplies two activations (``q @ k``; not a matmul by a constant weight)."""
    return node.kind in _PRODUCTS and all(
        graph.node(e.src).kind != OpKind.CONSTANT for e in graph.in_edges(node.name)
    )


def _scales_or_shifts(graph: Graph, node: Node) -> bool:
    """Whether ``node`` combines one tensor with a number or a constant no larger than it:
    ``x * a``, ``x + b``, ``x - b``, ``b - x`` or ``x / a``."""
    return _scalar_source(graph, node) is not None


def _scalar_source(graph: Graph, node: Node) -> tuple[str, int] | None:
    """The tensor input ``x`` of `_scales_or_shifts`'s ``node``, or None."""
    division = _is_division(node)
    if node.kind not in _AFFINE and not division:
        return None
    operand = _scalar_operand(graph, node, divisor=division)
    return operand[1] if operand is not None else _constant_operand(graph, node, division)


def _constant_operand(graph: Graph, node: Node, divisor: bool) -> tuple[str, int] | None:
    """``x`` when ``node`` combines one tensor ``x`` with a constant of any size (a scale per
    channel) that does not make its output larger than ``x``."""
    edges = graph.in_edges(node.name)
    if len(edges) != 2:
        return None
    for const, other in ((edges[1], edges[0]), (edges[0], edges[1])):
        if graph.node(const.src).kind != OpKind.CONSTANT or graph.node(other.src).kind == OpKind.CONSTANT:
            continue
        if divisor and const.dst_index != 1:
            return None
        shapes = graph.node(other.src).output_shapes
        if (
            other.src_index < len(shapes)
            and node.output_shapes
            and shapes[other.src_index] == node.output_shapes[0]
        ):
            return other.src, other.src_index
        return None
    return None


def _continues(graph: Graph, node: Node, used: set[str]) -> bool:
    """Whether ``node``'s one use is another scale or shift of no other composite, which
    then ends the chain."""
    edges = graph.out_edges(node.name)
    return len(edges) == 1 and edges[0].dst not in used and _scales_or_shifts(graph, graph.node(edges[0].dst))


def _relu6_of_x_plus_3(graph: Graph, r: Node, x: tuple[str, int]) -> tuple[str, str] | None:
    """``(add, relu6)`` when ``r`` is ``relu6(x + 3)`` for this very ``x``."""
    if r.kind != OpKind.ACTIVATION or _function(r) not in _RELU6:
        return None
    source = _single_input(graph, r)
    if source is None:
        return None
    add = graph.node(source[0])
    return (add.name, r.name) if _plus_three(graph, add) == x else None


def _plus_three(graph: Graph, add: Node) -> tuple[str, int] | None:
    """``x`` (node, output index) when ``add`` is ``x + 3``."""
    if add.kind != OpKind.ADD:
        return None
    operand = _scalar_operand(graph, add)
    return operand[1] if operand is not None and np.isclose(operand[0], 3.0, rtol=1e-5) else None


def _scaled_by_sixth(graph: Graph, node: Node) -> Node | None:
    """The node ``t`` when ``node`` is ``t / 6`` or ``t * (1/6)``."""
    division = _is_division(node)
    if node.kind != OpKind.MUL and not division:
        return None
    operand = _scalar_operand(graph, node, divisor=division)
    if operand is None:
        return None
    value, source = operand
    wanted = 6.0 if division else 1.0 / 6.0
    return graph.node(source[0]) if np.isclose(value, wanted, rtol=1e-5) and source[1] == 0 else None


def _product(graph: Graph, node: Node) -> tuple[tuple[str, int], Node] | None:
    """``(x, other)`` when ``node`` multiplies two tensors, ``x`` also feeding ``other``'s
    chain (either input may be ``x``: the caller checks which one is)."""
    if node.kind != OpKind.MUL:
        return None
    edges = graph.in_edges(node.name)
    if len(edges) != 2 or any(graph.node(e.src).kind == OpKind.CONSTANT for e in edges):
        return None
    a, b = edges
    for x, other in ((a, b), (b, a)):
        partner = graph.node(other.src)
        if other.src_index == 0 and partner.kind in (OpKind.ACTIVATION, OpKind.ELEMENTWISE, OpKind.MUL):
            if _reads(graph, partner, (x.src, x.src_index)):
                return (x.src, x.src_index), partner
    return None


def _reads(graph: Graph, node: Node, x: tuple[str, int], depth: int = 3) -> bool:
    """Whether ``x`` reaches ``node`` within ``depth`` ops (a cheap pre-check of a pattern)."""
    if depth == 0:
        return False
    for e in graph.in_edges(node.name):
        if (e.src, e.src_index) == x or _reads(graph, graph.node(e.src), x, depth - 1):
            return True
    return False


# ---------------------------------------------------------------- helpers
def _function(node: Node) -> str:
    return str(node.attrs.get("function") or "").lower()


def _is_division(node: Node) -> bool:
    """A true division (``truediv``, ``div``, ``true_divide``, onnx2torch's Div), never a
    floor or rounding one."""
    if node.kind != OpKind.ELEMENTWISE or node.attrs.get("rounding_mode") is not None:
        return False
    name = node.layer_type.lower()
    return _function(node) == "div" or ("div" in name and "floor" not in name)


def _single_input(graph: Graph, node: Node) -> tuple[str, int] | None:
    edges = graph.in_edges(node.name)
    return (edges[0].src, edges[0].src_index) if len(edges) == 1 else None


def _scalar_operand(graph: Graph, node: Node, divisor: bool = False) -> tuple[float, tuple[str, int]] | None:
    """``(value, x)`` when ``node`` combines one tensor ``x`` with one scalar, or None.

    With ``divisor``, the scalar must be the second operand (``x / 6``, never ``6 / x``).
    """
    edges = graph.in_edges(node.name)
    if len(edges) == 2:
        for const, other in ((edges[1], edges[0]), (edges[0], edges[1])):
            src = graph.node(const.src)
            value = src.weights.get("value") if src.kind == OpKind.CONSTANT else None
            if value is not None and value.size == 1 and graph.node(other.src).kind != OpKind.CONSTANT:
                if divisor and const.dst_index != 1:
                    return None
                return float(value.reshape(())), (other.src, other.src_index)
        return None
    if len(edges) != 1:
        return None
    numbers = {k: v for k, v in node.attrs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    others = [k for k, v in node.attrs.items() if k not in numbers and v is not None and k != "function"]
    if len(numbers) != 1 or others:
        return None
    ((key, number),) = numbers.items()
    if divisor and key not in _SECOND_OPERAND:
        return None
    return float(number), (edges[0].src, edges[0].src_index)


def _only_inside(graph: Graph, names: list[str]) -> bool:
    """Whether each intermediate has exactly one use and is no graph output."""
    return all(not graph.is_output(n) and graph.consumers_count(n) == 1 for n in names)
