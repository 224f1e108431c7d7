"""With a log folder set, an export is a run folder beside the PTQ call's: the exported graph
as TensorBoard reads it, the graph the runtime runs, and the parity table. Read back with
TensorBoard's own loader."""

from __future__ import annotations

import json

import pytest

import model_compression_toolkit as mct
from tests.fixtures.digits import representative_dataset
from tests.fixtures.quantized import quantize
from tests.fixtures.tb import load, run_folders

E = mct.exporter


def _text(acc, tag: str) -> str:
    return acc.Tensors(tag)[0].tensor_proto.string_val[0].decode()


@pytest.mark.parametrize("framework", ["pytorch", "keras"])
def test_export_run_holds_the_graph_and_the_parity_table(framework, tmp_path):
    from tests.conftest import FRAMEWORKS
    from tests.fixtures.trained import load_trained

    fw = FRAMEWORKS[framework]
    mct.set_log_folder(tmp_path / "logs")
    data = representative_dataset(fw.data()[0], 2, 16)
    # integer up to the outputs: the ONNX runtime graph holds the last layer as QGemm
    q_model, info = fw.ptq(load_trained(framework), data, mct.core.CoreConfig(quantize_outputs=True))
    if framework == "pytorch":
        result = E.pytorch_export_model(q_model, tmp_path / "m.onnx", data)
        run_name, ops = "onnx_fakely_quant", {"QuantizeLinear", "DequantizeLinear", "Conv", "Gemm"}
    else:
        result = E.keras_export_model(q_model, tmp_path / "m.tflite", serialization_format="TFLITE",
                                      quantization_format="INT8", repr_dataset=data)  # fmt: skip
        run_name, ops = "tflite_int8", {"QUANTIZE", "CONV_2D", "DEQUANTIZE"}
    ptq_run, export_run = run_folders(tmp_path / "logs")
    assert ptq_run == info.log_folder and export_run == result.log_folder
    assert export_run.name.startswith(f"{info.model_name}_export_")
    acc = load(export_run / run_name)
    graph = acc.Graph()
    assert ops <= {n.op for n in graph.node}
    devices = {n.device for n in graph.node}
    assert (
        "/device:int8:0" in devices or "/device:uint8:0" in devices
    )  # "Color by device" shows the integer part
    table = _text(acc, "parity")
    output = result.parity[0].name
    assert f"| `{output}` | 32 |" in table and "int32 bias alone" in table and "floor" in table
    summary = _text(acc, "summary")
    assert str(result.path) in summary and f"{result.file_bytes} bytes" in summary
    assert acc.Scalars(f"parity/{output}/cosine")[0].value == pytest.approx(result.parity[0].cosine, rel=1e-6)
    report = json.loads((export_run / "export_report.json").read_text())
    assert (
        report["parity_ok"] and report["parity"][0]["name"] == output and report["path"] == str(result.path)
    )
    if framework == "pytorch":
        runtime = load(export_run / run_name / "runtime").Graph()
        assert {"QLinearConv", "QGemm"} <= {n.op for n in runtime.node}
    assert "exported" in (export_run / "mct.log").read_text()


def test_no_log_folder_writes_no_run(tmp_path):
    q_model, data = quantize("pytorch")
    result = E.pytorch_export_model(q_model, tmp_path / "m.onnx", data)
    assert result.log_folder is None and [p.name for p in tmp_path.iterdir()] == ["m.onnx"]
