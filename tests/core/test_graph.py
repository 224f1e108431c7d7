"""The graph: ordered inputs, transforms that keep it consistent, validation that catches breakage."""

import numpy as np
import pytest

from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.errors import GraphValidationError


def chain(*kinds: OpKind) -> Graph:
    g = Graph("chain", "test")
    names = []
    for i, kind in enumerate(kinds):
        name = f"n{i}"
        g.add_node(Node(name, kind, kind.value, output_shapes=[(None, 4)]))
        if names:
            g.add_edge(names[-1], name)
        names.append(name)
    g.inputs = [names[0]]
    g.outputs = [(names[-1], 0)]
    g.validate()
    return g


def test_topological_order_follows_edges_not_insertion():
    g = Graph("g", "test")
    for name in ("c", "a", "b"):
        g.add_node(Node(name, OpKind.ADD, "add"))
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    g.inputs, g.outputs = ["a"], [("c", 0)]
    assert g.topological_order() == ["a", "b", "c"]


def test_inputs_are_ordered_by_index_and_repeated_sources_are_separate_edges():
    g = Graph("g", "test")
    g.add_node(Node("x", OpKind.INPUT, "input"))
    g.add_node(Node("y", OpKind.INPUT, "input"))
    g.add_node(Node("cat", OpKind.CONCAT, "cat"))
    g.add_edge("y", "cat", dst_index=1)
    g.add_edge("x", "cat", dst_index=0)
    g.add_edge("x", "cat", dst_index=2)
    g.inputs, g.outputs = ["x", "y"], [("cat", 0)]
    g.validate()
    assert [e.src for e in g.in_edges("cat")] == ["x", "y", "x"]
    assert [n.name for n in g.successors("x")] == ["cat"]


def test_bypass_rewires_users_and_outputs():
    g = chain(OpKind.INPUT, OpKind.DROPOUT, OpKind.ACTIVATION)
    g.bypass("n1")
    g.validate()
    assert "n1" not in g
    assert [e.src for e in g.in_edges("n2")] == ["n0"]
    tail = chain(OpKind.INPUT, OpKind.DROPOUT)
    tail.bypass("n1")
    assert tail.outputs == [("n0", 0)]


def test_validation_catches_gaps_in_input_indices_cycles_and_dangling_outputs():
    g = chain(OpKind.INPUT, OpKind.ADD)
    g.add_node(Node("other", OpKind.INPUT, "input"))
    g.add_edge("other", "n1", dst_index=2)  # index 1 is missing
    with pytest.raises(GraphValidationError, match="input indices"):
        g.validate()

    g = chain(OpKind.INPUT, OpKind.ADD, OpKind.ADD)
    g.add_edge("n2", "n1", dst_index=1)
    with pytest.raises(GraphValidationError, match="cycle"):
        g.validate()

    g = chain(OpKind.INPUT, OpKind.ADD)
    g.outputs.append(("ghost", 0))
    with pytest.raises(GraphValidationError, match="ghost"):
        g.validate()


def test_removing_a_used_node_is_refused():
    g = chain(OpKind.INPUT, OpKind.ADD, OpKind.ADD)
    with pytest.raises(GraphValidationError, match="still used"):
        g.remove_node("n1")


def test_quantized_weight_must_exist():
    g = chain(OpKind.INPUT, OpKind.CONV)
    g.node("n1").kernel_axes = {"kernel": (0,)}
    with pytest.raises(GraphValidationError, match="kernel"):
        g.validate()
    g.node("n1").weights["kernel"] = np.ones((4, 4), np.float32)
    g.validate()


def test_output_size_drops_the_batch_dimension():
    node = Node("n", OpKind.CONV, "Conv2d", output_shapes=[(None, 8, 4, 4)])
    assert node.output_size() == 128


def test_edge_lists_follow_every_edit_after_being_read():
    """``in_edges``/``out_edges`` are kept between reads: each edit must show at once."""
    g = chain(OpKind.INPUT, OpKind.DROPOUT, OpKind.ACTIVATION)
    g.add_node(Node("side", OpKind.INPUT, "input"))
    assert [e.src for e in g.in_edges("n2")] == ["n1"] and [e.dst for e in g.out_edges("n0")] == ["n1"]
    g.in_edges("n2").clear()  # the caller's list, not the graph's
    added = g.add_edge("side", "n2", dst_index=1)
    assert g.in_edges("n2")[1] == added and [e.dst for e in g.out_edges("side")] == ["n2"]
    copied = g.copy()
    g.remove_edge(added)
    assert [e.src for e in g.in_edges("n2")] == ["n1"] and g.out_edges("side") == []
    assert [e.src for e in copied.in_edges("n2")] == ["n1", "side"]  # the copy keeps its own
    g.bypass("n1")
    assert [e.src for e in g.in_edges("n2")] == ["n0"] and [e.dst for e in g.out_edges("n0")] == ["n2"]
    g.remove_node("side")
    assert "side" not in g and [e.src for e in g.in_edges("n2")] == ["n0"]
    g.validate()
