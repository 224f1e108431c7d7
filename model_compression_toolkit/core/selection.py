"""Keeping chosen layers in float: match `KeepFloat` rules to graph nodes.

A rule matches a node by exact name, by regular expression (full match), or by layer
type. Names are matched against every original layer a node stands for, so a batch norm
folded into its conv still selects that conv. A name, pattern or type that matches
nothing is an error that lists the closest layer names, raised before any work starts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import reduce

from model_compression_toolkit.core.config import KeepFloat
from model_compression_toolkit.core.graph import Graph, Node
from model_compression_toolkit.core.node_filters import (
    NodeFilter,
    NodeNameFilter,
    NodeNameRegexFilter,
    NodeTypeFilter,
    closest_names,
    type_name,
)
from model_compression_toolkit.errors import LayerSelectionError


def rule_filter(rule: KeepFloat) -> NodeFilter | None:
    """The node filter a `KeepFloat` rule stands for: its names, patterns and types, or'ed
    (the filters of MCT's network editor: one way to select layers); None for an empty rule."""
    filters: list[NodeFilter] = [NodeNameFilter(n) for n in rule.names]
    filters += [NodeNameRegexFilter(p) for p in rule.patterns]
    filters += [NodeTypeFilter(t) for t in rule.types]
    return reduce(lambda a, b: a | b, filters) if filters else None


def matches(rule: KeepFloat, node: Node) -> bool:
    select = rule_filter(rule)
    return select is not None and select.apply(node)


def _closest(word: str, candidates: list[str]) -> str:
    close = closest_names(word, candidates)
    return ", ".join(repr(c) for c in close) if close else "none is close"


def check_rules(graph: Graph, rules: Sequence[KeepFloat]) -> None:
    """Raise LayerSelectionError for any name, pattern or type of ``rules`` that selects no node."""
    nodes = graph.nodes()
    all_names = list(dict.fromkeys(n for node in nodes for n in (node.name, *node.origin)))  # as the model names them
    all_types = sorted({node.layer_type for node in nodes})
    for rule in rules:
        for name in rule.names:
            if not any(NodeNameFilter(name).apply(node) for node in nodes):
                raise LayerSelectionError(
                    f"KeepFloat names {name!r}, which is no layer of the model; closest layer names: "
                    f"{_closest(name, all_names)}"
                )
        for pattern in rule.patterns:
            if not any(NodeNameRegexFilter(pattern).apply(node) for node in nodes):
                partial = [n for n in all_names if re.search(pattern, n)][:5]
                hint = f"these contain a match but do not match whole: {partial}" if partial else (
                    f"closest layer names: {_closest(pattern, all_names)}"
                )
                raise LayerSelectionError(
                    f"KeepFloat pattern {pattern!r} matches no layer name (it must match the whole name); {hint}"
                )
        for t in rule.types:
            if not any(NodeTypeFilter(t).apply(node) for node in nodes):
                raise LayerSelectionError(
                    f"KeepFloat type {type_name(t)!r} matches no layer; the model's layer types are {all_types}"
                )


def kept_float(graph: Graph, rules: Sequence[KeepFloat]) -> tuple[set[str], set[str]]:
    """(nodes whose weights stay float, nodes whose activations stay float)."""
    weights, activations = set(), set()
    for node in graph.nodes():
        for rule in rules:
            if matches(rule, node):
                if rule.weights:
                    weights.add(node.name)
                if rule.activations:
                    activations.add(node.name)
    return weights, activations
