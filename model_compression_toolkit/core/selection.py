"""Keeping chosen layers in float: match `KeepFloat` rules to graph nodes.

A rule matches a node by exact name, by regular expression (full match), or by layer
type. Names are matched against every original layer a node stands for, so a batch norm
folded into its conv still selects that conv. A name, pattern or type that matches
nothing is an error that lists the closest layer names, raised before any work starts.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from model_compression_toolkit.core.config import KeepFloat
from model_compression_toolkit.core.graph import Graph, Node
from model_compression_toolkit.errors import LayerSelectionError


def _type_name(t: str | type) -> str:
    return t if isinstance(t, str) else t.__name__


def _names(node: Node) -> list[str]:
    return list(dict.fromkeys([node.name, *node.origin]))


def matches(rule: KeepFloat, node: Node) -> bool:
    names = _names(node)
    return (
        any(n in rule.names for n in names)
        or any(re.fullmatch(p, n) for p in rule.patterns for n in names)
        or any(_type_name(t) in (node.layer_type, node.kind.value) for t in rule.types)
    )


def _closest(word: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(word, candidates, n=5, cutoff=0.3)
    return ", ".join(repr(c) for c in close) if close else "none is close"


def check_rules(graph: Graph, rules: Sequence[KeepFloat]) -> None:
    """Raise LayerSelectionError for any name, pattern or type of ``rules`` that selects no node."""
    nodes = graph.nodes()
    all_names = list(dict.fromkeys(n for node in nodes for n in _names(node)))
    all_types = sorted({node.layer_type for node in nodes})
    for rule in rules:
        for name in rule.names:
            if name not in all_names:
                raise LayerSelectionError(
                    f"KeepFloat names {name!r}, which is no layer of the model; closest layer names: "
                    f"{_closest(name, all_names)}"
                )
        for pattern in rule.patterns:
            if not any(re.fullmatch(pattern, n) for n in all_names):
                partial = [n for n in all_names if re.search(pattern, n)][:5]
                hint = f"these contain a match but do not match whole: {partial}" if partial else (
                    f"closest layer names: {_closest(pattern, all_names)}"
                )
                raise LayerSelectionError(
                    f"KeepFloat pattern {pattern!r} matches no layer name (it must match the whole name); {hint}"
                )
        for t in rule.types:
            if not any(_type_name(t) in (node.layer_type, node.kind.value) for node in nodes):
                raise LayerSelectionError(
                    f"KeepFloat type {_type_name(t)!r} matches no layer; the model's layer types are {all_types}"
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
