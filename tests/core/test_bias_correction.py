"""Bias correction: the quantized model keeps the float model's mean output.

The kernel layouts are checked against the frameworks' own convolutions, and the effect
end to end through PTQ on models whose inputs have a large mean, for both backends.
"""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.core.calibration.bias_correction import mean_shift
from model_compression_toolkit.errors import ConfigurationError
from tests.fixtures.digits import keras_predict, torch_predict

RNG = np.random.default_rng(0)


# ------------------------------------------------------------------ the layouts
def _torch_layers():
    torch = pytest.importorskip("torch")
    nn = torch.nn
    return [
        (nn.Conv2d(4, 6, 3, groups=2, bias=False), (1, 4, 5, 5), 2),
        (nn.Conv2d(4, 8, 3, groups=4, bias=False), (1, 4, 5, 5), 4),  # depthwise, multiplier 2
        (nn.Conv1d(3, 5, 2, bias=False), (1, 3, 4), 1),
        (nn.Linear(5, 3, bias=False), (1, 5), 1),
    ]


def test_mean_shift_is_what_a_pytorch_layer_outputs_on_its_input_mean():
    """A layer run with the kernel error as its kernel, on an input holding each channel's
    mean everywhere, outputs the shift at every position."""
    torch = pytest.importorskip("torch")
    for layer, shape, groups in _torch_layers():
        delta = RNG.standard_normal(layer.weight.shape).astype(np.float32)
        mean = RNG.standard_normal(shape[1])
        with torch.no_grad():
            layer.weight.copy_(torch.from_numpy(delta))
            x = np.broadcast_to(mean.reshape((1, -1) + (1,) * (len(shape) - 2)), shape).astype(np.float32)
            want = layer(torch.from_numpy(np.ascontiguousarray(x))).numpy()
        got = mean_shift(delta, (0,), 1, groups, mean)
        per_position = want[0].reshape(len(got), -1)  # (out channels, positions)
        np.testing.assert_allclose(per_position, np.repeat(got[:, None], per_position.shape[1], 1), rtol=1e-4, atol=1e-4)


def test_mean_shift_is_what_a_keras_layer_outputs_on_its_input_mean():
    """The same for Keras' layouts: (kh, kw, in / groups, out), depthwise (kh, kw, in, mult), Dense."""
    keras = pytest.importorskip("keras")
    L = keras.layers
    cases = [
        (L.Conv2D(6, 3, groups=2, use_bias=False), (1, 5, 5, 4), (3,), 2),
        (L.DepthwiseConv2D(3, depth_multiplier=2, use_bias=False), (1, 5, 5, 4), (2, 3), 1),
        (L.Dense(3, use_bias=False), (1, 5), (1,), 1),
    ]
    for layer, shape, out_axes, groups in cases:
        layer.build(shape)
        delta = RNG.standard_normal(layer.get_weights()[0].shape).astype(np.float32)
        layer.set_weights([delta])
        mean = RNG.standard_normal(shape[-1])
        x = np.broadcast_to(mean, shape).astype(np.float32)
        want = np.asarray(layer(x))
        per_position = want.reshape(-1, want.shape[-1])  # (positions, out channels)
        got = mean_shift(delta, out_axes, delta.ndim - 2, groups, mean)
        np.testing.assert_allclose(per_position, np.repeat(got[None], len(per_position), 0), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ end to end
def _torch_model():
    torch = pytest.importorskip("torch")
    nn = torch.nn
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, bias=False),  # no bias: it gets one
        nn.Conv2d(8, 8, 3, groups=2),
        nn.Conv2d(8, 16, 3, groups=8),  # depthwise
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4),
    ).eval()  # fmt: skip


def _keras_model():
    keras = pytest.importorskip("keras")
    L = keras.layers
    keras.utils.set_random_seed(0)
    inputs = keras.Input((12, 12, 3))
    x = L.Conv2D(8, 3, use_bias=False)(inputs)  # no bias: it gets one
    x = L.Conv2D(8, 3, groups=2)(x)
    x = L.DepthwiseConv2D(3, depth_multiplier=2)(x)
    x = L.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, L.Dense(4)(x))


def _run(framework: str, model, x: np.ndarray) -> np.ndarray:
    return (torch_predict if framework == "pytorch" else keras_predict)(model)(x)


@pytest.mark.parametrize("framework", ["pytorch", "keras"])
def test_bias_correction_takes_out_the_mean_error_of_coarse_weights(framework):
    """3-bit weights and near-float (16-bit) activations on inputs of mean 3, through layers
    without non-linearities, where the correction is exact on average: the quantized model's
    mean output error on new data is a small part of what it is without bias correction,
    and its error around that mean is not made worse. (A ReLU between layers turns part of
    the error's spread into a mean shift that no bias takes out.)"""
    model = _torch_model() if framework == "pytorch" else _keras_model()
    ptq = getattr(mct.ptq, f"{framework}_post_training_quantization")
    shape = (64, 3, 12, 12) if framework == "pytorch" else (64, 12, 12, 3)
    data, held_out = (3.0 + RNG.random(shape, dtype=np.float32) for _ in range(2))
    errors = {}
    for correct in (False, True):
        qc = mct.core.QuantizationConfig(
            weights_n_bits=3, activation_n_bits=16, weights_bias_correction=correct
        )
        q_model, info = ptq(
            model, lambda: iter([[data[:32]], [data[32:]]]), mct.core.CoreConfig(quantization_config=qc)
        )
        errors[correct] = _run(framework, q_model, held_out) - _run(framework, model, held_out)
    mean_error = {c: float(np.abs(e.mean(axis=0)).mean()) for c, e in errors.items()}
    spread = {c: float(e.std(axis=0).mean()) for c, e in errors.items()}
    assert mean_error[True] < 0.2 * mean_error[False], mean_error
    assert spread[True] < 1.2 * spread[False], spread


def test_bias_correction_must_be_a_bool():
    with pytest.raises(ConfigurationError, match="weights_bias_correction must be True or False; got 'yes'"):
        mct.core.QuantizationConfig(weights_bias_correction="yes").validate()


def test_layers_whose_input_mean_is_unknown_are_left_alone():
    """A transposed conv (no correction rule) and a linear layer after a flatten of 2x2 maps
    (the statistics hold one mean per channel, not per flattened value) keep their bias;
    the conv and the linear layer after a 1x1 pool are corrected."""
    torch = pytest.importorskip("torch")
    from model_compression_toolkit.pipeline.session import produced_graph

    nn = torch.nn

    class Branches(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.up = nn.ConvTranspose2d(4, 4, 2, stride=2)
            self.pool = nn.AdaptiveAvgPool2d(2)
            self.flat_2x2 = nn.Linear(16, 3)
            self.gap = nn.AdaptiveAvgPool2d(1)
            self.flat_1x1 = nn.Linear(4, 3)

        def forward(self, x):
            y = torch.relu(self.conv(x))
            a = self.flat_2x2(torch.flatten(self.pool(self.up(y)), 1))
            return a + self.flat_1x1(torch.flatten(self.gap(y), 1))

    x = 3.0 + RNG.random((16, 3, 8, 8), dtype=np.float32)
    q_model, _ = mct.ptq.pytorch_post_training_quantization(Branches().eval(), lambda: iter([[x]]))
    graph = produced_graph(q_model)
    corrected = {n.name for n in graph.nodes() if n.quant.input_mean is not None}
    assert corrected == {"conv", "flat_1x1"}
