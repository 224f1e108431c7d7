"""MCT's export cells, as its tutorials write them, run unchanged (issue 25, item 5).

Only the model and data are the digits ones; the calls, their keywords, the temp files
made with ``tempfile.mkstemp`` (which already exist when the export writes them) and the
way the tutorials load the results back are MCT's.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

import model_compression_toolkit as mct
from tests.fixtures.digits import digits_data
from tests.fixtures.trained import load_trained

# The tests open the files with the runtimes themselves, as users do; these runtimes announce
# their own deprecations (torch.jit for torch.export, tf.lite.Interpreter for LiteRT).
pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:.*tf.lite.Interpreter is deprecated:UserWarning"),
    pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider':UserWarning"),
]


def test_pytorch_export_tutorial_cells(tmp_path, monkeypatch):
    import onnxruntime as ort
    import torch

    monkeypatch.chdir(tmp_path)
    float_model = load_trained("pytorch")
    x_train, _, x_test, _ = digits_data()
    loader = torch.utils.data.DataLoader(torch.from_numpy(x_train[:160]), batch_size=32)

    def representative_data_gen():
        for batch in loader:
            yield [batch]

    quantized_exportable_model, _ = mct.ptq.pytorch_post_training_quantization(
        in_module=float_model, representative_data_gen=representative_data_gen
    )
    onnx_file_path = "mobilenet_v2_qdq.onnx"  # as the tutorial names it
    mct.exporter.pytorch_export_model(
        model=quantized_exportable_model, save_model_path=onnx_file_path, repr_dataset=representative_data_gen
    )
    mct.exporter.pytorch_export_model(
        model=quantized_exportable_model,
        save_model_path=onnx_file_path,
        repr_dataset=representative_data_gen,
        serialization_format=mct.exporter.PytorchExportSerializationFormat.ONNX,
        quantization_format=mct.exporter.QuantizationFormat.FAKELY_QUANT,
        onnx_opset_version=17,
    )
    sess = ort.InferenceSession(onnx_file_path, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    input_name = sess.get_inputs()[0].name
    output = sess.run(None, {input_name: x_test[:8]})[0]
    assert output.shape == (8, 10)
    torchscript_file_path = "mobilenet_v2_fq.pt"
    mct.exporter.pytorch_export_model(
        quantized_exportable_model, torchscript_file_path, representative_data_gen,
        serialization_format=mct.exporter.PytorchExportSerializationFormat.TORCHSCRIPT,
    )  # fmt: skip
    loaded = torch.jit.load(torchscript_file_path)
    np.testing.assert_array_equal(
        loaded(torch.from_numpy(x_test[:8])).numpy(),
        quantized_exportable_model(torch.from_numpy(x_test[:8])).numpy(),
    )


def test_keras_export_tutorial_cells(tmp_path):
    import keras
    import tensorflow as tf

    float_model = load_trained("keras")
    x_train, _, x_test, _ = digits_data(channels_last=True)

    def representative_dataset_gen():
        for i in range(5):
            yield [x_train[i * 32 : (i + 1) * 32]]

    quantized_exportable_model, _ = mct.ptq.keras_post_training_quantization(
        in_model=float_model, representative_data_gen=representative_dataset_gen
    )
    fd, keras_file_path = tempfile.mkstemp(".keras", dir=tmp_path)
    os.close(fd)
    custom_objects = mct.exporter.keras_export_model(
        model=quantized_exportable_model, save_model_path=keras_file_path
    )
    loaded_model = mct.keras_load_quantized_model(keras_file_path)
    np.testing.assert_array_equal(
        np.asarray(loaded_model(x_test[:8])), np.asarray(quantized_exportable_model(x_test[:8]))
    )
    again = keras.models.load_model(keras_file_path, custom_objects=custom_objects)
    np.testing.assert_array_equal(np.asarray(again(x_test[:8])), np.asarray(loaded_model(x_test[:8])))
    for quantization_format in (
        mct.exporter.QuantizationFormat.INT8,
        mct.exporter.QuantizationFormat.FAKELY_QUANT,
    ):
        fd, tflite_file_path = tempfile.mkstemp(".tflite", dir=tmp_path)
        os.close(fd)
        mct.exporter.keras_export_model(
            model=quantized_exportable_model,
            save_model_path=tflite_file_path,
            serialization_format=mct.exporter.KerasExportSerializationFormat.TFLITE,
            quantization_format=quantization_format,
        )
        interpreter = tf.lite.Interpreter(model_path=tflite_file_path)
        interpreter.allocate_tensors()
        assert os.path.getsize(tflite_file_path) > 0 and interpreter.get_input_details()
