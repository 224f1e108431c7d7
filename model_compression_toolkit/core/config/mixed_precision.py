"""Memory budgets and mixed precision: `ResourceUtilization`, `MixedPrecisionConfig` and MCT's `MixedPrecisionQuantizationConfig`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from model_compression_toolkit.core.config.methods import (
    _check_bits,
    check_not_provided,
)
from model_compression_toolkit.errors import ConfigurationError


@dataclass
class ResourceUtilization:
    """A resource budget, as in MCT (``inf``: no limit).

    Args:
        weights_memory: bytes all weights may take: weights of quantized layers at their
            bit-width, everything else at 32 bits. Mixed precision chooses each layer's
            weight bit-width to fit it.
        activation_memory: bytes of the activations alive at once (one sample), at their
            bit-widths: the peak over the graph's order (`core.resources`). Activation
            bit-widths are not searched: a budget the configured ones meet passes, one they
            do not is an error that says which layers to lower with a `BitWidthConfig`.
        total_memory: weights plus activation memory; the weights get what the
            activations leave.
        bops: bit operations (MACs x weight bits x input activation bits); not a target
            the search can honour: an error says what to give instead.
    """

    weights_memory: float = math.inf
    activation_memory: float = math.inf
    total_memory: float = math.inf
    bops: float = math.inf

    def validate(self) -> None:
        for name in ("weights_memory", "activation_memory", "total_memory", "bops"):
            w = getattr(self, name)
            if isinstance(w, bool) or not isinstance(w, (int, float)) or math.isnan(w) or w <= 0:
                raise ConfigurationError(f"{name} must be a number of bytes > 0 (math.inf: no limit); got {w!r}")
        if math.isfinite(self.bops):
            raise ConfigurationError(
                f"bops={self.bops!r}: a bit-operations budget is not a target the search here can honour (it "
                "chooses weight bit-widths for memory). Give weights_memory or total_memory instead; "
                "mct.core.pytorch_resource_utilization_data / keras_resource_utilization_data report the model's bops"
            )

    def is_any_restricted(self) -> bool:
        """Whether any target is finite."""
        return any(math.isfinite(getattr(self, n)) for n in ("weights_memory", "activation_memory", "total_memory", "bops"))


@dataclass
class MixedPrecisionConfig:
    """How mixed precision chooses a weight bit-width per layer under a budget.

    Args:
        candidate_bits: the bit-widths a layer's weights may get.
        samples: representative samples used to measure each layer's sensitivity.
    """

    candidate_bits: Sequence[int] = (8, 4, 2)
    samples: int = 16

    def validate(self) -> None:
        if not self.candidate_bits:
            raise ConfigurationError("candidate_bits must hold at least one bit-width; got none")
        for b in self.candidate_bits:
            _check_bits("candidate_bits entries", b)
        if isinstance(self.samples, bool) or not isinstance(self.samples, int) or self.samples < 1:
            raise ConfigurationError(f"samples must be an integer >= 1; got {self.samples!r}")


class MpDistanceWeighting(str, Enum):
    """MCT's weighting of the distances at its interest points. Here each layer's
    sensitivity is its own local error scaled by how much of it reaches the output
    (`core.mixed_precision.search`), which stands for ``AVG``, the default; the others
    are not provided."""

    AVG = "avg"
    LAST_LAYER = "last_layer"
    EXP = "exp"
    HESSIAN = "hessian"


class MpMetricNormalization(str, Enum):
    """MCT's normalisation of sensitivities per layer; only ``NONE`` (the default) here."""

    MAXBIT = "MAXBIT"
    MINBIT = "MINBIT"
    NONE = "NONE"


_MP_SEARCH = (
    "each layer's sensitivity here is its local noise-to-signal ratio scaled by how much of it reaches the "
    "model output, and an exact knapsack chooses the bits"
)
_MP_NOT_PROVIDED: dict[str, tuple[object, str]] = {
    "compute_distance_fn": (None, f"{_MP_SEARCH}; remove compute_distance_fn"),
    "configuration_overwrite": (None, (
        "to fix a layer's bits, use mct.core.BitWidthConfig.set_manual_weights_bit_width; fixed layers are left "
        "out of the search")),
    "num_interest_points_factor": (1.0, f"every layer is measured at its own output; {_MP_SEARCH}"),
    "use_hessian_based_scores": (False, f"{_MP_SEARCH}; leave use_hessian_based_scores=False"),
    "norm_scores": (True, f"{_MP_SEARCH}; scores are not normalised"),
    "refine_mp_solution": (True, "the knapsack is solved exactly, so there is no greedy refinement to switch off"),
    "metric_normalization_threshold": (1e10, f"{_MP_SEARCH}; remove metric_normalization_threshold"),
    "hessian_batch_size": (32, "no Hessian is computed for mixed precision; remove hessian_batch_size"),
    "metric_normalization": (MpMetricNormalization.NONE, f"{_MP_SEARCH}; scores are not normalised"),
    "metric_epsilon": (1e-6, f"{_MP_SEARCH}; remove metric_epsilon"),
    "exp_distance_weighting_sigma": (0.1, "it belongs to MpDistanceWeighting.EXP, which is not provided"),
    "custom_metric_fn": (None, (
        "to search against your own score, use mct.ptq.pytorch_tuned_post_training_quantization / "
        "keras_tuned_post_training_quantization with evaluate=your_metric")),
}  # fmt: skip


@dataclass
class MixedPrecisionQuantizationConfig:
    """MCT's mixed-precision configuration; resolved into a `MixedPrecisionConfig` when a
    PTQ call starts.

    Args:
        num_of_images: representative samples the sensitivities are measured on.
        candidate_bits: the weight bit-widths a layer may get; None: the target
            platform's (MCT's default platform: 8, 4, 2), or 8, 4, 2 without one.
        distance_weighting_method: None or ``MpDistanceWeighting.AVG``.

    The other MCT fields (``compute_distance_fn``, ``use_hessian_based_scores``,
    ``configuration_overwrite``, ``custom_metric_fn``...) are accepted at their default;
    any other value is an error that says what to use instead.
    """

    compute_distance_fn: object = None
    distance_weighting_method: MpDistanceWeighting | None = None
    num_of_images: int = 32
    configuration_overwrite: Sequence[int] | None = None
    num_interest_points_factor: float = 1.0
    use_hessian_based_scores: bool = False
    norm_scores: bool = True
    refine_mp_solution: bool = True
    metric_normalization_threshold: float = 1e10
    hessian_batch_size: int = 32
    metric_normalization: MpMetricNormalization = MpMetricNormalization.NONE
    metric_epsilon: float | None = 1e-6
    exp_distance_weighting_sigma: float = 0.1
    custom_metric_fn: object = None
    candidate_bits: Sequence[int] | None = None

    def validate(self) -> None:
        check_not_provided(self, _MP_NOT_PROVIDED)
        method = self.distance_weighting_method
        if method not in (None, MpDistanceWeighting.AVG):
            raise ConfigurationError(
                f"MixedPrecisionQuantizationConfig(distance_weighting_method={method!r}) is not provided by this "
                f"library: {_MP_SEARCH}; leave it None (or MpDistanceWeighting.AVG)"
            )
        n = self.num_of_images
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigurationError(f"num_of_images must be an integer >= 1; got {n!r}")
        if self.candidate_bits is not None:
            MixedPrecisionConfig(candidate_bits=self.candidate_bits).validate()

    def resolved(self, platform_bits: Sequence[int] | None = None) -> MixedPrecisionConfig:
        """The `MixedPrecisionConfig` a call runs with: these candidate bits, else the
        platform's, else 8, 4, 2."""
        bits = self.candidate_bits or platform_bits or MixedPrecisionConfig().candidate_bits
        return MixedPrecisionConfig(candidate_bits=tuple(bits), samples=self.num_of_images)
