"""The framework-agnostic core: configuration, the graph, and the pure algorithms on it.

``mct.core`` holds the configuration objects a user passes and the result objects a call
returns. Importing it imports neither torch nor TensorFlow.
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
from model_compression_toolkit.core.mixed_precision.result import LayerBits, MixedPrecisionResult
from model_compression_toolkit.core.similarity.analysis import SimilarityResult
from model_compression_toolkit.core.similarity.report import LayerSimilarity, SimilarityReport
from model_compression_toolkit.core.tuning import TuningResult, TuningTrial

__all__ = [
    "CoreConfig",
    "DebugConfig",
    "KeepFloat",
    "LayerBits",
    "LayerSimilarity",
    "MixedPrecisionConfig",
    "MixedPrecisionResult",
    "QuantizationConfig",
    "QuantizationErrorMethod",
    "QuantizationInfo",
    "QuantizationMethod",
    "ResourceUtilization",
    "SimilarityReport",
    "SimilarityResult",
    "TuningConfig",
    "TuningResult",
    "TuningTrial",
]
