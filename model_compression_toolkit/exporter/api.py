"""`pytorch_export_model` and `keras_export_model`: the facades of the export step.

    arguments -> checks (format, model, path, layers, the exporter's own) -> the backend and
        the exporter (`pipeline.backends`) -> the call's observer (`observers.call`)
        -> `pipeline.export.export` (write, run, compare, export_finished) -> `ExportResult`

Every check runs before anything is written; the step writes in a staging folder, so a
failure at any later step leaves no half-written file at the destination.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any

from model_compression_toolkit.core.backend import Exporter
from model_compression_toolkit.core.export.report import ExportReport, Parity
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.layer_parity import LayerTable
from model_compression_toolkit.errors import (
    ConfigurationError,
    ExportError,
    ExportPathError,
    ModelReadError,
    UnsupportedFrameworkError,
)
from model_compression_toolkit.exporter.formats import (
    KerasExportSerializationFormat,
    PytorchExportSerializationFormat,
    QuantizationFormat,
    exporter_for,
)
from model_compression_toolkit.observers.call import observe_call
from model_compression_toolkit.observers.log_folder import get_log_folder
from model_compression_toolkit.pipeline import export as export_step
from model_compression_toolkit.pipeline.backends import exporter_class, get_backend, load_saved_model
from model_compression_toolkit.pipeline.export_layers import layer_table
from model_compression_toolkit.pipeline.session import produced_graph

PARITY_SAMPLES = 32  # representative samples the exported model is compared on
ALTERNATIVES = {  # what to write instead when the format cannot hold the model
    "pytorch": "ONNX or TORCHSCRIPT with FAKELY_QUANT keep float layers and any bit width up to 16",
    "keras": "TFLITE or KERAS with FAKELY_QUANT keep float layers and any bit width",
}
SUFFIXES = {".onnx": ("ONNX", "FAKELY_QUANT"), ".tflite": ("TFLITE", "INT8")}  # files with per-layer parity


class ExportResult(dict):
    """What an export wrote, and how closely the runtime computes what the quantized model does.

    As a dict it holds the custom objects ``keras.models.load_model`` needs for the file
    (what MCT's ``keras_export_model`` returns); it is empty for the other formats.

    Attributes:
        path: the file written.
        serialization_format / quantization_format: the formats written.
        file_bytes: the file's size.
        runtime: what ran the file for the comparison (``"onnxruntime 1.32.0"``).
        parity: per output, the runtime against the quantized model (`OutputParity`);
            ``parity.layers``: per quantized layer, the runtime's tensor against the quantized
            model's (`LayerTable`), ``parity.first_departure``: the first layer more than one
            step off, with ``why`` when the numbers tell.
        parity_ok: every output within one quantization step, or at a cosine of at least 0.999;
            or, on a network whose own float32 rounding moves its outputs under 0.999 (the
            floor), no layer departing on its own and every output within twice the floor's
            distance (`ExportReport.parity_ok`).
        ops: op type -> count in the file, when the runtime lists them.
        runtime_ops: op type -> count in the graph the runtime runs after its own
            optimizations (onnxruntime: ``QLinearConv`` for each fused integer convolution).
        notes: what to know about the file (a fixed batch size, runtime differences).
        log_folder: the export's run folder, or None when logging is off.
        report: everything above as one `ExportReport` (``report.to_dict()`` for JSON).
    """

    def __init__(self, report: ExportReport, serialization: Enum, quantization: Enum, custom_objects: dict,
                 log_folder: Path | None) -> None:  # fmt: skip
        super().__init__(custom_objects)
        self.report = report
        self.path = Path(report.path)
        self.serialization_format, self.quantization_format = serialization, quantization
        self.file_bytes = report.file_bytes
        self.runtime = report.runtime
        self.parity: Parity = Parity(report.parity, report.layers)
        self.notes = report.notes
        self.ops = report.graph.op_counts() if report.graph is not None else None
        self.runtime_ops = report.runtime_graph.op_counts() if report.runtime_graph is not None else None
        self.log_folder = log_folder

    @property
    def parity_ok(self) -> bool:
        return self.report.parity_ok

    def __repr__(self) -> str:
        steps = [p.max_steps for p in self.parity if p.max_steps is not None]
        cosines = [p.cosine for p in self.parity if p.cosine is not None]
        # in steps of the outputs' grids; outputs handed on unrounded have none
        worst = f"max {max(steps):.2f} steps" if steps else f"outputs unrounded, cos {min(cosines, default=1.0):.4f}"
        return (
            f"ExportResult({str(self.path)!r}, {self.serialization_format.name}/{self.quantization_format.name}, "
            f"{self.file_bytes} bytes, parity {'ok' if self.parity_ok else 'FAILED'} ({worst}"
            + (f", first departing layer {first.layer!r})" if (first := self.parity.first_departure) else ")")
        )


# ------------------------------------------------------------------ checks
def _produced(model: Any, framework: str) -> tuple[Any, Graph]:
    try:
        backend = get_backend(model)
    except UnsupportedFrameworkError as err:
        raise UnsupportedFrameworkError(f"{framework}_export_model: {err}") from None
    if backend.name != framework:
        raise UnsupportedFrameworkError(
            f"expected a {framework} model; got a {backend.name} model ({type(model).__name__}). "
            f"Use mct.exporter.{backend.name}_export_model for it."
        )
    graph = produced_graph(model)
    if graph is None:
        raise ModelReadError(
            f"expected a model returned by mct.ptq.{framework}_post_training_quantization (or its tuned or "
            f"mixed-precision variants) in this process; got a {type(model).__name__} this library did not "
            "produce, so its quantization grids are unknown. Quantize the float model, then export the result."
        )
    return backend, graph


def _destination(save_model_path: Any, suffix: str | None) -> Path:
    if not isinstance(save_model_path, (str, os.PathLike)) or not str(save_model_path):
        raise ExportPathError(
            f"save_model_path must be a file path (str or os.PathLike); got {save_model_path!r}"
        )
    path = Path(save_model_path).expanduser().absolute()
    if path.is_dir():
        raise ExportPathError(
            f"save_model_path {path} is a directory; expected a file path such as {path / 'model'}"
        )
    if path.parent.exists() and not path.parent.is_dir():
        raise ExportPathError(
            f"the folder of save_model_path, {path.parent}, is a file; choose a path in a folder"
        )
    if not path.parent.is_dir():
        raise ExportPathError(
            f"the folder of save_model_path, {path.parent}, does not exist; create it first"
        )
    if suffix is not None and path.suffix != suffix:
        raise ExportPathError(f"save_model_path must end with {suffix!r} for this format; got {path.name!r}")
    return path


def _check_layers(exporter: Exporter, fn: Callable[[Any], bool] | None) -> None:
    """MCT's ``is_layer_exportable_fn``: called on every layer; any False is an error naming them."""
    if fn is None:
        return
    if not callable(fn):
        raise ConfigurationError(
            f"is_layer_exportable_fn must be a callable layer -> bool or None; got {fn!r}"
        )
    refused = [name for name, layer in exporter.layers() if not fn(layer)]
    if refused:
        raise ExportError(
            f"is_layer_exportable_fn refused {len(refused)} layer(s): {', '.join(map(repr, refused[:10]))}"
            f"{' ...' if len(refused) > 10 else ''}. Nothing was written."
        )


def _check_problems(exporter: Exporter, framework: str) -> None:
    problems = exporter.problems()
    if problems:
        shown = "\n  - ".join(problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise ExportError(
            f"the quantized model cannot be written as {exporter.serialization} with "
            f"QuantizationFormat.{exporter.quantization}; nothing was written:\n  - {shown}{more}\n"
            f"Re-quantize so that these layers fit, or choose another format ({ALTERNATIVES[framework]})."
        )


# ------------------------------------------------------------------ the export
def export(
    framework: str,
    model: Any,
    save_model_path: Any,
    repr_dataset: Callable[[], Any] | None,
    is_layer_exportable_fn: Callable[[Any], bool] | None,
    serialization_format: Any,
    quantization_format: Any,
    serializations: type[Enum],
    options: dict[str, Any],
    parity_samples: int,
) -> ExportResult:
    """The body of both export functions (module docstring)."""
    serialization, quantization, cls = exporter_for(serialization_format, quantization_format, serializations)
    if isinstance(parity_samples, bool) or not isinstance(parity_samples, int) or parity_samples < 1:
        raise ConfigurationError(f"parity_samples must be an integer >= 1; got {parity_samples!r}")
    backend, graph = _produced(model, framework)
    path = _destination(save_model_path, cls.suffix)
    exporter = cls(graph, model, **options)  # type: ignore[call-arg]  # each backend's exporter takes these
    _check_layers(exporter, is_layer_exportable_fn)
    _check_problems(exporter, framework)
    batches, data = export_step.comparison_batches(graph, backend, model, repr_dataset, parity_samples)
    with observe_call(f"{graph.name}_export", get_log_folder()) as call:
        report = export_step.export(exporter, backend, model, graph, path, batches, data, call.observer)
    return ExportResult(report, serialization, quantization, exporter.custom_objects(), call.folder)


# ------------------------------------------------------------------ the public functions
def pytorch_export_model(
    model: Any,
    save_model_path: str | os.PathLike,
    repr_dataset: Callable[[], Any],
    is_layer_exportable_fn: Callable[[Any], bool] | None = None,
    serialization_format: PytorchExportSerializationFormat = PytorchExportSerializationFormat.ONNX,
    quantization_format: QuantizationFormat = QuantizationFormat.FAKELY_QUANT,
    onnx_opset_version: int | None = None,
    *,
    parity_samples: int = PARITY_SAMPLES,
) -> ExportResult:
    """Write a quantized PyTorch model to ONNX (QDQ) or TorchScript, run it, compare it.

    ONNX: every activation grid becomes a QuantizeLinear/DequantizeLinear pair (per tensor),
    every quantized weight an integer initializer with its DequantizeLinear (per channel),
    every bias of a quantized layer int32; onnxruntime fuses them into integer kernels.

    Args:
        model: the quantized model a PTQ call of this library returned in this process.
        save_model_path: the file to write (replaced if it exists; its folder must exist).
        repr_dataset: as for PTQ; its first batch traces the model, its first
            ``parity_samples`` samples compare the file with ``model``.
        is_layer_exportable_fn: optional, called on every layer; a layer it refuses stops
            the export before anything is written (as in MCT).
        serialization_format: ``ONNX`` (default) or ``TORCHSCRIPT``.
        quantization_format: ``FAKELY_QUANT``, the only one written for PyTorch.
        onnx_opset_version: the ONNX opset, 13 or later; None gives 18, or 21 when a
            tensor needs 16 bits.
        parity_samples: how many representative samples the comparison uses.

    Returns:
        An `ExportResult`: the file, its size, and the parity of each output.

    Raises:
        ExportError: a format not written, or a layer or bit width the format cannot hold.
        ExportPathError: a path that cannot be written.
        ModelReadError: a model this library did not produce.
        MissingDependencyError: onnx, onnxscript or onnxruntime is not installed.
    """
    return export(
        "pytorch", model, save_model_path, repr_dataset, is_layer_exportable_fn, serialization_format,
        quantization_format, PytorchExportSerializationFormat, {"onnx_opset_version": onnx_opset_version},
        parity_samples,
    )  # fmt: skip


def keras_export_model(
    model: Any,
    save_model_path: str | os.PathLike,
    is_layer_exportable_fn: Callable[[Any], bool] | None = None,
    serialization_format: KerasExportSerializationFormat = KerasExportSerializationFormat.KERAS,
    quantization_format: QuantizationFormat = QuantizationFormat.FAKELY_QUANT,
    *,
    repr_dataset: Callable[[], Any] | None = None,
    parity_samples: int = PARITY_SAMPLES,
) -> ExportResult:
    """Write a quantized Keras model to ``.keras`` or TFLite (int8 or fake-quant), run it, compare it.

    TFLite with ``INT8``: every tensor int8 on the library's grids (weights per channel,
    bias int32), run by TensorFlow's TFLite interpreter.

    Args:
        model: the quantized model a PTQ call of this library returned in this process.
        save_model_path: the file to write (``.keras`` for KERAS; replaced if it exists).
        is_layer_exportable_fn: optional, called on every layer (as in MCT).
        serialization_format: ``KERAS`` (default) or ``TFLITE``.
        quantization_format: ``FAKELY_QUANT`` (default), or ``INT8`` with ``TFLITE``.
        repr_dataset: data to compare the file with ``model`` on; without it the comparison
            uses samples drawn from each input's quantization grid.
        parity_samples: how many representative samples the comparison uses.

    Returns:
        An `ExportResult`; as a dict, the custom objects ``keras.models.load_model`` needs
        (MCT's return value).

    Raises:
        ExportError, ExportPathError, ModelReadError: as for `pytorch_export_model`.
    """
    return export(
        "keras", model, save_model_path, repr_dataset, is_layer_exportable_fn, serialization_format,
        quantization_format, KerasExportSerializationFormat, {}, parity_samples,
    )  # fmt: skip


def layer_parity(
    model: Any,
    path: str | os.PathLike,
    repr_dataset: Callable[[], Any] | None = None,
    parity_samples: int = PARITY_SAMPLES,
) -> LayerTable | None:
    """The per-layer parity of an exported file (``.onnx``, int8 ``.tflite``) against the
    quantized ``model`` it was exported from, as the export functions compute it after
    writing it: check a file again after it was changed or moved.

    Args:
        model: the quantized model a PTQ call of this library returned in this process.
        path: the exported file.
        repr_dataset: the data to compare on; None for samples drawn from each input's grid.
        parity_samples: how many samples.

    Returns:
        The `LayerTable` (``table.first_departure``: the first layer more than one step
        off), or None for a format without one.
    """
    file = Path(path)
    if not file.is_file():
        raise ExportPathError(f"no file at {file}; expected an .onnx or .tflite file written by an export")
    if file.suffix not in SUFFIXES:
        return None
    backend, graph = _produced(model, "pytorch" if file.suffix == ".onnx" else "keras")
    batches, _ = export_step.comparison_batches(graph, backend, model, repr_dataset, parity_samples)
    taps = exporter_class(*SUFFIXES[file.suffix])(graph, model).load(file).taps()  # type: ignore[call-arg]
    return layer_table(graph, backend, taps, batches) if taps is not None and batches else None


def keras_load_quantized_model(
    filepath: str | os.PathLike,
    custom_objects: dict | None = None,
    compile: bool = True,
    options: Any = None,  # noqa: A002
) -> Any:
    """Load a quantized Keras model saved as ``.keras`` (by `keras_export_model` or ``model.save``).

    Args:
        filepath: the ``.keras`` file.
        custom_objects: more custom objects the model needs, besides this library's layers.
        compile: as for ``keras.models.load_model``.
        options: MCT's argument for TensorFlow's SavedModel loading; Keras 3 has none, so it
            must be None.
    """
    if options is not None:
        raise ConfigurationError(
            f"options must be None: Keras 3's load_model takes no load options; got {options!r}"
        )
    path = Path(filepath)
    if path.suffix == ".tflite":
        raise ExportPathError(
            f"{path} is a TFLite model; load it with tf.lite.Interpreter(model_path=...), not as a Keras model"
        )
    if not path.is_file():
        raise ExportPathError(f"no file at {path}; expected a .keras file written by keras_export_model")
    return load_saved_model(path, compile=compile, custom=custom_objects)


__all__ = [
    "ExportResult",
    "keras_export_model",
    "keras_load_quantized_model",
    "layer_parity",
    "pytorch_export_model",
]
