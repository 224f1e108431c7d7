"""Bias correction of padded convolutions: a kernel position over the padding reads zeros.

``tap_coverage`` is checked against the frameworks' own convolutions (a one-hot kernel on an
all-ones input outputs, averaged over the outputs, the fraction of them at which that
position reads the input), and the correction end to end: on inputs holding one value per
channel, a padded conv's quantized mean output is the float one's, where the correction that
takes every position to read the mean (the one before) leaves most of the error.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import model_compression_toolkit as mct
from model_compression_toolkit.core.calibration.bias_correction import mean_shift, tap_coverage
from model_compression_toolkit.core.graph import Node, OpKind
from tests.fixtures.digits import keras_predict, torch_predict

FAST = settings(max_examples=40, deadline=None)


def _torch_node(
    size: tuple[int, ...], kernel: tuple[int, ...], stride, padding, dilation
) -> tuple[Node, object]:
    """A PyTorch conv over ``size`` (1 channel in and out) and its node as the reader gives it."""
    torch = pytest.importorskip("torch")
    conv = (torch.nn.Conv1d if len(size) == 1 else torch.nn.Conv2d)(
        1, 1, kernel, stride=stride, padding=padding, dilation=dilation, bias=False
    )
    out = conv(torch.zeros((1, 1, *size))).shape[2:]
    node = Node(
        "conv", OpKind.CONV, type(conv).__name__,
        attrs={"kernel_size": kernel, "stride": conv.stride, "padding": conv.padding, "dilation": conv.dilation,
               "groups": 1, "transposed": False, "padding_mode": "zeros"},
        weights={"kernel": conv.weight.detach().numpy()}, kernel_axes={"kernel": (0,)}, kernel_in_axis={"kernel": 1},
        input_shapes=[(None, 1, *size)], output_shapes=[(None, 1, *out)], channel_axis=1,
    )  # fmt: skip
    return node, conv


def _measured_torch(conv, size: tuple[int, ...]) -> np.ndarray:
    """Per kernel position: the mean over the outputs of a one-hot kernel on an all-ones input."""
    import torch

    kernel = conv.weight.shape[2:]
    got = np.zeros(kernel)
    with torch.no_grad():
        for k in np.ndindex(*kernel):
            conv.weight.zero_()
            conv.weight[(0, 0, *k)] = 1.0
            got[k] = float(conv(torch.ones((1, 1, *size))).mean())
    return got


@FAST
@given(
    size=st.integers(1, 12),
    kernel=st.integers(1, 6),
    stride=st.integers(1, 3),
    padding=st.integers(0, 4),
    dilation=st.integers(1, 2),
)
def test_coverage_is_what_a_pytorch_conv1d_reads(size, kernel, stride, padding, dilation):
    if size + 2 * padding < dilation * (kernel - 1) + 1:
        return  # no output
    node, conv = _torch_node((size,), (kernel,), stride, padding, dilation)
    coverage = tap_coverage(node)
    want = _measured_torch(conv, (size,))
    got = np.ones(kernel) if coverage is None else coverage.reshape(kernel)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert (coverage is None) == bool(np.all(want == 1.0))


@pytest.mark.parametrize(
    "size, kernel, stride, padding",
    [((5, 7), (3, 3), (1, 1), (1, 1)), ((6, 6), (3, 5), (2, 2), (1, 2)), ((4, 4), (7, 7), (2, 2), (3, 3))],
)
def test_coverage_is_what_a_pytorch_conv2d_reads(size, kernel, stride, padding):
    node, conv = _torch_node(size, kernel, stride, padding, (1, 1))
    np.testing.assert_allclose(tap_coverage(node).reshape(kernel), _measured_torch(conv, size), atol=1e-6)


@pytest.mark.parametrize(
    "layer, size",
    [("Conv2D", (6, 6)), ("Conv2D", (5, 7)), ("DepthwiseConv2D", (6, 5)), ("Conv1D", (9,))],
)
def test_coverage_is_what_a_keras_same_conv_reads(layer, size):
    """Keras' "same" padding puts the odd zero at the end (stride 2 on an even size pads only
    after), read from the shapes the reader records."""
    keras = pytest.importorskip("keras")
    kernel = (3,) * len(size)
    conv = getattr(keras.layers, layer)(
        **({} if layer == "DepthwiseConv2D" else {"filters": 1}),
        kernel_size=kernel, strides=2, padding="same", use_bias=False,
    )  # fmt: skip
    x = np.ones((1, *size, 1), np.float32)
    out = np.asarray(conv(x)).shape[1:-1]
    w = conv.get_weights()[0]
    out_axes = (len(size) + 0, len(size) + 1) if layer == "DepthwiseConv2D" else (len(size) + 1,)
    node = Node(
        "conv", OpKind.CONV, layer,
        attrs={"kernel_size": kernel, "strides": (2,) * len(size), "padding": "same", "dilation_rate": (1,) * len(size)},
        weights={"kernel": w}, kernel_axes={"kernel": out_axes}, kernel_in_axis={"kernel": len(size)},
        input_shapes=[(None, *size, 1)], output_shapes=[(None, *out, 1)], channel_axis=-1,
    )  # fmt: skip
    want = np.zeros(kernel)
    for k in np.ndindex(*kernel):
        one_hot = np.zeros_like(w)
        one_hot[k] = 1.0
        conv.set_weights([one_hot])
        want[k] = float(np.asarray(conv(x)).mean())
    coverage = tap_coverage(node)
    assert coverage is not None
    np.testing.assert_allclose(coverage.reshape(kernel), want, atol=1e-6)


def test_unpadded_and_other_padding_modes_take_every_position_to_read_the_mean():
    node, _ = _torch_node((8, 8), (3, 3), (1, 1), (0, 0), (1, 1))
    assert tap_coverage(node) is None
    node, _ = _torch_node((8, 8), (3, 3), (1, 1), (1, 1), (1, 1))
    node.attrs["padding_mode"] = "reflect"  # the border reads data values
    assert tap_coverage(node) is None


# ------------------------------------------------------------------ end to end
def _padded_model(framework: str, depthwise: bool):
    """One padded layer: a 3x3 conv of stride 2, or a 5x5 depthwise conv on a 6x6 map."""
    if framework == "pytorch":
        torch = pytest.importorskip("torch")
        torch.manual_seed(0)
        nn = torch.nn
        layer = (
            nn.Conv2d(3, 6, 5, padding=2, groups=3) if depthwise else nn.Conv2d(3, 8, 3, stride=2, padding=1)
        )
        return nn.Sequential(layer).eval()
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6, 6, 3))
    L = keras.layers
    layer = (
        L.DepthwiseConv2D(5, padding="same", depth_multiplier=2)
        if depthwise
        else L.Conv2D(8, 3, strides=2, padding="same")
    )
    return keras.Model(inputs, layer(inputs))


def _run(framework: str, model, x: np.ndarray) -> np.ndarray:
    return (torch_predict if framework == "pytorch" else keras_predict)(model)(x)


@pytest.mark.parametrize("framework", ["pytorch", "keras"])
@pytest.mark.parametrize("depthwise", [False, True])
def test_padded_conv_keeps_the_float_mean_output(framework, depthwise):
    """3-bit kernels, 16-bit activations, inputs holding one value per channel and sample
    (mean 3), small maps where the padding covers much of each kernel, no non-linearity: the
    corrected model's mean output error per channel is a small part of the uncorrected
    one's, and several times smaller than what the correction that ignores the padding
    (computed here on the same node) would leave."""
    from model_compression_toolkit.pipeline.session import produced_graph

    model = _padded_model(framework, depthwise)
    rng = np.random.default_rng(1)
    per_channel = 3.0 + rng.random((64, 3), dtype=np.float32)
    if framework == "pytorch":
        data = np.ascontiguousarray(np.broadcast_to(per_channel[:, :, None, None], (64, 3, 6, 6)))
    else:
        data = np.ascontiguousarray(np.broadcast_to(per_channel[:, None, None, :], (64, 6, 6, 3)))
    ptq = getattr(mct.ptq, f"{framework}_post_training_quantization")
    channel_axes = (0, 2, 3) if framework == "pytorch" else (0, 1, 2)
    mean_error, graphs = {}, {}
    for correct in (False, True):
        qc = mct.core.QuantizationConfig(
            weights_n_bits=3, activation_n_bits=16, weights_bias_correction=correct
        )
        q_model, _ = ptq(
            model, lambda: iter([[data[:32]], [data[32:]]]), mct.core.CoreConfig(quantization_config=qc)
        )
        error = _run(framework, q_model, data) - _run(framework, model, data)
        mean_error[correct] = float(np.abs(error.mean(axis=channel_axes)).mean())
        graphs[correct] = produced_graph(q_model)
    assert mean_error[True] < 0.05 * mean_error[False], mean_error

    # the correction before, which takes every position to read the mean
    first = next(n for n in graphs[True].nodes() if n.kind == OpKind.CONV)
    assert tap_coverage(first) is not None and first.quant.input_mean is not None
    from model_compression_toolkit.core.calibration.quantizers import fake_quant

    cfg = first.quant.weights["kernel"]
    delta = (
        fake_quant(first.weights["kernel"], cfg.grid, cfg.channel_axes).astype(np.float64)
        - first.weights["kernel"]
    )
    groups = 3 if depthwise and framework == "pytorch" else 1
    args = (first.kernel_axes["kernel"], first.kernel_in_axis["kernel"], groups, first.quant.input_mean)
    blind, counted = mean_shift(delta, *args), mean_shift(delta * tap_coverage(first), *args)
    # the difference is the mean error it would leave: several times what is left now
    left_before = float(np.abs(blind - counted).mean())
    assert left_before > 3 * mean_error[True], (left_before, mean_error)
