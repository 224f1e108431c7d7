"""Cross-layer equalization across the joins of real models (`core.equalization`): each
input of a concat equalized with its slice of the consumer's input channels, both inputs of
a residual add with one scale, on the joins CNN of `tests.fixtures.joins` (the same weights
in both frameworks) with an outlier channel behind either join.

Exactness is checked on the float model (its output the same to 1e-5 of its range); the gain
in the 8-bit model output's SQNR, by tens of dB (the damaged model loses 20 to 40 dB, the
equalized one comes back within a dB of the undamaged one), so the margins hold on any CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.core.equalization import equalize, find_pairs
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.pipeline.backends import get_backend
from tests.fixtures.digits import representative_dataset
from tests.fixtures.joins import CHANNEL, joins_model

EQUALIZE = mct.core.CoreConfig(
    quantization_config=mct.core.QuantizationConfig(activation_channel_equalization=True)
)


def sqnr_db(reference: np.ndarray, value: np.ndarray) -> float:
    return float(10 * np.log10((reference**2).sum() / ((reference - value) ** 2).sum()))


@pytest.mark.parametrize("outlier", ["concat", "add"])
def test_equalization_through_a_join_keeps_the_float_outputs_and_brings_the_outlier_back(fw, outlier):
    model, names = joins_model(fw.name, outlier)
    x_train, _, x_test, _ = fw.data()
    backend = get_backend(model)
    graph, _ = backend.read(model, [x_train[:8]])
    pairs = {p.producer: p for p in find_pairs(graph)}
    concat_a, concat_b, residual = pairs["bn_a"], pairs["b"], pairs["bn_d"]
    assert (concat_a.join, concat_a.consumer, concat_a.offset) == ("cat", "c", 0)
    assert (concat_b.join, concat_b.consumer, concat_b.offset) == ("cat", "c", 8)  # b's channels follow a's 8
    assert "pool" in concat_b.between and not concat_b.partners
    assert (residual.join, residual.consumer) == ("add", "f")
    assert [b.producer for b in residual.branches] == ["bn_d", "bn_e"] and "bn_e" not in pairs  # one scale
    equalized, scales = equalize(graph)
    before = backend.forward(backend.build(graph, quantized=False), [x_test[:64]])[0]
    after = backend.forward(backend.build(equalized, quantized=False), [x_test[:64]])[0]
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-5 * np.abs(before).max())
    s = scales[names["producer"]]
    assert s[CHANNEL] > 50 * np.median(s)  # the channel made 1000x larger comes back to the others
    for name in (names["producer"], names.get("partner", names["producer"]), names["consumer"]):
        assert graph.node(name).weights is not equalized.node(name).weights  # the given graph is untouched


@pytest.mark.parametrize("outlier", ["concat", "add"])
def test_equalization_through_a_join_restores_the_8_bit_output(fw, outlier):
    model, _ = joins_model(fw.name, outlier)
    x_train, _, x_test, _ = fw.data()
    reference = fw.predict(model)(x_test)
    gen = representative_dataset(x_train)
    plain, _ = fw.ptq(model, gen)
    equalized, _ = fw.ptq(model, gen, core_config=EQUALIZE)
    undamaged, _ = fw.ptq(joins_model(fw.name)[0], gen)
    plain_db, equalized_db = (
        sqnr_db(reference, fw.predict(plain)(x_test)),
        sqnr_db(reference, fw.predict(equalized)(x_test)),
    )
    undamaged_db = sqnr_db(reference, fw.predict(undamaged)(x_test))
    assert equalized_db > plain_db + 15, (plain_db, equalized_db)
    assert equalized_db > undamaged_db - 3, (undamaged_db, equalized_db)


@pytest.mark.parametrize("outlier", ["concat", "add"])
def test_on_an_integer_target_the_suggested_fix_equalizes_through_the_join(fw, outlier):
    """The report's fix menu tries equalization wherever a cause shows an outlier channel:
    behind a join it now finds the pair, and the fix restores the output with every layer
    integer and no byte more."""
    model, names = joins_model(fw.name, outlier)
    x_train, _, _, _ = fw.data()
    config = mct.core.CoreConfig(
        debug_config=mct.core.DebugConfig(analyze_similarity=True), integer_only=True
    )
    _, info = fw.ptq(model, representative_dataset(x_train), core_config=config)
    fix = info.similarity.suggested_fix()
    assert fix.equalize and fix.restores and not fix.activations and not fix.weights, fix.summary()
    assert fix.output_sqnr_db_before < 20 and fix.output_sqnr_db_after > 30, fix.summary()
    assert any(f" {names['join']} " in p for p in fix.equalized_pairs), fix.summary()


# --- which joins are equalized: constructed graphs, no framework ---------------------------

CONV = {"kernel": (0,)}


def _graph(edges: list[tuple[str, str]], nodes: list[Node], outputs: list[str]) -> Graph:
    g = Graph("g", "numpy")
    g.add_node(Node("x", OpKind.INPUT, "input", output_shapes=[(None, 4, 8, 8)], channel_axis=1))
    for node in nodes:
        g.add_node(node)
    for src, dst in edges:
        g.add_edge(src, dst, dst_index=sum(1 for e in g.in_edges(dst)))
    g.inputs, g.outputs = ["x"], [(o, 0) for o in outputs]
    return g


def _conv(name: str, cin: int, cout: int, seed: int = 0) -> Node:
    kernel = np.random.default_rng(seed).normal(size=(cout, cin, 3, 3))
    return Node(name, OpKind.CONV, "Conv", weights={"kernel": kernel, "bias": np.zeros(cout)}, kernel_axes=CONV,
                kernel_in_axis={"kernel": 1}, input_shapes=[(None, cin, 8, 8)], output_shapes=[(None, cout, 8, 8)],
                channel_axis=1)  # fmt: skip


def _op(name: str, kind: OpKind, ins: list[int], out: int, function: str = "") -> Node:
    return Node(name, kind, kind.value, attrs={"function": function} if function else {},
                input_shapes=[(None, c, 8, 8) for c in ins], output_shapes=[(None, out, 8, 8)], channel_axis=1)  # fmt: skip


def test_a_concat_input_that_is_no_producers_keeps_its_channels_and_the_others_their_offsets():
    g = _graph(
        [("x", "a"), ("a", "relu"), ("x", "cat"), ("relu", "cat"), ("cat", "c")],
        [_conv("a", 4, 6), _op("relu", OpKind.ACTIVATION, [6], 6, "relu"), _op("cat", OpKind.CONCAT, [4, 6], 10),
         _conv("c", 10, 2, seed=1)],
        ["c"],
    )  # fmt: skip
    ((pair,),) = [find_pairs(g)]
    assert (pair.producer, pair.consumer, pair.offset) == ("a", "c", 4)
    out, scales = equalize(g)
    k_in, k_out = g.node("c").weights["kernel"], out.node("c").weights["kernel"]
    np.testing.assert_array_equal(k_out[:, :4], k_in[:, :4])  # the input's own channels untouched
    np.testing.assert_allclose(k_out[:, 4:], k_in[:, 4:] * scales["a"][None, :, None, None])


@pytest.mark.parametrize(
    "tail, found",
    [
        ("conv", True),  # add -> relu -> conv
        ("two convs", True),  # add -> relu -> conv, conv: both consumers scaled up
        ("next add", False),  # a residual stream: the add's output feeds the next add too
        ("output", False),  # the add's output is a model output
        ("relu6", False),  # a capped ReLU after the add
    ],
)
def test_an_add_is_equalized_only_where_every_consumer_is_a_weighted_layer(tail, found):
    nodes = [_conv("a", 4, 6), _conv("b", 4, 6, seed=1), _op("add", OpKind.ADD, [6, 6], 6),
             _op("act", OpKind.ACTIVATION, [6], 6, "relu6" if tail == "relu6" else "relu"), _conv("c", 6, 2, seed=2)]  # fmt: skip
    edges = [("x", "a"), ("x", "b"), ("a", "add"), ("b", "add"), ("add", "act"), ("act", "c")]
    outputs = ["c"]
    if tail == "two convs":
        nodes.append(_conv("d", 6, 2, seed=3))
        edges.append(("act", "d"))
        outputs.append("d")
    if tail == "next add":
        nodes += [_conv("d", 2, 6, seed=3), _op("add2", OpKind.ADD, [6, 6], 6)]
        edges += [("c", "d"), ("act", "add2"), ("d", "add2")]
        outputs = ["add2"]
    if tail == "output":
        outputs.append("act")
    pairs = [p for p in find_pairs(_graph(edges, nodes, outputs)) if p.join == "add"]
    assert bool(pairs) == found
    if tail == "two convs":
        assert pairs[0].consumers == ("c", "d") and pairs[0].changed_weights == ("a", "b", "c", "d")


def test_a_join_along_a_spatial_axis_is_left_alone():
    cat = Node("cat", OpKind.CONCAT, "concat", input_shapes=[(None, 6, 8, 8)] * 2,
               output_shapes=[(None, 6, 16, 8)], channel_axis=1)  # fmt: skip
    g = _graph(
        [("x", "a"), ("x", "b"), ("a", "cat"), ("b", "cat"), ("cat", "c")],
        [_conv("a", 4, 6), _conv("b", 4, 6, seed=1), cat, _conv("c", 6, 2, seed=2)],
        ["c"],
    )
    assert find_pairs(g) == []
