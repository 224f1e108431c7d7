"""``mct.xquant``: MCT's explainable-quantization report, built on this library's
similarity analysis (`mct.analyze_similarity`).

    from model_compression_toolkit.xquant import XQuantConfig, xquant_report_pytorch_experimental
    result = xquant_report_pytorch_experimental(float_model, q_model, repr_gen, val_gen,
                                                XQuantConfig(report_dir="./logs"))
"""

from model_compression_toolkit.xquant.config import XQuantConfig
from model_compression_toolkit.xquant.report import (
    xquant_report_keras_experimental,
    xquant_report_pytorch_experimental,
    xquant_report_troubleshoot_keras_experimental,
    xquant_report_troubleshoot_pytorch_experimental,
)

__all__ = [
    "XQuantConfig",
    "xquant_report_keras_experimental",
    "xquant_report_pytorch_experimental",
    "xquant_report_troubleshoot_keras_experimental",
    "xquant_report_troubleshoot_pytorch_experimental",
]
