"""Export errors: typed, raised before anything is written, and no half-written file left."""

from __future__ import annotations

import os
import sys

import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.errors import (
    ConfigurationError,
    ExportError,
    ExportPathError,
    ModelReadError,
    UnsupportedFrameworkError,
)
from tests.fixtures.digits import representative_dataset
from tests.fixtures.quantized import quantize
from tests.fixtures.trained import load_trained

E = mct.exporter
P, K, Q = E.PytorchExportSerializationFormat, E.KerasExportSerializationFormat, E.QuantizationFormat


def _export(framework, model, path, data, **kwargs):
    if framework == "pytorch":
        return E.pytorch_export_model(model, path, data, **kwargs)
    return E.keras_export_model(model, path, repr_dataset=data, **kwargs)


@pytest.mark.parametrize("framework", ["pytorch", "keras"])
def test_a_model_the_library_did_not_produce_is_refused(framework, tmp_path):
    q_model, data = quantize(framework)
    with pytest.raises(ModelReadError, match="did not produce"):
        _export(framework, load_trained(framework), tmp_path / "m.onnx", data)
    other = "keras" if framework == "pytorch" else "pytorch"
    with pytest.raises(UnsupportedFrameworkError, match=f"Use mct.exporter.{other}_export_model for it"):
        _export(framework, quantize(other)[0], tmp_path / "m.onnx", data)
    with pytest.raises(UnsupportedFrameworkError, match="expected a torch.nn.Module or a keras.Model"):
        _export(framework, "a model", tmp_path / "m.onnx", data)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "framework, serialization, quantization, message",
    [
        ("pytorch", P.ONNX, Q.MCTQ, "mct_quantizers"),
        ("pytorch", P.ONNX, Q.INT8, "QuantizeLinear/DequantizeLinear"),
        ("pytorch", P.TORCHSCRIPT, Q.INT8, "TORCHSCRIPT with QuantizationFormat.FAKELY_QUANT"),
        ("keras", K.KERAS, Q.INT8, "TFLITE with QuantizationFormat.INT8"),
        ("keras", K.KERAS, Q.MCTQ, "KERAS with QuantizationFormat.FAKELY_QUANT"),
        ("pytorch", "onnx_runtime", Q.FAKELY_QUANT, "PytorchExportSerializationFormat.ONNX"),
        ("keras", P.ONNX, Q.FAKELY_QUANT, "KerasExportSerializationFormat.TFLITE"),
    ],
)
def test_a_format_not_written_is_an_error_naming_the_ones_that_are(
    framework, serialization, quantization, message, tmp_path
):
    q_model, data = quantize(framework)
    with pytest.raises(ExportError, match=message):
        _export(framework, q_model, tmp_path / "m", data, serialization_format=serialization,
                quantization_format=quantization)  # fmt: skip
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("framework", ["pytorch", "keras"])
def test_paths_that_cannot_be_written_fail_before_anything_is_written(framework, tmp_path):
    q_model, data = quantize(framework)
    suffix = ".onnx" if framework == "pytorch" else ".keras"
    with pytest.raises(ExportPathError, match="is a directory"):
        _export(framework, q_model, tmp_path, data)
    with pytest.raises(ExportPathError, match="does not exist"):
        _export(framework, q_model, tmp_path / "missing" / f"m{suffix}", data)
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ExportPathError, match="is a file; choose a path in a folder"):
        _export(framework, q_model, tmp_path / "a_file" / f"m{suffix}", data)
    with pytest.raises(ExportPathError, match="must be a file path"):
        _export(framework, q_model, 42, data)
    if framework == "keras":
        with pytest.raises(ExportPathError, match="must end with '.keras'"):
            _export(framework, q_model, tmp_path / "m.h5", data)
    if sys.platform != "win32" and os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        try:
            with pytest.raises(ExportPathError, match="cannot write into"):
                _export(framework, q_model, locked / f"m{suffix}", data)
        finally:
            locked.chmod(0o700)
    assert sorted(p.name for p in tmp_path.iterdir()) in (["a_file"], ["a_file", "locked"])


def test_a_layer_kept_float_cannot_be_int8_tflite_and_the_existing_file_stays(tmp_path):
    from tests.conftest import FRAMEWORKS

    fw = FRAMEWORKS["keras"]
    model = load_trained("keras")
    relu = [layer.name for layer in model.layers if type(layer).__name__ == "ReLU"][1]
    data = representative_dataset(fw.data()[0], 2, 16)
    config = mct.core.CoreConfig(
        keep_float=mct.core.KeepFloat(names=[relu]),
        debug_config=mct.core.DebugConfig(analyze_similarity=False),
    )
    q_model, _ = fw.ptq(model, data, config)
    target = tmp_path / "m.tflite"
    target.write_bytes(b"the user's previous file")
    with pytest.raises(ExportError, match=rf"'{relu}' \(ReLU\): its output stays float \(kept in float"):
        E.keras_export_model(q_model, target, serialization_format=K.TFLITE, quantization_format=Q.INT8)
    assert target.read_bytes() == b"the user's previous file"
    assert [p.name for p in tmp_path.iterdir()] == ["m.tflite"]
    result = E.keras_export_model(
        q_model, target, serialization_format=K.TFLITE, quantization_format=Q.FAKELY_QUANT
    )
    assert result.parity_ok  # the fake-quant TFLite keeps the float layer


def test_16_bit_activations_need_opset_21_in_onnx_and_do_not_fit_int8_tflite(tmp_path):
    config = mct.core.CoreConfig(
        quantization_config=mct.core.QuantizationConfig(activation_n_bits=16),
        debug_config=mct.core.DebugConfig(analyze_similarity=False),
    )
    from tests.conftest import FRAMEWORKS

    torch_q, torch_data = _requantize(FRAMEWORKS["pytorch"], config)
    with pytest.raises(
        ExportError, match="16-bit activation needs 16-bit integer types, which ONNX has from opset 21"
    ):
        E.pytorch_export_model(torch_q, tmp_path / "m.onnx", torch_data, onnx_opset_version=18)
    keras_q, keras_data = _requantize(FRAMEWORKS["keras"], config)
    with pytest.raises(ExportError, match="16-bit activations; TFLite int8 holds at most 8"):
        E.keras_export_model(
            keras_q, tmp_path / "m.tflite", serialization_format=K.TFLITE, quantization_format=Q.INT8
        )
    assert not list(tmp_path.iterdir())


def _requantize(fw, config):
    data = representative_dataset(fw.data()[0], 2, 16)
    return fw.ptq(load_trained(fw.name), data, config)[0], data


@pytest.mark.parametrize("framework", ["pytorch", "keras"])
def test_is_layer_exportable_fn_refusing_a_layer_stops_the_export(framework, tmp_path):
    q_model, data = quantize(framework)
    with pytest.raises(ExportError, match="is_layer_exportable_fn refused"):
        _export(framework, q_model, tmp_path / "m.keras", data, is_layer_exportable_fn=lambda layer: False)
    with pytest.raises(ConfigurationError, match="is_layer_exportable_fn must be a callable"):
        _export(framework, q_model, tmp_path / "m.keras", data, is_layer_exportable_fn="yes")
    assert not list(tmp_path.iterdir())


def test_a_failure_while_checking_the_file_leaves_nothing_behind(tmp_path, monkeypatch):
    """The file is written and run in a staging folder: an error at any step after writing
    (here the runtime failing to load it) removes it."""
    from model_compression_toolkit.pytorch import export as torch_export

    q_model, data = quantize("pytorch")

    def broken_runtime(*args, **kwargs):
        raise RuntimeError("onnxruntime cannot load the file")

    monkeypatch.setattr(torch_export, "OnnxRuntime", broken_runtime)
    with pytest.raises(RuntimeError, match="cannot load"):
        E.pytorch_export_model(q_model, tmp_path / "m.onnx", data)
    assert not list(tmp_path.iterdir())


def test_keras_load_quantized_model_errors(tmp_path):
    with pytest.raises(ExportPathError, match="no file at"):
        mct.keras_load_quantized_model(tmp_path / "missing.keras")
    (tmp_path / "m.tflite").write_bytes(b"")
    with pytest.raises(ExportPathError, match="tf.lite.Interpreter"):
        mct.keras_load_quantized_model(tmp_path / "m.tflite")
    with pytest.raises(ConfigurationError, match="options must be None"):
        mct.keras_load_quantized_model(tmp_path / "m.keras", options=object())


def test_bad_arguments_are_configuration_errors(tmp_path):
    q_model, data = quantize("pytorch")
    with pytest.raises(ExportError, match="onnx_opset_version must be an integer"):
        E.pytorch_export_model(q_model, tmp_path / "m.onnx", data, onnx_opset_version="18")
    with pytest.raises(ExportError, match="applies to ONNX only"):
        E.pytorch_export_model(q_model, tmp_path / "m.pt", data, serialization_format=P.TORCHSCRIPT,
                               onnx_opset_version=17)  # fmt: skip
    with pytest.raises(ExportError, match="per-channel DequantizeLinear needs opset 13"):
        E.pytorch_export_model(q_model, tmp_path / "m.onnx", data, onnx_opset_version=11)
    with pytest.raises(ConfigurationError, match="parity_samples"):
        E.pytorch_export_model(q_model, tmp_path / "m.onnx", data, parity_samples=0)
    assert not list(tmp_path.iterdir())
