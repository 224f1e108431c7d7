"""The export run's pure builders, and the run read back with TensorBoard's loader."""

from __future__ import annotations

import json

import numpy as np

import model_compression_toolkit as mct
from model_compression_toolkit.core.export.report import (
    ExportedGraph,
    ExportedOp,
    ExportedTensor,
    ExportReport,
    compare_output,
)
from model_compression_toolkit.observers.call import observe_call
from model_compression_toolkit.observers.export_view import (
    REPORT_FILE,
    exported_graph_def,
    parity_markdown,
    summary_markdown,
)
from model_compression_toolkit.observers.log_folder import get_log_folder
from tests.fixtures.tb import load


def _graph() -> ExportedGraph:
    t = ExportedTensor
    tensors = {
        "x": t("x", "float32", (-1, 3)),
        "x_q": t("x_q", "uint8", (-1, 3), scale=[0.5], zero_point=[128]),
        "w": t("w", "int8", (4, 3), scale=[0.1, 0.2, 0.3, 0.4], zero_point=[0, 0, 0, 0], constant=True),
        "y": t("y", "float32", (-1, 4)),
    }
    ops = [
        ExportedOp("quant", "QuantizeLinear", ["x", "s", "zp"], ["x_q"]),
        ExportedOp("gemm:0", "QGemm", ["x_q", "w"], ["y"], {"transB": 1}),
    ]
    return ExportedGraph("g", ops, tensors, ["x"], ["y"])


def _report(graph=None) -> ExportReport:
    ref = np.arange(12, dtype=np.float64).reshape(4, 3)
    parity = compare_output("out|1", ref, ref + 0.25, 0.5)
    parity.floor_cosine, parity.bias_cosine = 1.0, 0.99999
    return ExportReport("Net", "pytorch", "ONNX", "FAKELY_QUANT", "/tmp/net.onnx", 2048, "onnxruntime 1.0", "4 samples",
                        [parity], graph=graph, runtime_graph=graph, notes=["a note"],
                        figures={"bias_rounding_steps": 0.01})  # fmt: skip


def test_exported_graph_def_nodes_edges_and_devices():
    nodes = {n.name: n for n in exported_graph_def(_graph()).node}
    assert set(nodes) == {"input/x", "quant", "gemm_0"}  # ':' would read as an output index
    assert list(nodes["quant"].input) == ["input/x"] and list(nodes["gemm_0"].input) == ["quant"]
    assert nodes["quant"].device == "/device:uint8:0" and nodes["gemm_0"].device == "/device:float32:0"
    gemm = nodes["gemm_0"].attr
    assert (
        gemm["in1"].s.decode().startswith("int8 [4, 3], scale 0.1..0.4 (4 channels)")
    )  # a constant: an attribute
    assert gemm["attr.transB"].i == 1
    assert "uint8 [-1, 3], scale 0.5, zero point 128" == nodes["quant"].attr["out0"].s.decode()
    assert [d.size for d in gemm["_output_shapes"].list.shape[0].dim] == [-1, 4]


def test_parity_and_summary_markdown():
    report = _report(_graph())
    table = parity_markdown(report)
    assert "| `out\\|1` | 4 | 0.5 | 0.25 | 0.5 | 0.00 % |" in table  # '|' escaped
    assert "| yes | 0.999990 | 1.000000 |" in table
    summary = summary_markdown(report)
    assert (
        "2.00 KiB (2048 bytes)" in summary
        and "QGemm 1, QuantizeLinear 1" in summary
        and "- a note" in summary
    )


def test_the_export_event_round_trips_through_tensorboard(tmp_path):
    """The call's observer, told ``export_finished``, writes the export run and its JSON."""
    mct.set_log_folder(tmp_path)
    with observe_call("Net_export", get_log_folder()) as call:
        call.observer.export_finished(_report(_graph()))
        folder = call.folder
    acc = load(folder / "onnx_fakely_quant")
    assert {n.op for n in acc.Graph().node} == {"Input", "QuantizeLinear", "QGemm"}
    assert set(acc.Tags()["tensors"]) == {"parity", "parity_layers", "summary"}
    assert acc.Scalars("export/file_bytes")[0].value == 2048
    assert load(folder / "onnx_fakely_quant" / "runtime").Graph().node
    saved = json.loads((folder / REPORT_FILE).read_text())
    assert saved["parity"][0]["name"] == "out|1" and saved["graph_ops"] == {"QGemm": 1, "QuantizeLinear": 1}
