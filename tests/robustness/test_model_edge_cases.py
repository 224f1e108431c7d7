"""Models that used to crash halfway with a raw error (after files were written), or fail
with advice that was wrong: each now works, or fails first with a typed error naming the
real problem."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.errors import InputMismatchError, ModelReadError

RNG = np.random.default_rng(0)


def _ptq(model, gen, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        q_model, info = mct.ptq.pytorch_post_training_quantization(model, gen, **kwargs)
    return q_model, info, [str(w.message) for w in caught]


def _forward(model, x):
    import torch

    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


# ---------------------------------------------------------------- (N, L, F) into Linear
def test_sequences_of_different_lengths_through_linear_layers_quantize_per_feature():
    """(batch, sequence, features) batches whose sequence length changes from batch to batch
    (what a transformer's MLP sees) quantize: the channels of a Linear's input and of the
    activations after it are the last axis, not the sequence. The quantized model is the one
    the same rows give as (rows, features) batches, bias correction included (it used to stop
    with "expected 5 channels along axis 1", and skip bias correction on fixed lengths). A named
    activation method: the default grid of a model output leaves room for as many unseen
    values as one sample gives, and a sample is a sequence here, a row there."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.GELU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3)).eval()
    batches = [RNG.standard_normal((2, n, 4)).astype(np.float32) for n in (5, 7, 3)]
    named = mct.core.CoreConfig(quantization_config=mct.core.QuantizationConfig(
        activation_quantization_method=mct.core.QuantizationMethod.SYMMETRIC))  # fmt: skip
    q3, info3, _ = _ptq(model, lambda: [[b] for b in batches], core_config=named)
    q2, info2, _ = _ptq(model, lambda: [[b.reshape(-1, 4)] for b in batches], core_config=named)
    rows = np.concatenate([b.reshape(-1, 4) for b in batches])
    np.testing.assert_allclose(_forward(q3, rows), _forward(q2, rows), rtol=0, atol=1e-5)
    for name, layer in info2.layers.items():
        assert info3.layers[name].activation == layer.activation, name
    uncorrected = _ptq(model, lambda: [[b] for b in batches], core_config=mct.core.CoreConfig(
        quantization_config=mct.core.QuantizationConfig(
            weights_bias_correction=False, activation_quantization_method=mct.core.QuantizationMethod.SYMMETRIC)))[0]  # fmt: skip
    assert np.abs(_forward(q3, rows) - _forward(uncorrected, rows)).max() > 1e-4  # corrected


# ---------------------------------------------------------------- zero-size layers
class _TwoHeads:
    @staticmethod
    def make():
        import torch
        from torch import nn

        class TwoHeads(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Linear(8, 8)
                self.head = nn.Linear(8, 4)
                self.empty = nn.Linear(8, 0)  # a head pruned away

            def forward(self, x):
                h = torch.relu(self.body(x))
                return torch.cat([self.head(h), self.empty(h)], dim=1)

        torch.manual_seed(0)
        return TwoHeads().eval()


def test_a_layer_with_zero_outputs_is_kept_float_and_the_rest_is_quantized():
    """A Linear(8, 0) has nothing to quantize: it stays float, says why, and the model around
    it is quantized (it used to stop with "cannot reshape array of size 0")."""
    model = _TwoHeads.make()
    x = RNG.standard_normal((16, 8)).astype(np.float32)
    q_model, info, _ = _ptq(model, lambda: [[x]])
    assert _forward(q_model, x).shape == (16, 4)
    np.testing.assert_allclose(_forward(q_model, x), _forward(model, x), atol=0.1)
    assert "empty" in info.layers["empty"].weights_float_reason
    assert info.layers["head"].weights  # quantized


# ---------------------------------------------------------------- device and dtype
def test_a_meta_device_model_is_refused_before_anything_is_written(tmp_path):
    """A model built on the meta device has no weights to quantize: a ModelReadError says so
    and how to load them, before any file is written."""
    import torch
    from torch import nn

    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(8, 4), nn.ReLU()).eval()
    mct.set_log_folder(tmp_path)
    with pytest.raises(ModelReadError, match="'meta' device") as err:
        mct.ptq.pytorch_post_training_quantization(
            model, lambda: [[RNG.standard_normal((2, 8)).astype(np.float32)]]
        )
    assert "load_state_dict" in str(err.value) and "0.weight" in str(err.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("dtype", ["float16", "float64", "bfloat16"])
def test_half_double_and_bfloat16_models_quantize_in_float32_and_say_so(dtype):
    """A model converted with .half(), .double() or to bfloat16 quantizes (it used to fail with
    "Check the shapes"): it is calibrated in float32, one warning says so and how to convert
    the result back, and the user's model keeps its dtype."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(144, 3))
    model = model.eval().to(getattr(torch, dtype))
    x = RNG.standard_normal((8, 1, 8, 8)).astype(np.float32)
    q_model, _, shown = _ptq(model, lambda: [[x]])
    assert {p.dtype for p in model.parameters()} == {getattr(torch, dtype)}
    said = [m for m in shown if dtype in m and "float32" in m]
    assert len(said) == 1 and f"q_model.to(torch.{dtype})" in said[0], shown
    expected = _forward(model.float(), x)
    np.testing.assert_allclose(_forward(q_model, x), expected, atol=0.05 * np.abs(expected).max())


@pytest.mark.parametrize("dtype", ["int64", "bool", "uint8"])
def test_integer_or_bool_data_into_a_float_layer_names_the_dtype(tmp_path, dtype):
    """Integer or bool batches into a model whose first layer computes in float: an
    InputMismatchError names the input, its dtype and the conversion, before any file is
    written (it used to say "Check the shapes", which were right)."""
    from torch import nn

    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU()).eval()
    x = (RNG.random((4, 1, 8, 8)) * 3).astype(dtype)
    mct.set_log_folder(tmp_path)
    with pytest.raises(InputMismatchError) as err:
        mct.ptq.pytorch_post_training_quantization(model, lambda: [[x]])
    message = str(err.value)
    assert f"input 'input_1' holds {dtype}" in message and ".astype(np.float32)" in message, message
    assert "Check the shapes" not in message
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- Keras Lambda
def test_a_keras_lambda_layer_error_gives_the_advice_that_works():
    """Keras refuses to rebuild a Lambda holding a Python lambda unless unsafe deserialization
    is on: the error says so and names keras.config.enable_unsafe_deserialization(), instead
    of asking for a get_config() that Lambda already has."""
    import keras

    inputs = keras.Input((8,))
    x = keras.layers.Lambda(lambda t: t * 2.0, name="double")(keras.layers.Dense(4)(inputs))
    model = keras.Model(inputs, x)
    with pytest.raises(ModelReadError) as err:
        mct.ptq.keras_post_training_quantization(
            model, lambda: [[RNG.standard_normal((4, 8)).astype(np.float32)]]
        )
    message = str(err.value)
    assert "'double'" in message and "keras.config.enable_unsafe_deserialization()" in message, message
    assert "Make get_config()" not in message
