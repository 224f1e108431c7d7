"""The benchmark shapes exported and compared: ResNet-18 and MobileNetV2 (bench/models.py) to
ONNX in onnxruntime, keras.applications MobileNetV2 to int8 TFLite. Random weights set up as
the benchmarks' (bench.models), at a small input size to keep the suite fast."""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct
from bench import models

NO_SIMILARITY = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))


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
    q_model, _ = mct.ptq.pytorch_post_training_quantization(model, data, NO_SIMILARITY)
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
