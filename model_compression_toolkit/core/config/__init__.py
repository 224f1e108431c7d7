"""User-facing configuration objects, named as in Sony MCT.

Defaults are built when an object is created, never at import time::

    core_config = mct.core.CoreConfig(
        quantization_config=mct.core.QuantizationConfig(weights_n_bits=4),
        debug_config=mct.core.DebugConfig(analyze_similarity=False),
    )

The package, one module per kind of setting::

    methods.py          QuantizationMethod, QuantizationErrorMethod, the shared checks
    quantization.py     QuantizationConfig
    debug.py            DebugConfig
    layers.py           KeepFloat
    mixed_precision.py  ResourceUtilization, MixedPrecisionConfig, MCT's MixedPrecisionQuantizationConfig
    core.py             CoreConfig, TuningConfig
"""

from __future__ import annotations

from model_compression_toolkit.core.config.core import CoreConfig, TuningConfig
from model_compression_toolkit.core.config.debug import DebugConfig
from model_compression_toolkit.core.config.layers import KeepFloat, keep_float_rules
from model_compression_toolkit.core.config.methods import (
    MAX_BITS,
    MIN_BITS,
    QuantizationErrorMethod,
    QuantizationMethod,
    check_not_provided,
)
from model_compression_toolkit.core.config.mixed_precision import (
    MixedPrecisionConfig,
    MixedPrecisionQuantizationConfig,
    MpDistanceWeighting,
    MpMetricNormalization,
    ResourceUtilization,
)
from model_compression_toolkit.core.config.quantization import QuantizationConfig

__all__ = [
    "MAX_BITS",
    "MIN_BITS",
    "CoreConfig",
    "DebugConfig",
    "KeepFloat",
    "MixedPrecisionConfig",
    "MixedPrecisionQuantizationConfig",
    "MpDistanceWeighting",
    "MpMetricNormalization",
    "QuantizationConfig",
    "QuantizationErrorMethod",
    "QuantizationMethod",
    "ResourceUtilization",
    "TuningConfig",
    "check_not_provided",
    "keep_float_rules",
]
