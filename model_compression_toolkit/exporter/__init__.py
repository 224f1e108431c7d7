"""Export a quantized model for a runtime, with MCT's names, and prove it computes the same.

    mct.exporter.pytorch_export_model(q_model, "model.onnx", representative_data_gen)
    mct.exporter.keras_export_model(
        q_model, "model.tflite",
        serialization_format=mct.exporter.KerasExportSerializationFormat.TFLITE,
        quantization_format=mct.exporter.QuantizationFormat.INT8,
    )

Each export runs the written file in its runtime (onnxruntime, the TFLite interpreter,
torch.jit, Keras) and compares it with the quantized model, output by output, and for ONNX
and int8 TFLite layer by layer (``result.parity.layers``; `layer_parity` checks a file again).
"""

from model_compression_toolkit.exporter.api import (
    ExportResult,
    keras_export_model,
    keras_load_quantized_model,
    layer_parity,
    pytorch_export_model,
)
from model_compression_toolkit.exporter.formats import (
    KerasExportSerializationFormat,
    PytorchExportSerializationFormat,
    QuantizationFormat,
)

__all__ = [
    "ExportResult",
    "KerasExportSerializationFormat",
    "PytorchExportSerializationFormat",
    "QuantizationFormat",
    "keras_export_model",
    "keras_load_quantized_model",
    "layer_parity",
    "pytorch_export_model",
]
