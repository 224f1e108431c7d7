"""Grids as runtimes store them, what each format can express, and output parity."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from model_compression_toolkit.core.calibration.quantizers import (
    QuantizedWeights,
    fake_quant,
    symmetric_grid,
    uniform_grid,
)
from model_compression_toolkit.core.config import QuantizationConfig, QuantizationMethod
from model_compression_toolkit.core.export.grids import (
    DTYPE_RANGES,
    bias_rounding_steps,
    integer_biases,
    integer_values,
    onnx_problems,
    output_step,
    stored_grid,
    synthetic_batch,
    tflite_int8_problems,
)
from model_compression_toolkit.core.export.report import compare_output, compare_outputs, perturbed
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.core.preparation import assign_quantization
from model_compression_toolkit.core.quant_config import QuantGrid

FAST = settings(max_examples=40, deadline=None)
tensors = hnp.arrays(np.float32, st.tuples(st.integers(1, 6), st.integers(1, 5)),
                     elements=st.floats(-50, 50, width=32))  # fmt: skip
grids = st.one_of(
    st.builds(lambda t, b, s: symmetric_grid(np.full(6, t), b, s), st.floats(0.01, 40), st.integers(2, 16), st.booleans()),
    st.builds(lambda lo, w, b: uniform_grid(np.full(6, lo), np.full(6, lo + w), b), st.floats(-20, 5), st.floats(0.1, 40),
              st.integers(2, 16)),
)  # fmt: skip


@FAST
@given(tensors, grids, st.sampled_from(["int8", "uint8", "int16", "uint16"]))
def test_stored_integers_dequantize_to_the_fake_quantized_values(x, grid, dtype):
    """Moving the integers into a runtime's type changes no value: (q - zp) * scale is the fake quant."""
    channels = x.shape[0]  # one grid entry per row of x
    per_channel = QuantGrid(grid.scale[:channels], np.broadcast_to(grid.zero_point, grid.scale.shape)[:channels],
                            grid.qmin, grid.qmax)  # fmt: skip
    stored = stored_grid(per_channel, dtype)
    if stored is None:  # a grid wider than the type
        assert grid.qmax - grid.qmin > DTYPE_RANGES[dtype][1] - DTYPE_RANGES[dtype][0]
        return
    q = integer_values(x, per_channel, (0,), stored)
    assert q.dtype == np.dtype(dtype) and q.min() >= stored.lo and q.max() <= stored.hi
    lo, hi = DTYPE_RANGES[dtype]
    assert lo <= stored.lo <= stored.hi <= hi
    values = (q.astype(np.float64) - stored.zero_point.reshape(-1, 1)) * stored.scale.reshape(-1, 1)
    np.testing.assert_allclose(
        values, fake_quant(x.astype(np.float64), per_channel, (0,)), rtol=0, atol=1e-12
    )


def test_signed_8_bit_grid_moves_into_uint8_with_zero_point_128():
    stored = stored_grid(symmetric_grid(1.0, 8, signed=True), "uint8")
    assert (stored.offset, int(stored.zero_point), stored.lo, stored.hi, stored.narrow) == (
        128,
        128,
        0,
        255,
        False,
    )
    stored = stored_grid(symmetric_grid(1.0, 8, signed=False), "int8")
    assert (stored.offset, int(stored.zero_point), stored.lo, stored.hi) == (-128, -128, -128, 127)
    four = stored_grid(symmetric_grid(1.0, 4, signed=True), "int8")
    assert (four.offset, four.lo, four.hi, four.narrow) == (0, -8, 7, True)
    assert stored_grid(symmetric_grid(1.0, 16, signed=True), "int8") is None


def _graph(
    weights_bits=8, act_bits=8, method=QuantizationMethod.SYMMETRIC, fused_activation=None, function="relu",
    grids_for="float",
):
    """input -> conv -> relu -> dense, as a backend would read it (channels-last kernels)."""
    g = Graph("g", "keras")
    rng = np.random.default_rng(0)
    g.add_node(
        Node("x", OpKind.INPUT, "InputLayer", output_shapes=[(None, 4, 4, 3)], attrs={"dtype": "float32"})
    )
    g.add_node(Node("conv", OpKind.CONV, "Conv2D", weights={"kernel": rng.normal(size=(3, 3, 3, 8)).astype(np.float32),
               "bias": rng.normal(size=8).astype(np.float32)}, kernel_axes={"kernel": (3,)}, kernel_in_axis={"kernel": 2},
               output_shapes=[(None, 4, 4, 8)], channel_axis=-1, fused_activation=fused_activation))  # fmt: skip
    g.add_node(
        Node("act", OpKind.ACTIVATION, "ReLU", attrs={"function": function}, output_shapes=[(None, 4, 4, 8)])
    )
    g.add_node(Node("flat", OpKind.RESHAPE, "Flatten", output_shapes=[(None, 128)]))
    g.add_node(Node("dense", OpKind.DENSE, "Dense", weights={"kernel": rng.normal(size=(128, 10)).astype(np.float32),
               "bias": rng.normal(size=10).astype(np.float32)}, kernel_axes={"kernel": (1,)}, kernel_in_axis={"kernel": 0},
               output_shapes=[(None, 10)], channel_axis=-1))  # fmt: skip
    for a, b in (("x", "conv"), ("conv", "act"), ("act", "flat"), ("flat", "dense")):
        g.add_edge(a, b)
    g.inputs, g.outputs = ["x"], [("dense", 0)]
    assign_quantization(g, QuantizationConfig(weights_n_bits=weights_bits, activation_n_bits=act_bits,
                                              weights_quantization_method=method), grids_for=grids_for)  # fmt: skip
    for node in g.nodes():
        for cfg in node.quant.weights.values():
            t = np.abs(node.weights["kernel"]).max(axis=tuple(a for a in range(node.weights["kernel"].ndim)
                                                               if a not in cfg.channel_axes))  # fmt: skip
            cfg.grid = (
                symmetric_grid(t, cfg.n_bits, True)
                if method != QuantizationMethod.UNIFORM
                else uniform_grid(-t, t, cfg.n_bits)
            )
        act = node.quant.activation
        if act is not None and act.fixed_range is not None:
            act.grid = uniform_grid(*act.fixed_range, act.n_bits)
        elif act is not None:
            act.grid = symmetric_grid(4.0, act.n_bits, node.kind == OpKind.DENSE)
    return g


def test_tflite_int8_needs_integer_tensors_between_every_op():
    assert tflite_int8_problems(_graph()) == []
    assert any("16-bit activations" in p for p in tflite_int8_problems(_graph(act_bits=16)))
    assert any("zero point" in p for p in tflite_int8_problems(_graph(method=QuantizationMethod.UNIFORM)))
    problems = tflite_int8_problems(_graph(function="sigmoid"))
    hint = "CoreConfig(integer_only=True) without a target platform quantizes as an int8 runtime rounds"
    assert problems == [
        "'conv' (Conv2D): its output is quantized only after 'act' (sigmoid), which TFLite cannot fuse into it, "
        f"so the tensor between them has no grid (only relu and relu6 fuse; {hint})",
        "'act' (ReLU): TFLite's int8 kernel writes its output on a grid over [0, 0.996094] whatever grid it is "
        f"given, and this one is not that grid ({hint})",
    ]
    # quantized for an int8 runtime: the conv has its own grid, the sigmoid TFLite's fixed one
    g = _graph(function="sigmoid", grids_for="int8")
    assert g.node("conv").quant.activation is not None and g.node("conv").quant.fused_into is None
    assert g.node("act").quant.activation.fixed_range == (0.0, 255 / 256)
    assert tflite_int8_problems(g) == []
    g = _graph()
    g.node("act").quant.activation, g.node("act").quant.activation_float_reason = (
        None,
        "kept in float by a rule",
    )
    assert tflite_int8_problems(g) == ["'act' (ReLU): its output stays float (kept in float by a rule)"]


def test_onnx_expresses_float_layers_and_needs_opset_21_for_16_bits():
    g = _graph()
    g.node("act").quant.activation = None
    assert onnx_problems(g, 18) == []
    assert any("opset 21" in p for p in onnx_problems(_graph(weights_bits=16), 18))
    assert onnx_problems(_graph(weights_bits=16), 21) == []
    assert any("opset 13" in p for p in onnx_problems(_graph(), 12))


def test_output_step_looks_through_value_preserving_nodes():
    g = _graph()
    assert output_step(g, "dense") == pytest.approx(4.0 / 128)
    assert output_step(g, "flat") == pytest.approx(4.0 / 256)  # the flatten carries the relu's grid
    assert output_step(g, "conv") is None  # fused with its activation: no grid of its own


def test_integer_biases_round_on_input_times_weight_scale():
    g = _graph()
    weights = QuantizedWeights(g)
    rounded = integer_biases(g, weights)
    conv = g.node("conv")
    grid = (4.0 / 256) * conv.quant.weights["kernel"].grid.scale  # input unsigned 8-bit over [0, 4)
    ratio = rounded["conv"]["bias"].astype(np.float64) / grid
    np.testing.assert_allclose(ratio, np.round(ratio), atol=1e-3)
    assert np.abs(rounded["conv"]["bias"] - conv.weights["bias"]).max() <= grid.max() / 2 + 1e-7
    steps = bias_rounding_steps(g, weights)
    assert 0 < steps <= 0.5 * grid.max() / (4.0 / 256) + 1e-6


def test_synthetic_batch_lies_on_the_input_grid():
    g = _graph()
    (x,) = synthetic_batch(g, 5)
    assert x.shape == (5, 4, 4, 3)
    steps = x / (4.0 / 256)
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-4)
    assert x.min() >= 0 and x.max() < 4.0


def test_parity_metrics_on_known_differences():
    ref = np.array([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    same = compare_output("y", ref, ref.copy(), 0.5)
    assert same.ok and same.max_steps == 0 and same.equal_fraction == 1 and same.sqnr_db == float("inf")
    one = compare_output("y", ref, ref + np.array([[0.5, 0, 0], [0, 0, 0]]), 0.5)
    assert one.ok and one.max_steps == pytest.approx(1.0) and one.equal_fraction == pytest.approx(5 / 6)
    swapped = compare_output("y", ref, ref[:, ::-1], 0.5)
    assert not swapped.ok and swapped.top1_agreement == 0.0
    float_output = compare_output("y", ref, ref * (1 + 1e-5), None)
    assert float_output.ok and float_output.max_steps is None and float_output.cosine > 0.9999
    assert float_output.to_dict()["ok"] is True and same.to_dict()["sqnr_db"] is None  # JSON-safe
    merged = compare_outputs(
        ["y"], [[ref[:1]], [ref[1:]]], [[ref[:1]], [ref[1:] + 0.5]], [0.5], floor=[[ref[:1]], [ref[1:]]]
    )
    assert (
        merged[0].samples == 2 and merged[0].max_steps == pytest.approx(1.0) and merged[0].floor_cosine == 1.0
    )


def test_perturbed_moves_floats_by_at_most_the_noise_and_keeps_integers():
    x = np.linspace(-3, 3, 100, dtype=np.float32).reshape(4, 25)
    ids = np.arange(8).reshape(4, 2)
    noisy, same = perturbed([x, ids], noise=1e-6)
    assert noisy.dtype == np.float32 and not np.array_equal(noisy, x)
    np.testing.assert_allclose(noisy, x, rtol=1.5e-6)
    np.testing.assert_array_equal(same, ids)
