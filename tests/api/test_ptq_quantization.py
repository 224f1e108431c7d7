"""PTQ results a user relies on: accuracy, the info report, an untouched input model."""

from __future__ import annotations

import json

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.errors import ConfigurationError
from tests.fixtures.digits import accuracy, representative_dataset


def test_8bit_accuracy_within_one_point_of_float(fw, trained_digits):
    model, x_train, x_test, y_test = trained_digits
    q_model, info = fw.ptq(model, representative_dataset(x_train))
    float_acc = accuracy(fw.predict(model), x_test, y_test)
    quant_acc = accuracy(fw.predict(q_model), x_test, y_test)
    assert float_acc > 85.0
    assert quant_acc >= float_acc - 1.0, (float_acc, quant_acc)


@pytest.mark.parametrize("target", ["integer_only", "quantize_outputs"])
def test_quantized_model_output_is_on_the_activation_grid_for_an_integer_target(fw, trained_digits, target):
    model, x_train, x_test, _ = trained_digits
    q_model, info = fw.ptq(model, representative_dataset(x_train), mct.core.CoreConfig(**{target: True}))
    (out_name,) = [n for n, layer in info.layers.items() if layer.kind == "dense"]
    grid = info.layers[out_name].activation["grid"]
    out = fw.predict(q_model)(x_test[:16])
    steps = out / grid["scale"] + grid["zero_point"]
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-3)


def test_by_default_the_model_output_is_handed_on_unrounded_and_info_says_how_to_round_it(fw, trained_digits):
    model, x_train, x_test, _ = trained_digits
    q_model, info = fw.ptq(model, representative_dataset(x_train))
    (out_name,) = [n for n, layer in info.layers.items() if layer.kind == "dense"]
    dense = info.layers[out_name]
    assert dense.activation is None and dense.weights["kernel"]["n_bits"] == 8  # its weights are still 8-bit
    assert "model output" in dense.activation_float_reason and "integer_only=True" in dense.activation_float_reason
    # what it reads is still rounded: the output is the float model's only up to the 8-bit error
    y_float, y_q = fw.predict(model)(x_test[:64]), fw.predict(q_model)(x_test[:64])
    assert 0 < np.abs(y_q - y_float).max() < 0.2 * np.abs(y_float).max()


@pytest.mark.parametrize("target", ["integer_only", "platform"])
def test_float_outputs_on_an_integer_only_target_are_refused_before_any_work(fw, trained_digits, target, tmp_path):
    model, x_train, _, _ = trained_digits
    mct.set_log_folder(tmp_path / "logs")
    platform = {}
    if target == "platform":
        platform = {"target_platform_capabilities": mct.get_target_platform_capabilities(
            {"pytorch": "pytorch", "keras": "tensorflow"}[fw.name], "default")}
    config = mct.core.CoreConfig(quantize_outputs=False, integer_only=target == "integer_only")
    with pytest.raises(ConfigurationError, match="quantize_outputs=False.*integer-only"):
        fw.ptq(model, representative_dataset(x_train), config, **platform)
    assert not list((tmp_path / "logs").rglob("*"))  # refused before anything was written
    assert config.quantize_outputs is False  # the user's config is not changed


def test_info_reports_bits_thresholds_float_layers_and_memory(fw, trained_digits):
    model, x_train, _, _ = trained_digits
    core_config = mct.core.CoreConfig(
        quantization_config=mct.core.QuantizationConfig(weights_n_bits=4, activation_n_bits=7)
    )
    _, info = fw.ptq(model, representative_dataset(x_train), core_config)
    convs = [layer for layer in info.layers.values() if layer.kind == "conv"]
    assert len(convs) == 3
    for conv in convs:
        kernel = conv.weights["kernel"]
        assert kernel["n_bits"] == 4 and kernel["per_channel"]
        assert all(t > 0 for t in kernel["threshold"])
        assert conv.activation is None and "fused" in conv.activation_float_reason
    acts = [layer.activation for layer in info.layers.values() if layer.activation]
    assert acts and all(a["n_bits"] == 7 for a in acts)
    relus = [layer for layer in info.layers.values() if layer.kind == "activation"]
    assert len(relus) == 3 and all(r.activation["signed"] is False for r in relus)  # after ReLU: unsigned
    mem = info.memory
    assert mem.weights_quantized_bytes < 0.2 * mem.weights_float_bytes + 64 * 4 * 4
    assert mem.activation_quantized_bytes < mem.activation_float_bytes
    json.dumps(info.to_dict(), allow_nan=False)


@pytest.mark.parametrize(
    "method",
    [mct.core.QuantizationErrorMethod.NOCLIPPING, mct.core.QuantizationErrorMethod.MAE, mct.core.QuantizationErrorMethod.LP],
)
def test_every_error_method_keeps_accuracy(fw, trained_digits, method):
    model, x_train, x_test, y_test = trained_digits
    qc = mct.core.QuantizationConfig(weights_error_method=method, activation_error_method=method, l_p_value=3.0)
    q_model, _ = fw.ptq(model, representative_dataset(x_train), mct.core.CoreConfig(quantization_config=qc))
    assert accuracy(fw.predict(q_model), x_test, y_test) >= accuracy(fw.predict(model), x_test, y_test) - 2.0


@pytest.mark.parametrize("qmethod", list(mct.core.QuantizationMethod))
def test_every_quantization_method_keeps_accuracy(fw, trained_digits, qmethod):
    model, x_train, x_test, y_test = trained_digits
    qc = mct.core.QuantizationConfig(weights_quantization_method=qmethod, activation_quantization_method=qmethod)
    q_model, info = fw.ptq(model, representative_dataset(x_train), mct.core.CoreConfig(quantization_config=qc))
    assert accuracy(fw.predict(q_model), x_test, y_test) >= accuracy(fw.predict(model), x_test, y_test) - 2.0
    if qmethod == mct.core.QuantizationMethod.POWER_OF_TWO:
        thresholds = [t for layer in info.layers.values() for t in layer.weights.get("kernel", {}).get("threshold") or []]
        assert thresholds and all(np.log2(t) == np.round(np.log2(t)) for t in thresholds)


def test_the_model_input_is_quantized_on_its_grid(fw, trained_digits):
    model, x_train, x_test, _ = trained_digits
    q_model, info = fw.ptq(model, representative_dataset(x_train))
    (layer,) = [layer for layer in info.layers.values() if layer.kind == "input"]
    grid = layer.activation["grid"]
    scale, zero_point = np.float32(grid["scale"]), np.float32(grid["zero_point"])
    x = x_test[:32]
    on_grid = (np.clip(np.round(x / scale) + zero_point, grid["qmin"], grid["qmax"]) - zero_point) * scale
    nudged = on_grid + np.float32(0.2) * scale  # the same grid point after rounding
    predict = fw.predict(q_model)
    assert not np.allclose(on_grid, x)
    np.testing.assert_allclose(predict(x), predict(on_grid), atol=1e-5)
    np.testing.assert_allclose(predict(nudged), predict(on_grid), atol=1e-5)


def _ids_model(framework: str):
    """Embedding -> mean over the tokens -> dense: a model whose input is integer ids."""
    if framework == "pytorch":
        import torch
        from torch import nn

        class Bag(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                torch.manual_seed(0)
                self.embed, self.fc = nn.Embedding(50, 8), nn.Linear(8, 3)

            def forward(self, ids):
                return self.fc(self.embed(ids).mean(1))

        return Bag().eval()
    import keras

    keras.utils.set_random_seed(0)
    ids = keras.Input((6,), dtype="int32")
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(50, 8)(ids))
    return keras.Model(ids, keras.layers.Dense(3)(pooled))


def test_integer_inputs_are_left_unquantized(fw):
    ids = np.random.default_rng(0).integers(0, 50, (16, 6)).astype(np.int64 if fw.name == "pytorch" else np.int32)
    model = _ids_model(fw.name)
    q_model, info = fw.ptq(model, lambda: iter([[ids[:8]], [ids[8:]]]))
    (layer,) = [layer for layer in info.layers.values() if layer.kind == "input"]
    assert layer.activation is None and "int" in layer.activation_float_reason
    out, expected = fw.predict(q_model)(ids), fw.predict(model)(ids)
    assert np.abs(out - expected).max() < 0.05 * np.abs(expected).max()
