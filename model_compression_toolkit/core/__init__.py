"""The framework-agnostic core: configuration, graph, statistics, thresholds, pipeline.

Importing it imports neither torch nor TensorFlow.
"""

from model_compression_toolkit.core.config import (
    CoreConfig,
    DebugConfig,
    KeepFloat,
    QuantizationConfig,
    QuantizationErrorMethod,
    QuantizationMethod,
)
from model_compression_toolkit.core.info import QuantizationInfo

__all__ = [
    "CoreConfig",
    "DebugConfig",
    "KeepFloat",
    "QuantizationConfig",
    "QuantizationErrorMethod",
    "QuantizationInfo",
    "QuantizationMethod",
]
