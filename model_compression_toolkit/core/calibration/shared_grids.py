"""Grids shared between nodes, set once every node's own grid is chosen.

- *Quantization preserving* outputs (a target platform's max pool, concat, resize...)
  take the grid of the node quantizing their input: ``prev(q) -> pool(q of prev)``.
- ``concat_threshold_update``: every quantized input of a concatenation takes the
  concatenation's grid, so that the concatenation joins values already on one grid:
  ``a(q of cat), b(q of cat) -> cat(q)``.

Both are recorded as ``ActivationQuantConfig.grid_from`` and resolved here, following
chains (``a`` from ``b`` from ``c``).
"""

from __future__ import annotations

import copy

from model_compression_toolkit.core.graph import VALUE_PRESERVING, Graph, Node, OpKind


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


def share_grids(graph: Graph) -> None:
    """Copy each ``grid_from`` node's chosen grid (and its range, sign and bits) onto the
    nodes that take it."""
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
