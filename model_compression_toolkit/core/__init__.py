"""The framework-agnostic core: configuration, graph, statistics, thresholds, pipeline.

Importing it imports neither torch nor TensorFlow.
"""

from model_compression_toolkit.core.config import (
    CoreConfig,
    DebugConfig,
    KeepFloat,
    MixedPrecisionConfig,
    QuantizationConfig,
    QuantizationErrorMethod,
    QuantizationMethod,
    ResourceUtilization,
    TuningConfig,
)
from model_compression_toolkit.core.info import QuantizationInfo

__all__ = [
    "CoreConfig",
    "DebugConfig",
    "KeepFloat",
    "MixedPrecisionConfig",
    "QuantizationConfig",
    "QuantizationErrorMethod",
    "QuantizationInfo",
    "QuantizationMethod",
    "ResourceUtilization",
    "TuningConfig",
]
