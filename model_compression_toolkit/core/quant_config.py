"""The quantization configuration a node carries from stage to stage.

Every quantizer in the library, whatever the method, is one integer grid::

    q(x) = (clip(round(x / scale) + zero_point, qmin, qmax) - zero_point) * scale

symmetric signed: zero_point 0, [-2^(b-1), 2^(b-1)-1]; symmetric unsigned: zero_point 0,
[0, 2^b-1]; uniform: a zero point, [0, 2^b-1]. Backends implement only this formula.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from model_compression_toolkit.core.config import QuantizationErrorMethod, QuantizationMethod


@dataclass
class QuantGrid:
    """Scale and zero point (scalars, or one per channel) and the integer range."""

    scale: np.ndarray
    zero_point: np.ndarray
    qmin: int
    qmax: int


@dataclass
class WeightsQuantConfig:
    """How one weight tensor is quantized, and (once chosen) its range."""

    n_bits: int
    method: QuantizationMethod
    error_method: QuantizationErrorMethod
    per_channel: bool
    channel_axes: tuple[int, ...]
    threshold: np.ndarray | None = None  # symmetric methods: one per channel (or scalar)
    range_min: np.ndarray | None = None  # uniform
    range_max: np.ndarray | None = None  # uniform
    grid: QuantGrid | None = None
    manual: bool = False  # bits set by the user (BitWidthConfig, network editor): mixed precision leaves them
    # HMSE: the diagonal of the layer's Hessian, one value per element of the weight
    # (E[x^2] of the input each weight multiplies); None: every weight counts the same
    importance: np.ndarray | None = None


@dataclass
class ActivationQuantConfig:
    """How a node's output is quantized, and (once chosen) its range."""

    n_bits: int
    method: QuantizationMethod
    error_method: QuantizationErrorMethod
    signed: bool | None = None
    threshold: float | None = None
    range_min: float | None = None
    range_max: float | None = None
    grid: QuantGrid | None = None
    z_threshold: float = float("inf")  # outliers beyond this many standard deviations are left out
    # shift negative correction: the largest -min / threshold shifted onto an unsigned grid; None: off
    shift_negative_ratio: float | None = None
    fixed_range: tuple[float, float] | None = None  # a platform's fixed grid over [min, max]: no search
    grid_from: str | None = None  # takes this node's grid once every grid is chosen (shared grids)
    allowed_bits: tuple[int, ...] | None = None  # the bits the target platform allows here; None: any
    # ``method`` is chosen from the collected values (symmetric or uniform, `calibration.thresholds`)
    choose_grid: bool = False
    # a model output (`calibration.outputs`): with ``choose_grid``, not clipped and widened for
    # unseen samples, within ``bounds`` (its function's range); ``values_per_sample`` counts them
    model_output: bool = False
    values_per_sample: int | None = None
    bounds: tuple[float, float] | None = None


@dataclass
class NodeQuantConfig:
    """A node's quantization: None / empty means kept in float, with the reason."""

    activation: ActivationQuantConfig | None = None
    weights: dict[str, WeightsQuantConfig] = field(default_factory=dict)
    activation_float_reason: str | None = None
    weights_float_reason: str | None = None
    fused_into: str | None = None  # the activation after this layer that quantizes its output
    # the float mean of the input per channel: the quantized bias is corrected with it
    # (`core.calibration.bias_correction`); None when the bias is not corrected
    input_mean: np.ndarray | None = None
    # the float input's second moments, per block of kernel columns: the kernel is rounded
    # with its errors compensated (`core.calibration.rounding.InputMoments`, shared, never
    # copied); None: rounded to nearest
    input_moments: Any = None

    @property
    def is_quantized(self) -> bool:
        return self.activation is not None or bool(self.weights)
