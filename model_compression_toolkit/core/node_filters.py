r"""Node filters, named as in MCT's network editor: which layers a rule applies to::

    NodeNameFilter("features.3")           the layer of that name
    NodeNameScopeFilter("layer2")          layers whose name contains that text
    NodeNameRegexFilter(r"layer4\..*")     layers whose whole name the pattern matches
    NodeTypeFilter(torch.nn.Conv2d)        layers of that type (a class, a function such as
                                           torch.add, or a type name such as "Conv2D")
    a & b, a | b, a.logic_not()            combined

A name matches the node's own name or any original layer it stands for (a batch norm
folded into its conv still selects the conv). MCT names PyTorch layers after their torch.fx
node, ``features_3`` for the module ``features.3``; both spellings match.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Protocol


class Node(Protocol):  # what a filter reads of a `core.graph.Node` (no import: the config holds filters)
    name: str
    origin: list[str]
    layer_type: str
    kind: Any


def node_names(node: Node) -> list[str]:
    """Every name the node answers to: its own, its origins', and their fx spellings."""
    names = list(dict.fromkeys([node.name, *node.origin]))
    return list(dict.fromkeys(names + [n.replace(".", "_") for n in names]))


def closest_names(word: str, names: list[str]) -> list[str]:
    """Up to five of ``names`` closest to ``word``, closest first (for "no such layer" errors)."""
    return difflib.get_close_matches(word, names, n=5, cutoff=0.3)


def type_name(t: Any) -> str:
    """The layer type name of a class, a function or a string."""
    return t if isinstance(t, str) else getattr(t, "__name__", str(t))


class NodeFilter:
    """Base class: ``apply(node)`` says whether the filter selects the node."""

    def apply(self, node: Node) -> bool:
        raise NotImplementedError

    def describe(self) -> str:
        return repr(self)

    def __and__(self, other: NodeFilter) -> NodeFilter:
        return _And(self, _checked(other))

    def __or__(self, other: NodeFilter) -> NodeFilter:
        return _Or(self, _checked(other))

    def logic_and(self, other: NodeFilter) -> NodeFilter:
        return self & other

    def logic_or(self, other: NodeFilter) -> NodeFilter:
        return self | other

    def logic_not(self) -> NodeFilter:
        return _Not(self)


def _checked(other: Any) -> NodeFilter:
    if not isinstance(other, NodeFilter):
        raise TypeError(f"a node filter combines with another node filter; got {type(other).__name__}")
    return other


@dataclass(frozen=True)
class NodeNameFilter(NodeFilter):
    """Selects the layer named ``node_name`` (PyTorch module path or fx name, Keras layer name)."""

    node_name: str

    def apply(self, node: Node) -> bool:
        return self.node_name in node_names(node)

    def describe(self) -> str:
        return f"NodeNameFilter({self.node_name!r})"


@dataclass(frozen=True)
class NodeNameScopeFilter(NodeFilter):
    """Selects the layers whose name contains ``node_name_scope``."""

    node_name_scope: str

    def apply(self, node: Node) -> bool:
        return any(self.node_name_scope in n for n in node_names(node))

    def describe(self) -> str:
        return f"NodeNameScopeFilter({self.node_name_scope!r})"


@dataclass(frozen=True)
class NodeNameRegexFilter(NodeFilter):
    """Selects the layers one of whose names ``pattern`` matches whole (`re.fullmatch`)."""

    pattern: str

    def apply(self, node: Node) -> bool:
        return any(re.fullmatch(self.pattern, n) for n in node_names(node))

    def describe(self) -> str:
        return f"NodeNameRegexFilter({self.pattern!r})"


@dataclass(frozen=True)
class NodeTypeFilter(NodeFilter):
    """Selects the layers of type ``node_type``: a class (``keras.layers.Conv2D``,
    ``torch.nn.Linear``), a function (``torch.add``), a type name, or a neutral kind
    (``"conv"``, ``"dense"``, ``"activation"``)."""

    node_type: Any

    def apply(self, node: Node) -> bool:
        return type_name(self.node_type) in (node.layer_type, node.kind.value)

    def describe(self) -> str:
        return f"NodeTypeFilter({type_name(self.node_type)})"


@dataclass(frozen=True)
class _And(NodeFilter):
    a: NodeFilter
    b: NodeFilter

    def apply(self, node: Node) -> bool:
        return bool(self.a.apply(node) and self.b.apply(node))

    def describe(self) -> str:
        return f"({self.a.describe()} & {self.b.describe()})"


@dataclass(frozen=True)
class _Or(NodeFilter):
    a: NodeFilter
    b: NodeFilter

    def apply(self, node: Node) -> bool:
        return bool(self.a.apply(node) or self.b.apply(node))

    def describe(self) -> str:
        return f"({self.a.describe()} | {self.b.describe()})"


@dataclass(frozen=True)
class _Not(NodeFilter):
    a: NodeFilter

    def apply(self, node: Node) -> bool:
        return not self.a.apply(node)

    def describe(self) -> str:
        return f"not {self.a.describe()}"
