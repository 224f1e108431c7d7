"""One way to select layers: a `KeepFloat` rule is the or of MCT's node filters (names,
whole-name patterns, types), so a rule and the filters select the same layers, spell names
the same ways (a module path or its fx name) and fail the same way on a name nobody has."""

from __future__ import annotations

import pytest

from model_compression_toolkit.core.config import KeepFloat
from model_compression_toolkit.core.node_filters import NodeNameFilter, NodeNameRegexFilter, NodeTypeFilter
from model_compression_toolkit.core.selection import check_rules, kept_float, rule_filter
from model_compression_toolkit.errors import LayerSelectionError
from tests.fixtures.observed import make_graph

NAMES = {"conv": "features.0", "dense": "classifier.1", "add": "block.add"}


def selected(graph, select) -> set[str]:
    return {node.name for node in graph.nodes() if select.apply(node)}


@pytest.mark.parametrize(
    "rule, filters",
    [
        (KeepFloat(names=["features.0"]), [NodeNameFilter("features.0")]),
        (KeepFloat(names=["features_0"]), [NodeNameFilter("features_0")]),  # torch.fx's spelling
        (KeepFloat(patterns=[r"classifier\..*"]), [NodeNameRegexFilter(r"classifier\..*")]),
        (KeepFloat(types=["Conv2d"]), [NodeTypeFilter("Conv2d")]),
        (KeepFloat(names=["block.add"], types=["Conv2d"]), [NodeNameFilter("block.add"), NodeTypeFilter("Conv2d")]),
    ],
)
def test_a_keep_float_rule_selects_what_its_node_filters_select(rule, filters):
    graph = make_graph(NAMES)
    check_rules(graph, [rule])  # every part selects a layer
    want = set().union(*(selected(graph, f) for f in filters))
    assert want and selected(graph, rule_filter(rule)) == want
    weights, activations = kept_float(graph, [rule])
    assert weights == activations == want


def test_a_pattern_matches_whole_names_only_and_a_missing_name_names_the_closest():
    graph = make_graph(NAMES)
    assert not selected(graph, NodeNameRegexFilter("classifier"))  # a part of the name is no match
    with pytest.raises(LayerSelectionError, match="do not match whole.*classifier.1"):
        check_rules(graph, [KeepFloat(patterns=["classifier"])])
    with pytest.raises(LayerSelectionError, match="closest layer names: 'features.0'"):
        check_rules(graph, [KeepFloat(names=["features.9"])])
