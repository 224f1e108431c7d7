"""On an integer-only target the quantized model has a grid on every tensor an int8 runtime
holds, so that a MobileNetV3-shaped model (hard-swish, a squeeze-excite hard-sigmoid written
as ops, a softmax) exports to an all-int8 TFLite file that computes what was logged."""

from __future__ import annotations

import re

import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.errors import ExportError
from tests.fixtures.mobile import mobile_data, mobile_model

FRAMEWORKS = ["pytorch", "keras"]


def _quantize(framework: str, platform: str | None = None, **config):
    data = mobile_data(framework)
    ptq = (
        mct.ptq.pytorch_post_training_quantization
        if framework == "pytorch"
        else mct.ptq.keras_post_training_quantization
    )
    core = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False), **config)
    kwargs = {}
    if platform is not None:
        fw = "pytorch" if framework == "pytorch" else "tensorflow"
        kwargs["target_platform_capabilities"] = mct.get_target_platform_capabilities(fw, platform)
    q_model, info = ptq(mobile_model(framework), lambda: iter([[b] for b in data]), core_config=core, **kwargs)
    return q_model, info, lambda: iter([[b] for b in data])


def _by_type(info, kind: str) -> list:
    return [layer for layer in info.layers.values() if layer.kind == kind]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_integer_only_target_rounds_every_tensor_an_int8_runtime_holds(framework):
    _, float_target, _ = _quantize(framework)
    _, integer, _ = _quantize(framework, integer_only=True)
    stem, dw, se_reduce, se_expand, project = _by_type(integer, "conv")
    # a target that runs float: the stem rounds after its hard-swish, the hard-sigmoid once
    assert float_target.layers[stem.name].activation is None
    assert "fused with the activation" in float_target.layers[stem.name].activation_float_reason
    sigmoid_inner = [
        layer for layer in float_target.layers.values()
        if "inside a hard-sigmoid" in (layer.activation_float_reason or "")
    ]  # fmt: skip
    assert len(sigmoid_inner) == 2  # its add and relu6
    # which are fused into the activation, not layers kept float: only the unrounded output is
    (softmax,) = _by_type(integer, "softmax")
    assert set(float_target.float_layers) == {softmax.name} and float_target.counts.kept_float == 1
    # an int8 runtime: the stem, the dw conv (before the hard-swish written as ops) and the
    # squeeze-excite's expand (before its gate) each hold an int8 tensor
    for conv in (stem, dw, se_expand, project):
        assert conv.activation is not None, conv
    # relu fuses into the layer before it, as TFLite's kernels run it
    assert se_reduce.activation is None and "fused with the activation" in se_reduce.activation_float_reason
    reasons = [layer.activation_float_reason or "" for layer in integer.layers.values()]
    assert not any("hard-sigmoid" in r for r in reasons)
    assert sum("inside a hard-swish" in r for r in reasons) == 3  # one HARD_SWISH kernel
    assert softmax.activation["grid"]["scale"] == pytest.approx(1 / 256)  # the grid TFLite's kernel writes
    assert softmax.activation["grid"]["zero_point"] == 0


def test_integer_only_keras_exports_to_an_all_int8_tflite_file_with_parity(tmp_path):
    q_model, _, data = _quantize("keras", integer_only=True)
    result = mct.exporter.keras_export_model(
        q_model, tmp_path / "m.tflite", serialization_format="TFLITE", quantization_format="INT8", repr_dataset=data
    )
    assert result.parity_ok, result.parity
    (parity,) = result.parity
    assert parity.max_steps <= 1 and parity.cosine > 0.999, parity
    assert result.ops["HARD_SWISH"] == 2  # the activation and the one written as ops
    assert result.ops["QUANTIZE"] == 1 and result.ops["DEQUANTIZE"] == 1  # int8 from input to output
    assert result.ops["SOFTMAX"] == 1


def test_a_float_target_model_is_refused_as_int8_tflite_with_the_setting_that_fixes_it(tmp_path):
    q_model, _, _ = _quantize("keras", quantize_outputs=True)
    with pytest.raises(ExportError) as err:
        mct.exporter.keras_export_model(
            q_model, tmp_path / "m.tflite", serialization_format="TFLITE", quantization_format="INT8"
        )
    message = str(err.value)
    assert "'stem' (Conv2D): its output is quantized only after 'hardswish'" in message
    assert re.search(r"'add(_\d+)?' \(add\): its output stays float \(inside a hard-sigmoid written as ops", message)
    assert "'softmax' (Softmax): TFLite's int8 kernel writes its output on a grid over [0, 0.996094]" in message
    assert message.count("CoreConfig(integer_only=True)") >= 3
    assert not list(tmp_path.iterdir())


def test_integer_only_pytorch_exports_to_onnx_with_parity(tmp_path):
    q_model, _, data = _quantize("pytorch", integer_only=True)
    result = mct.exporter.pytorch_export_model(q_model, tmp_path / "m.onnx", data)
    assert result.parity_ok, result.parity
    (parity,) = result.parity
    assert parity.max_steps <= 1 and parity.cosine > 0.999, parity
    assert result.runtime_ops["QLinearConv"] == 5


def test_mcts_tflite_platform_runs_the_hard_sigmoid_op_by_op_and_exports_to_int8_tflite(tmp_path):
    """A target platform is an integer target too: an activation written as ops other than a
    hard-swish runs op by op there, its fusing patterns decide the rest (MCT's "tflite"
    platform fuses a conv with its ReLU only), and the file computes the quantized model."""
    q_model, info, data = _quantize("keras", platform="tflite")
    reasons = [layer.activation_float_reason or "" for layer in info.layers.values()]
    assert not any("hard-sigmoid" in r for r in reasons) and sum("inside a hard-swish" in r for r in reasons) == 3
    assert info.layers["stem"].activation is not None  # the platform does not fuse it with the hard-swish
    result = mct.exporter.keras_export_model(
        q_model, tmp_path / "m.tflite", serialization_format="TFLITE", quantization_format="INT8", repr_dataset=data
    )
    assert result.parity_ok, result.parity
    assert result.ops["HARD_SWISH"] == 2 and result.ops["DEQUANTIZE"] == 1


def test_a_model_quantized_for_imx500_is_refused_as_int8_tflite_naming_its_platform_and_tflites(tmp_path):
    """IMX500 grids the softmax its own way: the refusal says the model was quantized for that
    platform and names the one that places TFLite's grids; quantized for it, as the message
    says, the same model exports with parity."""
    q_model, _, _ = _quantize("keras", platform="imx500")
    with pytest.raises(ExportError) as err:
        mct.exporter.keras_export_model(
            q_model, tmp_path / "m.tflite", serialization_format="TFLITE", quantization_format="INT8"
        )
    message = str(err.value)
    assert "'softmax' (Softmax): TFLite's int8 kernel writes its output on a grid over" in message
    assert "quantized for the imx500 1.0 platform" in message
    advice = "mct.get_target_platform_capabilities('tensorflow', 'tflite')"
    assert advice in message and not list(tmp_path.iterdir())
    q_model, _, data = _quantize("keras", platform="tflite")  # the advice, followed
    result = mct.exporter.keras_export_model(
        q_model, tmp_path / "m.tflite", serialization_format="TFLITE", quantization_format="INT8", repr_dataset=data
    )
    assert result.parity_ok, result.parity


def _int8_from_end_to_end(q_model, tmp_path, data):
    """``q_model`` as an int8 TFLite file that computes it within a step and has no stretch
    computed in float between a DEQUANTIZE and a QUANTIZE (`keras.export.float_islands`)."""
    result = mct.exporter.keras_export_model(
        q_model, tmp_path / "m.tflite", serialization_format="TFLITE", quantization_format="INT8", repr_dataset=data
    )
    assert result.parity_ok, result.parity
    (parity,) = result.parity
    assert parity.max_steps <= 1 and parity.cosine > 0.999, parity
    assert not [note for note in result.notes if "between a DEQUANTIZE" in note], result.notes
    return result


def test_an_input_rescaling_runs_in_int8_in_the_tflite_file(tmp_path):
    """Keras's ``Rescaling`` (ImageNet's per-channel normalization here) is a float MUL and ADD
    in TFLite, between a DEQUANTIZE and a QUANTIZE: an integer-only runtime cannot run it. The
    file runs it as an int8 1x1 depthwise conv (kernel the scale, bias the offset), and still
    computes the quantized model."""
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Rescaling(scale=[1 / 58.4, 1 / 57.1, 1 / 57.4], offset=[-2.12, -2.04, -1.80])(inputs)
    x = keras.layers.Conv2D(8, 3, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(4)(x))
    images = np.random.default_rng(0).integers(0, 256, (32, 16, 16, 3)).astype(np.float32)
    data = lambda: iter([[images[:16]], [images[16:]]])  # noqa: E731
    config = mct.core.CoreConfig(integer_only=True, debug_config=mct.core.DebugConfig(analyze_similarity=False))
    q_model, _ = mct.ptq.keras_post_training_quantization(model, data, config)
    result = _int8_from_end_to_end(q_model, tmp_path, data)
    assert result.ops["DEPTHWISE_CONV_2D"] == 1 and result.ops["DEQUANTIZE"] == 1, result.ops


def test_a_hard_sigmoid_activation_runs_in_int8_in_the_tflite_file(tmp_path):
    """Keras's ``hard_sigmoid`` activation (a squeeze-excite gate) has no int8 kernel in TFLite,
    which writes it as a float ADD and MUL. On an integer-only target its output takes the grid
    over [0, 1] (step 1/255), and the file runs it as an int8 ADD + RELU6 and MUL whose inner
    grid (step 6/255) rounds nothing more."""
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    inputs = keras.Input((16, 16, 3))
    features = keras.layers.Conv2D(8, 3, activation="relu")(inputs)
    s = keras.layers.GlobalAveragePooling2D(keepdims=True)(features)
    s = keras.layers.Conv2D(8, 1)(keras.layers.Conv2D(4, 1, activation="relu")(s))
    gate = keras.layers.Activation("hard_sigmoid", name="gate")(s)
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.Multiply()([features, gate]))
    model = keras.Model(inputs, keras.layers.Dense(4)(x))
    images = np.random.default_rng(0).normal(size=(32, 16, 16, 3)).astype(np.float32)
    data = lambda: iter([[images[:16]], [images[16:]]])  # noqa: E731
    config = mct.core.CoreConfig(integer_only=True, debug_config=mct.core.DebugConfig(analyze_similarity=False))
    q_model, info = mct.ptq.keras_post_training_quantization(model, data, config)
    grid = info.layers["gate"].activation["grid"]
    assert grid["scale"] == pytest.approx(1 / 255) and grid["qmax"] - grid["qmin"] == 255
    result = _int8_from_end_to_end(q_model, tmp_path, data)
    assert result.ops["DEQUANTIZE"] == 1 and result.ops["ADD"] == 1, result.ops
