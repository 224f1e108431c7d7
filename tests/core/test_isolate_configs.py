"""`causes.isolate` copies the graph without deep-copying quantization configs it throws
away (`Graph.copy(quant=False)`), and its variants still hold exactly one quantizer."""

from __future__ import annotations

import numpy as np
import pytest

from model_compression_toolkit.core.config.methods import QuantizationErrorMethod, QuantizationMethod
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.core.quant_config import (
    ActivationQuantConfig,
    NodeQuantConfig,
    QuantGrid,
    WeightsQuantConfig,
)
from model_compression_toolkit.core.similarity.causes import ACTIVATION, WEIGHTS, QuantizerEntry, isolate


def _activation(bits: int = 8) -> ActivationQuantConfig:
    grid = QuantGrid(np.array(0.1), np.array(0.0), -128, 127)
    return ActivationQuantConfig(bits, QuantizationMethod.SYMMETRIC, QuantizationErrorMethod.MSE, grid=grid)


def _weights() -> dict[str, WeightsQuantConfig]:
    grid = QuantGrid(np.full(3, 0.01), np.zeros(3), -128, 127)
    cfg = WeightsQuantConfig(
        8, QuantizationMethod.SYMMETRIC, QuantizationErrorMethod.MSE, True, (0,), grid=grid
    )
    return {"kernel": cfg}


def _quantized_chain() -> Graph:
    """``x -> conv (weights, fused into relu) -> relu (activation) -> fc (weights, corrected bias)``."""
    g = Graph("chain", "test")
    g.add_node(Node("x", OpKind.INPUT, "input", output_shapes=[(None, 3)]))
    conv = Node("conv", OpKind.CONV, "conv", output_shapes=[(None, 3)], weights={"kernel": np.ones((3, 3))})
    conv.quant = NodeQuantConfig(weights=_weights(), fused_into="relu", activation_float_reason="fused")
    relu = Node("relu", OpKind.ACTIVATION, "relu", output_shapes=[(None, 3)])
    relu.quant = NodeQuantConfig(activation=_activation())
    fc = Node("fc", OpKind.DENSE, "fc", output_shapes=[(None, 3)], weights={"kernel": np.ones((3, 3))})
    fc.quant = NodeQuantConfig(weights=_weights(), input_mean=np.arange(3.0), activation=_activation(4))
    for node in (conv, relu, fc):
        g.add_node(node)
    g.add_edge("x", "conv")
    g.add_edge("conv", "relu")
    g.add_edge("relu", "fc")
    g.inputs, g.outputs = ["x"], [("fc", 0)]
    g.validate()
    return g


def _quant_state(g: Graph) -> dict:
    return {n.name: repr(n.quant) for n in g.nodes()}


def test_a_copy_without_configs_has_empty_ones_and_leaves_the_source_alone():
    g = _quantized_chain()
    before = _quant_state(g)
    bare, full = g.copy(quant=False), g.copy()
    assert all(n.quant == NodeQuantConfig() for n in bare.nodes())
    assert all(bare.node(n.name).quant is not n.quant for n in g.nodes())
    assert _quant_state(full) == before  # the default still copies every config, deeply
    assert full.node("relu").quant.activation is not g.node("relu").quant.activation
    bare.node("fc").quant.weights["x"] = _weights()["kernel"]
    assert _quant_state(g) == before
    assert [n.name for n in bare.nodes()] == [n.name for n in g.nodes()]
    assert bare.node("conv").weights["kernel"] is g.node("conv").weights["kernel"]  # arrays shared


@pytest.mark.parametrize(
    "entry",
    [None, QuantizerEntry("relu", ACTIVATION, "relu", 8, 0.0), QuantizerEntry("fc", WEIGHTS, "fc", 8, 0.0)],
    ids=["none", "activation", "weights"],
)
def test_isolate_keeps_one_quantizer_and_the_fused_layers(entry):
    g = _quantized_chain()
    before = _quant_state(g)
    variant = isolate(g, entry)
    assert _quant_state(g) == before
    for node in variant.nodes():
        q, original = node.quant, g.node(node.name).quant
        assert q is not original
        assert q.fused_into == original.fused_into  # conv stays fused into relu
        on_here = entry is not None and entry.name == node.name
        if on_here and entry.kind == ACTIVATION:
            assert q.activation is original.activation and not q.weights and q.input_mean is None
        elif on_here:
            assert q.weights == original.weights and q.activation is None
            assert q.input_mean is original.input_mean  # the bias corrected for these weights
        else:
            assert not q.is_quantized and q.input_mean is None
