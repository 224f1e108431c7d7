"""The export step (`pipeline.export`) reports ``export_finished(report)`` and writes nothing
but the file; the observer it is given writes the export run, read back with TensorBoard's
own loader. One test body for both frameworks."""

from __future__ import annotations

import json

import pytest

from model_compression_toolkit.core.backend import Exporter
from model_compression_toolkit.core.export.report import ExportReport
from model_compression_toolkit.observers.export_view import REPORT_FILE
from model_compression_toolkit.observers.tensorboard import TensorBoardObserver
from model_compression_toolkit.pipeline import export as export_step
from model_compression_toolkit.pipeline.backends import exported_formats, exporter_class, get_backend
from model_compression_toolkit.pipeline.events import NullObserver
from model_compression_toolkit.pipeline.session import produced_graph
from tests.fixtures.quantized import quantize
from tests.fixtures.tb import load

# framework -> (serialization, quantization, file name, the run's name, ops the file holds)
FORMATS = {
    "pytorch": (
        "ONNX",
        "FAKELY_QUANT",
        "m.onnx",
        "onnx_fakely_quant",
        {"QuantizeLinear", "DequantizeLinear"},
    ),
    "keras": ("TFLITE", "INT8", "m.tflite", "tflite_int8", {"QUANTIZE", "CONV_2D", "DEQUANTIZE"}),
}


class Heard(NullObserver):
    """Keeps every export event it hears."""

    def __init__(self) -> None:
        self.reports: list[ExportReport] = []

    def export_finished(self, report: ExportReport) -> None:
        self.reports.append(report)


def _step(framework: str, folder, observer) -> ExportReport:
    """The step alone, as the facade runs it: the backend, the exporter and the batches."""
    serialization, quantization, name, _, _ = FORMATS[framework]
    q_model, data = quantize(framework)
    graph, backend = produced_graph(q_model), get_backend(q_model)
    exporter = exporter_class(serialization, quantization)(graph, q_model)
    batches, described = export_step.comparison_batches(graph, backend, q_model, data, 8)
    return export_step.export(exporter, backend, q_model, graph, folder / name, batches, described, observer)


@pytest.mark.parametrize("framework", ["pytorch", "keras"])
def test_the_step_reports_export_finished_and_writes_only_the_file(framework, tmp_path):
    heard = Heard()
    report = _step(framework, tmp_path, heard)
    assert heard.reports == [report]  # once, the very report the step returns
    assert report.framework == framework and report.path == str(tmp_path / FORMATS[framework][2])
    assert report.file_bytes == (tmp_path / FORMATS[framework][2]).stat().st_size > 0
    assert report.parity and report.parity[0].samples == 8 and report.parity_ok
    assert report.layers is not None and report.layers.rows  # the runtime's tensors, layer by layer
    assert [p.name for p in tmp_path.iterdir()] == [FORMATS[framework][2]]  # no run, no staging folder


@pytest.mark.parametrize("framework", ["pytorch", "keras"])
def test_the_observer_writes_the_export_run(framework, tmp_path):
    _, _, _, run, ops = FORMATS[framework]
    call = tmp_path / "call"
    call.mkdir()
    observer = TensorBoardObserver(call)
    try:
        report = _step(framework, tmp_path, observer)
    finally:
        observer.close()
    acc = load(call / run)
    assert ops <= {n.op for n in acc.Graph().node}
    assert set(acc.Tags()["tensors"]) == {"parity", "parity_layers", "summary"}
    output = report.parity[0]
    assert f"| `{output.name}` | 8 |" in acc.Tensors("parity")[0].tensor_proto.string_val[0].decode()
    assert acc.Scalars(f"parity/{output.name}/cosine")[0].value == pytest.approx(output.cosine, rel=1e-6)
    assert acc.Scalars("export/file_bytes")[0].value == report.file_bytes
    saved = json.loads((call / REPORT_FILE).read_text())
    assert saved["path"] == report.path and saved["parity"][0]["name"] == output.name


def test_every_format_is_written_by_an_exporter_that_declares_the_protocol():
    """The exporters implement `core.backend.Exporter` by name, not by having the right
    attributes: a backend's exporter that forgets a method fails here."""
    formats = list(exported_formats())
    assert {("ONNX", "FAKELY_QUANT"), ("TFLITE", "INT8"), ("KERAS", "FAKELY_QUANT")} <= set(formats)
    for serialization, quantization in formats:
        cls = exporter_class(serialization, quantization)
        assert Exporter in cls.__mro__ and (cls.serialization, cls.quantization) == (
            serialization,
            quantization,
        )
        for method in ("layers", "write", "load"):  # the protocol's stubs: each exporter's own
            assert getattr(cls, method) is not getattr(Exporter, method), f"{cls.__name__}.{method}"
