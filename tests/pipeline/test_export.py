"""mct.exporter on the trained digits CNN: each format is written, run in its real runtime
(onnxruntime, torch.jit, the TFLite interpreter, Keras), and matches the quantized model."""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.pipeline.session import produced_graph
from tests.fixtures.digits import accuracy
from tests.fixtures.quantized import quantize

# The tests open the files with the runtimes themselves, as users do; these runtimes announce
# their own deprecations (torch.jit for torch.export, tf.lite.Interpreter for LiteRT).
pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:.*tf.lite.Interpreter is deprecated:UserWarning"),
    pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider':UserWarning"),
]


E = mct.exporter
P, K, Q = E.PytorchExportSerializationFormat, E.KerasExportSerializationFormat, E.QuantizationFormat
FORMATS = {
    "pytorch": [(P.ONNX, Q.FAKELY_QUANT, "model.onnx"), (P.TORCHSCRIPT, Q.FAKELY_QUANT, "model.pt")],
    "keras": [
        (K.KERAS, Q.FAKELY_QUANT, "model.keras"),
        (K.TFLITE, Q.INT8, "model_int8.tflite"),
        (K.TFLITE, Q.FAKELY_QUANT, "model_fq.tflite"),
    ],
}
CASES = [(fw, *case) for fw, cases in FORMATS.items() for case in cases]


def export(fw, q_model, path, data, serialization, quantization):
    if fw.name == "pytorch":
        return E.pytorch_export_model(q_model, str(path), data, serialization_format=serialization,
                                      quantization_format=quantization)  # fmt: skip
    return E.keras_export_model(q_model, str(path), serialization_format=serialization,
                                quantization_format=quantization, repr_dataset=data)  # fmt: skip


def runtime_predict(path, serialization):
    """A predict function running the file in its runtime, opened here, not by the library."""
    if serialization == P.ONNX:
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        return lambda x: session.run(None, {name: x})[0]
    if serialization == P.TORCHSCRIPT:
        import torch

        model = torch.jit.load(str(path))
        return lambda x: model(torch.from_numpy(x)).detach().numpy()
    if serialization == K.KERAS:
        model = mct.keras_load_quantized_model(path)
        return lambda x: np.asarray(model(x, training=False))
    import tensorflow as tf

    runner = tf.lite.Interpreter(model_path=str(path)).get_signature_runner()
    return lambda x: next(iter(runner(**{next(iter(runner.get_input_details())): x}).values()))


@pytest.mark.parametrize("framework, serialization, quantization, name", CASES, ids=[c[3] for c in CASES])
def test_each_format_runs_in_its_runtime_and_matches_the_quantized_model(
    framework, serialization, quantization, name, tmp_path
):
    from tests.conftest import FRAMEWORKS

    fw = FRAMEWORKS[framework]
    q_model, data = quantize(framework, quantize_outputs=True)
    _, _, x_test, y_test = fw.data()
    result = export(fw, q_model, tmp_path / name, data, serialization, quantization)
    assert result.path == tmp_path / name and result.path.stat().st_size == result.file_bytes > 0
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no staging folder left behind
    assert result.parity_ok, result.parity
    (parity,) = result.parity
    assert parity.samples == 32 and parity.top1_agreement == 1.0
    assert parity.max_steps <= 1.001 and parity.cosine > 0.9999
    predict = runtime_predict(result.path, serialization)
    quantized_acc = accuracy(fw.predict(q_model), x_test, y_test)
    runtime_acc = accuracy(predict, x_test, y_test)
    assert abs(runtime_acc - quantized_acc) <= 0.5, (runtime_acc, quantized_acc)
    assert runtime_acc > 85


def test_onnx_holds_our_grids_as_qdq_and_onnxruntime_fuses_integer_kernels(tmp_path):
    import onnx
    from onnx import numpy_helper

    q_model, data = quantize("pytorch", quantize_outputs=True)
    graph = produced_graph(q_model)
    result = E.pytorch_export_model(q_model, tmp_path / "m.onnx", data)
    model = onnx.load(str(result.path))
    assert model.opset_import[0].version == 18
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    weight_dq = [
        n for n in model.graph.node if n.op_type == "DequantizeLinear" and inits.get(n.input[0]) is not None
    ]
    kernels = [n for n in weight_dq if inits[n.input[0]].dtype == np.int8]
    biases = [n for n in weight_dq if inits[n.input[0]].dtype == np.int32]
    assert len(kernels) == 4 and len(biases) == 4  # 3 convolutions and the linear layer
    for node in graph.nodes():
        kernel = node.quant.weights.get("kernel")
        if kernel is None:
            continue
        dq = next(n for n in kernels if n.input[0] == f"{node.name}.weight_q")
        np.testing.assert_allclose(inits[dq.input[1]], np.float32(kernel.grid.scale), rtol=0)  # per channel
        assert inits[dq.input[1]].shape == (node.weights["kernel"].shape[0],)
        w_int = inits[dq.input[0]].astype(np.float64)
        shape = (-1,) + (1,) * (w_int.ndim - 1)
        np.testing.assert_allclose(w_int * kernel.grid.scale.reshape(shape), q_model.get_submodule(node.name).weight.numpy(),
                                   rtol=1e-6, atol=1e-9)  # fmt: skip
    scales = {float(inits[n.input[1]]) for n in model.graph.node if n.op_type == "QuantizeLinear"}
    grids = {float(np.float32(n.quant.activation.grid.scale)) for n in graph.nodes() if n.quant.activation}
    assert scales == grids
    zero_points = [inits[n.input[2]] for n in model.graph.node if n.op_type == "QuantizeLinear"]
    assert all(z.dtype == np.uint8 for z in zero_points) and {int(z) for z in zero_points} == {0, 128}
    runtime = result.runtime_ops
    assert runtime["QLinearConv"] == 3 and runtime.get("QGemm", 0) == 1 and "Conv" not in runtime


def test_tflite_int8_tensors_hold_our_grids(tmp_path):
    import tensorflow as tf

    q_model, data = quantize("keras", quantize_outputs=True)
    graph = produced_graph(q_model)
    result = E.keras_export_model(q_model, tmp_path / "m.tflite", serialization_format=K.TFLITE,
                                  quantization_format=Q.INT8, repr_dataset=data)  # fmt: skip
    interp = tf.lite.Interpreter(model_path=str(result.path))
    tensors = interp.get_tensor_details()
    kernels = [
        t for t in tensors if t["dtype"] == np.int8 and len(t["quantization_parameters"]["scales"]) > 1
    ]
    assert len(kernels) == 4
    ours = sorted(
        tuple(np.float32(n.quant.weights["kernel"].grid.scale)) for n in graph.nodes() if n.quant.weights
    )
    theirs = sorted(tuple(t["quantization_parameters"]["scales"]) for t in kernels)
    np.testing.assert_allclose(np.concatenate(ours), np.concatenate(theirs), rtol=1e-6)
    activations = {float(t["quantization"][0]) for t in tensors if t["dtype"] == np.int8 and t not in kernels}
    grids = {float(n.quant.activation.grid.scale) for n in graph.nodes() if n.quant.activation}
    assert all(any(abs(a - g) <= 1e-6 * g for g in grids) for a in activations)
    assert {
        np.dtype(t["dtype"]).name for t in tensors if len(t["quantization_parameters"]["scales"]) > 1
    } <= {"int8", "int32"}
    floats = [t for t in tensors if t["dtype"] == np.float32]
    assert len(floats) == 2  # the model's input and output, around QUANTIZE and DEQUANTIZE
    assert result.ops["QUANTIZE"] == 1 and result.ops["DEQUANTIZE"] == 1 and result.ops["CONV_2D"] == 4


def _last_tflite_op(path):
    """(the last op of the file that computes, the op before it, and each's input dtypes), as
    the interpreter runs them without its delegate; the reshapes after the last layer only move values."""
    import tensorflow as tf

    interp = tf.lite.Interpreter(
        model_path=str(path),
        experimental_op_resolver_type=tf.lite.experimental.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    )
    interp.allocate_tensors()
    dtypes = {t["index"]: np.dtype(t["dtype"]).name for t in interp.get_tensor_details()}
    listed = interp._get_ops_details()  # the interpreter's only listing of its ops
    ops = [op for op in listed if op["op_name"] != "RESHAPE"]
    return [(op["op_name"], [dtypes[i] for i in op["inputs"] if i >= 0]) for op in ops[-2:]]


@pytest.mark.parametrize("framework", ["pytorch", "keras"])
def test_default_quantization_exports_its_unrounded_output_as_a_float_last_layer(framework, tmp_path):
    q_model, data = quantize(framework)
    graph = produced_graph(q_model)
    ((output, _),) = graph.outputs
    last = [n for n in graph.nodes() if n.quant.weights][-1].name  # the dense layer computing the output
    assert graph.node(last).quant.activation is None  # the default hands the output on unrounded
    if framework == "pytorch":
        import onnx

        result = E.pytorch_export_model(q_model, tmp_path / "m.onnx", data)
        nodes = onnx.load(str(result.path)).graph.node
        (gemm,) = [n for n in nodes if output in n.output]
        # a float Gemm computes the output, and no QuantizeLinear (nothing) reads it
        assert gemm.op_type == "Gemm" and not [n for n in nodes if output in n.input]
        # onnxruntime fuses the convolutions into integer kernels; the last layer stays a float op
        runtime = result.runtime_ops
        assert runtime["QLinearConv"] == 3 and "Conv" not in runtime
        assert runtime["Gemm"] == 1 and "QGemm" not in runtime
    else:
        result = E.keras_export_model(q_model, tmp_path / "m.tflite", serialization_format=K.TFLITE,
                                      quantization_format=Q.INT8, repr_dataset=data)  # fmt: skip
        assert _last_tflite_op(result.path) == [("DEQUANTIZE", ["int8"]), ("CONV_2D", ["float32"] * 3)]
        assert result.ops["QUANTIZE"] == 1 and result.ops["DEQUANTIZE"] == 1 and result.ops["CONV_2D"] == 4
    (parity,) = result.parity
    assert result.parity_ok and parity.step is None and parity.max_steps is None, parity
    assert parity.top1_agreement == 1.0 and parity.cosine > 0.9999, parity
    assert "parity ok (outputs unrounded, cos " in repr(result), repr(result)
    (note,) = [n for n in result.notes if "hands the model's outputs on unrounded" in n]
    assert repr(last) in note and "quantize_outputs=True" in note, note
