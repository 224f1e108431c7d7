"""Graph preparation on hand-built graphs: BN folding is exact, no-ops vanish, fusing marks the right nodes."""

import numpy as np
import pytest

from model_compression_toolkit.core.config import QuantizationConfig
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.core.preparation import prepare_graph

RNG = np.random.default_rng(0)


def conv_bn_graph(fused_activation=None, bias=True):
    """input -> conv -> bn -> dropout -> relu, a conv done as a dense layer on (N, 3) inputs."""
    g = Graph("g", "test")
    g.add_node(Node("x", OpKind.INPUT, "input", output_shapes=[(None, 3)], channel_axis=1))
    weights = {"kernel": RNG.normal(size=(4, 3)).astype(np.float32)}
    if bias:
        weights["bias"] = RNG.normal(size=4).astype(np.float32)
    g.add_node(Node("fc", OpKind.DENSE, "Linear", weights=weights, kernel_axes={"kernel": (0,)},
                    output_shapes=[(None, 4)], channel_axis=1, fused_activation=fused_activation))
    bn = {
        "gamma": RNG.uniform(0.5, 2, 4).astype(np.float32),
        "beta": RNG.normal(size=4).astype(np.float32),
        "mean": RNG.normal(size=4).astype(np.float32),
        "variance": RNG.uniform(0.5, 2, 4).astype(np.float32),
    }
    g.add_node(Node("bn", OpKind.BATCH_NORM, "BatchNorm1d", attrs={"epsilon": 1e-5}, weights=bn,
                    output_shapes=[(None, 4)], channel_axis=1))
    g.add_node(Node("drop", OpKind.DROPOUT, "Dropout", output_shapes=[(None, 4)], channel_axis=1))
    g.add_node(Node("relu", OpKind.ACTIVATION, "ReLU", attrs={"function": "relu"},
                    output_shapes=[(None, 4)], channel_axis=1))
    for a, b in (("x", "fc"), ("fc", "bn"), ("bn", "drop"), ("drop", "relu")):
        g.add_edge(a, b)
    g.inputs, g.outputs = ["x"], [("relu", 0)]
    return g


def forward(g, x):
    fc, bn = g.node("fc"), g.node("bn") if "bn" in g else None
    y = x @ fc.weights["kernel"].T + fc.weights.get("bias", 0)
    if bn is not None:
        w = bn.weights
        y = (y - w["mean"]) / np.sqrt(w["variance"] + 1e-5) * w["gamma"] + w["beta"]
    return np.maximum(y, 0)


@pytest.mark.parametrize("bias", [True, False])
def test_batch_norm_folds_into_the_layer_before_it_exactly(bias):
    g = conv_bn_graph(bias=bias)
    x = RNG.normal(size=(16, 3)).astype(np.float32)
    expected = forward(g, x)
    prepare_graph(g, QuantizationConfig())
    assert "bn" not in g and "drop" not in g
    np.testing.assert_allclose(forward(g, x), expected, rtol=1e-5, atol=1e-5)
    assert g.node("fc").origin == ["fc", "bn"]
    assert [e.src for e in g.in_edges("relu")] == ["fc"]


def test_batch_norm_after_a_fused_activation_is_not_folded():
    g = conv_bn_graph(fused_activation="relu")
    prepare_graph(g, QuantizationConfig())
    assert "bn" in g


def test_layer_followed_by_activation_is_quantized_after_it():
    g = prepare_graph(conv_bn_graph(), QuantizationConfig(weights_n_bits=4, activation_n_bits=6))
    fc, relu = g.node("fc"), g.node("relu")
    assert fc.quant.activation is None and "relu" in fc.quant.activation_float_reason
    assert relu.quant.activation.n_bits == 6
    assert fc.quant.weights["kernel"].n_bits == 4 and fc.quant.weights["kernel"].channel_axes == (0,)
    assert g.node("x").quant.activation is not None  # inputs are quantized too


def test_value_preserving_and_unknown_ops_stay_float_with_a_reason():
    g = Graph("g", "test")
    g.add_node(Node("x", OpKind.INPUT, "input", output_shapes=[(None, 4)]))
    g.add_node(Node("flat", OpKind.RESHAPE, "flatten", output_shapes=[(None, 4)]))
    g.add_node(Node("odd", OpKind.UNKNOWN, "erf", output_shapes=[(None, 4)]))
    g.add_edge("x", "flat")
    g.add_edge("flat", "odd")
    g.inputs, g.outputs = ["x"], [("odd", 0)]
    prepare_graph(g, QuantizationConfig())
    assert g.node("flat").quant.activation is None
    assert "unsupported" in g.node("odd").quant.activation_float_reason
