"""The framework-agnostic core: configuration, the graph, and the pure algorithms on it.

``mct.core`` holds the configuration objects a user passes and the result objects a call
returns, under MCT's names where MCT has them (``mct.core.network_editor``,
``mct.core.BitWidthConfig``, ``mct.core.MixedPrecisionQuantizationConfig``...). Importing it
imports neither torch nor TensorFlow. (``mct.core.pytorch_resource_utilization_data`` and
``keras_resource_utilization_data`` are set here by the package, from ``mct.ptq.resources``.)
"""

from model_compression_toolkit.core import common, network_editor
from model_compression_toolkit.core.bit_width import BitWidthConfig
from model_compression_toolkit.core.config import (
    CoreConfig,
    DebugConfig,
    KeepFloat,
    MixedPrecisionConfig,
    MixedPrecisionQuantizationConfig,
    MpDistanceWeighting,
    MpMetricNormalization,
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
from model_compression_toolkit.core.tpc import TargetPlatformCapabilities
from model_compression_toolkit.core.tuning import TuningResult, TuningTrial

__all__ = [
    "BitWidthConfig",
    "CoreConfig",
    "DebugConfig",
    "KeepFloat",
    "LayerBits",
    "LayerSimilarity",
    "MixedPrecisionConfig",
    "MixedPrecisionQuantizationConfig",
    "MixedPrecisionResult",
    "MpDistanceWeighting",
    "MpMetricNormalization",
    "QuantizationConfig",
    "QuantizationErrorMethod",
    "QuantizationInfo",
    "QuantizationMethod",
    "ResourceUtilization",
    "SimilarityReport",
    "SimilarityResult",
    "TargetPlatformCapabilities",
    "TuningConfig",
    "TuningResult",
    "TuningTrial",
    "common",
    "network_editor",
]
