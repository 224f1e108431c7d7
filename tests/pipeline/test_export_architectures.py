"""The benchmark shapes exported and compared: ResNet-18 and MobileNetV2 (bench/models.py) to
ONNX in onnxruntime, keras.applications MobileNetV2 to int8 TFLite. Random weights set up as
the benchmarks' (bench.models), at a small input size to keep the suite fast."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import model_compression_toolkit as mct
from bench import models

NO_SIMILARITY = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))
# the model's outputs on a grid too: a file integer up to its outputs (the classifier as QGemm)
INTEGER_OUTPUTS = dataclasses.replace(NO_SIMILARITY, quantize_outputs=True)


def _data(shape):
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal(shape, dtype=np.float32) for _ in range(2)]
    return lambda: iter([[b] for b in batches])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["torch_resnet18", "torch_mobilenet_v2"])
def test_pytorch_architecture_runs_on_integer_kernels_and_matches(name, tmp_path):
    from torch import nn

    model = getattr(models, name)()
    data = _data((8, 3, 64, 64))
    q_model, _ = mct.ptq.pytorch_post_training_quantization(model, data, INTEGER_OUTPUTS)
    result = mct.exporter.pytorch_export_model(q_model, tmp_path / f"{name}.onnx", data)
    (parity,) = result.parity
    assert result.parity_ok and parity.samples == 16, parity
    assert parity.cosine > 0.999 and parity.top1_agreement >= 0.9
    convs = sum(1 for m in model.modules() if isinstance(m, nn.Conv2d))
    assert result.runtime_ops["QLinearConv"] == convs and "Conv" not in result.runtime_ops
    assert result.runtime_ops.get("QGemm", 0) == 1
    assert result.report.figures["quantized_biases"] == convs + 1
    assert result.report.figures["bias_rounding_steps"] < 0.5


@pytest.mark.slow
def test_keras_mobilenet_v2_runs_as_int8_tflite_and_matches(tmp_path):
    import keras

    model = models.keras_application("MobileNetV2", input_size=64)
    data = _data((8, 64, 64, 3))
    q_model, _ = mct.ptq.keras_post_training_quantization(model, data, NO_SIMILARITY)
    result = mct.exporter.keras_export_model(q_model, tmp_path / "m.tflite", serialization_format="TFLITE",
                                             quantization_format="INT8", repr_dataset=data)  # fmt: skip
    (parity,) = result.parity
    assert result.parity_ok and parity.cosine > 0.999, parity
    depthwise = sum(1 for layer in model.layers if isinstance(layer, keras.layers.DepthwiseConv2D))
    assert result.ops["DEPTHWISE_CONV_2D"] == depthwise and result.ops["QUANTIZE"] == 1
    assert 0 < result.report.figures["bias_rounding_steps"] < 0.5


@pytest.mark.slow
def test_keras_mobilenet_v3_on_an_integer_target_runs_as_int8_tflite_and_matches(tmp_path):
    """Hard-swish after its convs, squeeze-excites with a hard-sigmoid written as ops: with
    ``integer_only`` every tensor TFLite holds has its grid, so the file is int8 from input to
    output and computes the quantized model; for a float target the export is refused."""
    import keras

    from model_compression_toolkit.errors import ExportError

    model = models.keras_application("MobileNetV3Small", input_size=64)
    data = _data((8, 64, 64, 3))
    q_model, _ = mct.ptq.keras_post_training_quantization(
        model, data, dataclasses.replace(NO_SIMILARITY, integer_only=True)
    )
    result = mct.exporter.keras_export_model(q_model, tmp_path / "m.tflite", serialization_format="TFLITE",
                                             quantization_format="INT8", repr_dataset=data)  # fmt: skip
    (parity,) = result.parity
    assert result.parity_ok and parity.cosine > 0.999, parity
    assert result.parity.layers.first_departure is None  # every difference is the int32 biases
    hard_swish = sum(
        1 for layer in model.layers
        if isinstance(layer, keras.layers.Activation) and "hard_silu" in str(layer.get_config()["activation"])
    )  # fmt: skip
    assert hard_swish > 0 and result.ops["HARD_SWISH"] == hard_swish
    # int8 throughout, the input's Rescaling (x / 127.5 - 1) too: TFLite writes the layer as a
    # float MUL and ADD, the file as an int8 1x1 depthwise conv (kernel 1/127.5, bias -1)
    islands = [note for note in result.notes if "in float32 between a DEQUANTIZE" in note]
    assert not islands, islands
    assert result.ops["DEQUANTIZE"] == 1  # the output's: no float stretch after the input's QUANTIZE
    depthwise = sum(1 for layer in model.layers if isinstance(layer, keras.layers.DepthwiseConv2D))
    assert result.ops["DEPTHWISE_CONV_2D"] == depthwise + 1
    float_target, _ = mct.ptq.keras_post_training_quantization(model, data, INTEGER_OUTPUTS)
    with pytest.raises(ExportError, match=r"TFLite cannot fuse into it.*CoreConfig\(integer_only=True\)"):
        mct.exporter.keras_export_model(float_target, tmp_path / "f.tflite", serialization_format="TFLITE",
                                        quantization_format="INT8")  # fmt: skip


def test_two_inputs_and_two_outputs_keep_their_order_in_every_format(tmp_path):
    import keras
    import torch
    from torch import nn

    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.fc = (
                nn.Conv2d(3, 8, 3, padding=1),
                nn.Conv2d(3, 8, 3, padding=1),
                nn.Linear(8, 4),
            )

        def forward(self, x, y):
            z = torch.relu(self.a(x)) + torch.relu(self.b(y))
            return self.fc(z.mean((2, 3))), z

    rng = np.random.default_rng(0)
    pairs = [[rng.standard_normal((4, 3, 16, 16), dtype=np.float32) for _ in range(2)] for _ in range(2)]
    q_model, _ = mct.ptq.pytorch_post_training_quantization(Two().eval(), lambda: iter(pairs), NO_SIMILARITY)
    for name, serialization in (("two.onnx", "ONNX"), ("two.pt", "TORCHSCRIPT")):
        result = mct.exporter.pytorch_export_model(q_model, tmp_path / name, lambda: iter(pairs),
                                                   serialization_format=serialization)  # fmt: skip
        assert [p.name for p in result.parity] == ["fc", "add"] and result.parity_ok, result.parity
    x1, x2 = keras.Input((16, 16, 3)), keras.Input((16, 16, 3))
    conv = [keras.layers.Conv2D(8, 3, padding="same", activation="relu")(x) for x in (x1, x2)]
    add = keras.layers.Add()
    z = add(conv)
    model = keras.Model([x1, x2], [keras.layers.Dense(4)(keras.layers.GlobalAveragePooling2D()(z)), z])
    k_pairs = [[np.transpose(x, (0, 2, 3, 1)) for x in pair] for pair in pairs]
    k_model, _ = mct.ptq.keras_post_training_quantization(model, lambda: iter(k_pairs), NO_SIMILARITY)
    for name, serialization, quantization in (
        ("two.tflite", "TFLITE", "INT8"),
        ("two.keras", "KERAS", "FAKELY_QUANT"),
    ):
        result = mct.exporter.keras_export_model(k_model, tmp_path / name, serialization_format=serialization,
                                                 quantization_format=quantization, repr_dataset=lambda: iter(k_pairs))  # fmt: skip
        names = [p.name for p in result.parity]
        assert len(names) == 2 and names[1] == add.name and result.parity_ok, result.parity
