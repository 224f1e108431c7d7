"""User-facing configuration objects, named as in Sony MCT.

Defaults are built when an object is created, never at import time::

    core_config = mct.core.CoreConfig(
        quantization_config=mct.core.QuantizationConfig(weights_n_bits=4),
        debug_config=mct.core.DebugConfig(analyze_similarity=False),
    )
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

from model_compression_toolkit.errors import ConfigurationError

MIN_BITS, MAX_BITS = 2, 16


class QuantizationMethod(str, Enum):
    """How a quantization range is parametrised.

    POWER_OF_TWO: symmetric, the threshold restricted to a power of two.
    SYMMETRIC: symmetric around zero, any threshold.
    UNIFORM: an arbitrary [min, max] range with a zero point.
    """

    POWER_OF_TWO = "power_of_two"
    SYMMETRIC = "symmetric"
    UNIFORM = "uniform"


class QuantizationErrorMethod(str, Enum):
    """How a threshold is chosen.

    NOCLIPPING: the collected min/max (nothing is clipped).
    MSE / MAE / LP: the threshold minimising the mean squared, absolute, or p-th power
    error between the tensor and its quantized version (LP uses ``l_p_value``). For
    activations the error is computed on the collected histogram, for weights on the
    weights themselves.
    """

    NOCLIPPING = "no_clipping"
    MSE = "mse"
    MAE = "mae"
    LP = "lp"


def _check_enum(name: str, value, enum_type) -> None:
    if not isinstance(value, enum_type):
        allowed = ", ".join(f"{enum_type.__name__}.{m.name}" for m in enum_type)
        raise ConfigurationError(f"{name} must be one of {allowed}; got {value!r}")


def _check_bits(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_BITS <= value <= MAX_BITS:
        raise ConfigurationError(
            f"{name} must be an integer from {MIN_BITS} to {MAX_BITS}; got {value!r}"
        )


@dataclass
class QuantizationConfig:
    """How weights and activations are quantized.

    Weights are quantized symmetrically per output channel (``weights_per_channel``),
    activations per tensor, unsigned when their collected minimum is >= 0.
    """

    weights_n_bits: int = 8
    activation_n_bits: int = 8
    weights_quantization_method: QuantizationMethod = QuantizationMethod.SYMMETRIC
    activation_quantization_method: QuantizationMethod = QuantizationMethod.SYMMETRIC
    weights_error_method: QuantizationErrorMethod = QuantizationErrorMethod.MSE
    activation_error_method: QuantizationErrorMethod = QuantizationErrorMethod.MSE
    weights_per_channel: bool = True
    l_p_value: float = 2.0
    histogram_bins: int = 2048

    def validate(self) -> None:
        _check_bits("weights_n_bits", self.weights_n_bits)
        _check_bits("activation_n_bits", self.activation_n_bits)
        _check_enum("weights_quantization_method", self.weights_quantization_method, QuantizationMethod)
        _check_enum(
            "activation_quantization_method", self.activation_quantization_method, QuantizationMethod
        )
        _check_enum("weights_error_method", self.weights_error_method, QuantizationErrorMethod)
        _check_enum("activation_error_method", self.activation_error_method, QuantizationErrorMethod)
        if not isinstance(self.l_p_value, (int, float)) or not math.isfinite(self.l_p_value) or self.l_p_value <= 0:
            raise ConfigurationError(f"l_p_value must be a finite number > 0; got {self.l_p_value!r}")
        if not isinstance(self.histogram_bins, int) or not 16 <= self.histogram_bins <= 65536:
            raise ConfigurationError(
                f"histogram_bins must be an integer from 16 to 65536; got {self.histogram_bins!r}"
            )


@dataclass
class DebugConfig:
    """What is analysed and logged beyond quantization itself.

    Args:
        analyze_similarity: compare the float and quantized models layer by layer on
            the first ``similarity_samples`` samples (only when a log folder is set).
        similarity_samples: how many representative samples the comparison uses.
        similarity_memory_cap: bytes of layer outputs the comparison may hold at once;
            samples are processed in chunks that stay under it.
    """

    analyze_similarity: bool = True
    similarity_samples: int = 20
    similarity_memory_cap: int = 1 << 30

    def validate(self) -> None:
        if not isinstance(self.analyze_similarity, bool):
            raise ConfigurationError(f"analyze_similarity must be True or False; got {self.analyze_similarity!r}")
        if isinstance(self.similarity_samples, bool) or not isinstance(self.similarity_samples, int) or self.similarity_samples < 1:
            raise ConfigurationError(f"similarity_samples must be an integer >= 1; got {self.similarity_samples!r}")
        if not isinstance(self.similarity_memory_cap, int) or self.similarity_memory_cap < 1 << 20:
            raise ConfigurationError(
                f"similarity_memory_cap must be an integer number of bytes >= 1 MiB; got {self.similarity_memory_cap!r}"
            )


@dataclass
class CoreConfig:
    """Everything that steers a PTQ call."""

    quantization_config: QuantizationConfig = field(default_factory=QuantizationConfig)
    debug_config: DebugConfig = field(default_factory=DebugConfig)

    def validate(self) -> None:
        if not isinstance(self.quantization_config, QuantizationConfig):
            raise ConfigurationError(
                f"quantization_config must be a mct.core.QuantizationConfig; got {type(self.quantization_config).__name__}"
            )
        if not isinstance(self.debug_config, DebugConfig):
            raise ConfigurationError(
                f"debug_config must be a mct.core.DebugConfig; got {type(self.debug_config).__name__}"
            )
        self.quantization_config.validate()
        self.debug_config.validate()
