"""Grids shared between nodes, set once every node's own grid is chosen.

- *Quantization preserving* outputs (a target platform's max pool, concat, resize...)
  take the grid of the node quantizing their input: ``prev(q) -> pool(q of prev)``.
- ``concat_threshold_update``: every quantized input of a concatenation takes the
  concatenation's grid, so that the concatenation joins values already on one grid:
  ``a(q of cat), b(q of cat) -> cat(q)``.
- By default (`link_selections`), an op that only selects values of its input (a max
  pooling, a ReLU) shares one grid with the quantizer of that input. A monotonic rounding
  ``q`` commutes with it, ``max(q(x)) == q(max(x))`` and ``relu(q(x)) == q(relu(x))``
  (zero is on every grid), so one grid loses nothing that two in a row would keep, and an
  integer kernel runs the op on the integers as they are:

      prev(q of pool) -> pool(q)     prev feeds only the pool: the grid is chosen on the
                                     values the pool passes on, the only ones used
      prev(q) -> pool(q of prev)     prev also feeds other layers or is an output

Links are recorded as ``ActivationQuantConfig.grid_from`` and resolved here, following
chains (``a`` from ``b`` from ``c``).
"""

from __future__ import annotations

import copy

from model_compression_toolkit.core.graph import VALUE_PRESERVING, Graph, Node, OpKind
from model_compression_toolkit.core.quant_config import ActivationQuantConfig


def link_concat_inputs(graph: Graph) -> list[str]:
    """Give every quantized input carrier of each quantized concatenation the
    concatenation's grid (``grid_from``). Returns the concatenations linked."""
    linked = []
    for node in graph.nodes():
        if node.kind != OpKind.CONCAT or node.quant.activation is None or node.quant.activation.grid_from:
            continue
        for edge in graph.in_edges(node.name):
            carrier = _carrier(graph, graph.node(edge.src))
            if carrier is not None and carrier.name != node.name and carrier.quant.activation is not None:
                carrier.quant.activation.grid_from = node.name
        linked.append(node.name)
    return linked


class ConcatThresholdUpdate:
    """``QuantizationConfig(concat_threshold_update=True)`` as a `QuantizationEdit`."""

    def apply(self, graph: Graph, config: object) -> None:
        link_concat_inputs(graph)


def _carrier(graph: Graph, node: Node) -> Node | None:
    while node.quant.activation is None:
        if node.kind not in VALUE_PRESERVING:
            return None
        edges = graph.in_edges(node.name)
        if len(edges) != 1:
            return None
        node = graph.node(edges[0].src)
    return node


def selects_values(node: Node) -> bool:
    """Whether ``node``'s output holds only values of its single input, or zeros, through
    a non-decreasing map: a max pooling (any window, padding or size), or a plain ReLU
    (not ReLU6 or a thresholded or leaky one, whose bounds and slopes need not be on a grid)."""
    if node.kind == OpKind.POOL:
        return "max" in node.layer_type.lower()
    if node.kind != OpKind.ACTIVATION or str(node.attrs.get("function", "")).lower() != "relu":
        return False
    return not any(node.attrs.get(a) for a in ("max_value", "threshold", "negative_slope"))


def _default(act: ActivationQuantConfig | None) -> bool:
    """Whether ``act`` is a quantizer whose grid the library chooses as it likes: its method
    left to the data (``choose_grid``), no fixed range, no shifted negative tail."""
    return (
        act is not None and act.choose_grid and act.fixed_range is None and act.shift_negative_ratio is None
    )


def _feeds_only(graph: Graph, src: Node, dst: Node) -> bool:
    """Whether ``src``'s output is used by ``dst`` alone, directly or through ops that only
    move values (each used once), and is no output of the model on the way."""
    node = src
    while not graph.is_output(node.name) and len(graph.out_edges(node.name)) == 1:
        user = graph.node(graph.out_edges(node.name)[0].dst)
        if user.name == dst.name:
            return True
        if user.kind not in VALUE_PRESERVING or user.quant.activation is not None:
            return False
        node = user
    return False


def link_selections(graph: Graph) -> list[tuple[str, str]]:
    """Link each default-quantized op that selects values (`selects_values`) with the
    quantizer of its input, when both have the library's default grids at the same bits.

    ``prev`` takes the op's grid (``prev.grid_from = op``) when the op alone uses ``prev``'s
    output; otherwise the op takes ``prev``'s grid. Links already made are kept, so calling
    this again changes nothing.

    Returns:
        ``(taker, source)`` for every link made now.
    """
    made = []
    for node in graph.nodes():
        act = node.quant.activation
        if not _default(act) or not selects_values(node) or len(graph.in_edges(node.name)) != 1:
            continue
        assert act is not None
        prev = _carrier(graph, graph.node(graph.in_edges(node.name)[0].src))
        if prev is None or prev.name == node.name:
            continue
        src = prev.quant.activation
        if not _default(src) or src is None or src.n_bits != act.n_bits:
            continue
        if node.name == src.grid_from or prev.name == act.grid_from:
            continue  # linked before
        if act.grid_from is None and src.grid_from is None and _feeds_only(graph, prev, node):
            src.grid_from = node.name
            made.append((prev.name, node.name))
        elif act.grid_from is None:
            act.grid_from = prev.name
            made.append((node.name, prev.name))
    return made


def share_grids(graph: Graph) -> None:
    """Link the ops that select values by default (`link_selections`), then copy each
    ``grid_from`` node's chosen grid (and its range, sign and bits) onto the nodes that take it."""
    link_selections(graph)
    for node in graph.nodes():
        act = node.quant.activation
        if act is None or act.grid_from is None:
            continue
        source, seen = act.grid_from, {node.name}
        while source not in seen and source in graph:
            nxt = graph.node(source).quant.activation
            if nxt is None or nxt.grid_from is None:
                break
            seen.add(source)
            source = nxt.grid_from
        src = graph.node(source).quant.activation if source in graph else None
        if src is None or src.grid is None:
            continue
        act.n_bits, act.method, act.signed = src.n_bits, src.method, src.signed
        act.threshold, act.range_min, act.range_max = src.threshold, src.range_min, src.range_max
        act.grid = copy.deepcopy(src.grid)
