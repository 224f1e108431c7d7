"""The export formats, named as in Sony MCT, and which combinations this library writes.

    (framework, serialization format, quantization format) -> the deployment that writes it

A deployment is a class of a backend's ``export`` module, imported only when used.
"""

from __future__ import annotations

import importlib
from enum import Enum
from typing import Any

from model_compression_toolkit.errors import ExportError


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
# (serialization, quantization) -> (module, class) of the deployment writing it
DEPLOYMENTS: dict[tuple[Enum, Enum], tuple[str, str]] = {
    (P.ONNX, Q.FAKELY_QUANT): ("model_compression_toolkit.pytorch.export", "OnnxDeployment"),
    (P.TORCHSCRIPT, Q.FAKELY_QUANT): ("model_compression_toolkit.pytorch.export", "TorchScriptDeployment"),
    (K.KERAS, Q.FAKELY_QUANT): ("model_compression_toolkit.keras.export", "KerasDeployment"),
    (K.TFLITE, Q.INT8): ("model_compression_toolkit.keras.export", "TFLiteInt8Deployment"),
    (K.TFLITE, Q.FAKELY_QUANT): ("model_compression_toolkit.keras.export", "TFLiteFakeQuantDeployment"),
}

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


def supported(serializations: type[Enum]) -> str:
    """The combinations this library writes for a framework, as text."""
    rows = [
        f"{s.__class__.__name__}.{s.name} with QuantizationFormat.{q.name}"
        for s, q in DEPLOYMENTS
        if isinstance(s, serializations)
    ]
    return "; ".join(rows)


def deployment_class(serialization: Any, quantization: Any, serializations: type[Enum]) -> type:
    """The deployment for a (serialization, quantization) pair; ExportError naming what is
    supported when this library does not write it."""
    s = _member(serialization, serializations, "serialization_format")
    q = _member(quantization, QuantizationFormat, "quantization_format")
    entry = DEPLOYMENTS.get((s, q))
    if entry is None:
        why = _WHY_NOT.get(q, "")
        why = f" ({why})" if why and not (q == Q.INT8 and s != P.ONNX) else ""
        raise ExportError(
            f"{serializations.__name__}.{s.name} with QuantizationFormat.{q.name} is not written by this "
            f"library{why}. Supported: {supported(serializations)}."
        )
    module, name = entry
    return getattr(importlib.import_module(module), name)
