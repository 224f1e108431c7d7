"""The export formats, named as in Sony MCT, and which combinations this library writes.

    (serialization format, quantization format) -> the `Exporter` writing it (`pipeline.backends`)

An exporter is a class of a backend, imported only when used.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from model_compression_toolkit.core.backend import Exporter
from model_compression_toolkit.errors import ExportError
from model_compression_toolkit.pipeline.backends import exported_formats, exporter_class


class QuantizationFormat(Enum):
    """How the quantization is written into the exported file.

    - ``FAKELY_QUANT``: float tensors on the quantization grids. In ONNX, the standard
      QuantizeLinear/DequantizeLinear pairs (weights stored as integers), which
      onnxruntime fuses into integer kernels; in TorchScript, ``.keras`` and float TFLite,
      the quantized model's own fake-quantization ops.
    - ``INT8``: integer tensors end to end (TFLite).
    - ``MCTQ``: MCT's ``mct_quantizers`` layers. Not written by this library.
    """

    FAKELY_QUANT = 0
    INT8 = 1
    MCTQ = 2


class PytorchExportSerializationFormat(Enum):
    """File formats for PyTorch models: ``TORCHSCRIPT`` (``torch.jit``) or ``ONNX``."""

    TORCHSCRIPT = 0
    ONNX = 1


class KerasExportSerializationFormat(Enum):
    """File formats for Keras models: ``KERAS`` (``.keras``) or ``TFLITE``."""

    KERAS = 0
    TFLITE = 1


Q, P, K = QuantizationFormat, PytorchExportSerializationFormat, KerasExportSerializationFormat

_WHY_NOT = {
    Q.MCTQ: "MCTQ writes MCT's own mct_quantizers layers, which this library does not use",
    Q.INT8: "ONNX's integer form is its QuantizeLinear/DequantizeLinear pairs (QuantizationFormat.FAKELY_QUANT), "
    "which onnxruntime fuses into integer kernels",
}


def _member(value: Any, enum: type[Enum], argument: str) -> Enum:
    """``value`` as a member of ``enum``: the member itself, or its name as a string."""
    if isinstance(value, enum):
        return value
    if isinstance(value, Enum) and value.name in enum.__members__:  # MCT's own enum of the same name
        return enum[value.name]
    if isinstance(value, str) and value.upper() in enum.__members__:
        return enum[value.upper()]
    allowed = ", ".join(f"{enum.__name__}.{m.name}" for m in enum)
    raise ExportError(f"{argument} must be one of {allowed}; got {value!r}")


def _written(serializations: type[Enum]) -> list[tuple[Enum, Enum]]:
    """The (serialization, quantization) members this library writes for a framework."""
    return [
        (serializations[s], QuantizationFormat[q])
        for s, q in exported_formats()
        if s in serializations.__members__
    ]


def supported(serializations: type[Enum]) -> str:
    """The combinations this library writes for a framework, as text."""
    return "; ".join(
        f"{serializations.__name__}.{s.name} with QuantizationFormat.{q.name}"
        for s, q in _written(serializations)
    )


def exporter_for(
    serialization: Any, quantization: Any, serializations: type[Enum]
) -> tuple[Enum, Enum, type[Exporter]]:
    """The members a (serialization, quantization) argument pair names, and the `Exporter`
    writing them; ExportError naming what is supported when this library does not write it."""
    s = _member(serialization, serializations, "serialization_format")
    q = _member(quantization, QuantizationFormat, "quantization_format")
    if (s, q) not in _written(serializations):
        why = _WHY_NOT.get(q, "")
        why = f" ({why})" if why and not (q == Q.INT8 and s != P.ONNX) else ""
        raise ExportError(
            f"{serializations.__name__}.{s.name} with QuantizationFormat.{q.name} is not written by this "
            f"library{why}. Supported: {supported(serializations)}."
        )
    return s, q, exporter_class(s.name, q.name)
