"""User-facing configuration objects, named as in Sony MCT.

Defaults are built when an object is created, never at import time::

    core_config = mct.core.CoreConfig(
        quantization_config=mct.core.QuantizationConfig(weights_n_bits=4),
        debug_config=mct.core.DebugConfig(analyze_similarity=False),
    )
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from model_compression_toolkit.core.bit_width import BitWidthConfig
from model_compression_toolkit.errors import ConfigurationError

MIN_BITS, MAX_BITS = 2, 16


class QuantizationMethod(str, Enum):
    """How a quantization range is parametrised.

    - ``POWER_OF_TWO``: symmetric, the threshold restricted to a power of two.
    - ``SYMMETRIC``: symmetric around zero, any threshold.
    - ``UNIFORM``: an arbitrary [min, max] range with a zero point.
    """

    POWER_OF_TWO = "power_of_two"
    SYMMETRIC = "symmetric"
    UNIFORM = "uniform"


class QuantizationErrorMethod(str, Enum):
    """How a threshold is chosen.

    - ``NOCLIPPING``: the collected min/max (nothing is clipped).
    - ``MSE`` / ``MAE`` / ``LP``: the threshold minimising the mean squared, absolute, or
      p-th power error between the tensor and its quantized version (``LP`` uses
      ``l_p_value``). For activations the error is computed on the collected histogram,
      for weights on the weights themselves.
    - ``KL``: the threshold minimising the Kullback-Leibler divergence between the
      histogram of the values and that of their quantized version, each quantization
      level's count spread over the bins it covers (activations: the collected histogram;
      weights: a histogram of each channel).
    - ``HMSE``: weights only. The squared error of each weight scaled by the diagonal of
      the layer's Hessian, ``E[x_i^2]`` of the input channel it multiplies (the Hessian
      of the layer output's squared error with respect to its weights), so that weights
      reading large inputs are kept more precisely.
    """

    NOCLIPPING = "no_clipping"
    MSE = "mse"
    MAE = "mae"
    LP = "lp"
    KL = "kl"
    HMSE = "hmse"


def _check_enum(name: str, value, enum_type) -> None:
    if not isinstance(value, enum_type):
        allowed = ", ".join(f"{enum_type.__name__}.{m.name}" for m in enum_type)
        raise ConfigurationError(f"{name} must be one of {allowed}; got {value!r}")


def check_not_provided(obj: object, table: dict[str, tuple[object, str]]) -> None:
    """Raise ConfigurationError for a field of ``obj`` set away from its default when this
    library does not provide what it asks for; the message says what to use instead.

    Args:
        obj: a configuration object.
        table: field -> (the only accepted value, what to use instead).
    """
    for name, (default, instead) in table.items():
        value = getattr(obj, name)
        if value is default or value == default:
            continue
        raise ConfigurationError(
            f"{type(obj).__name__}({name}={value!r}) is not provided by this library: {instead}"
        )


_KEEP_FLOAT_HINT = "keep the affected layer float with mct.core.KeepFloat (the similarity report names it)"
_NOT_PROVIDED: dict[str, tuple[object, str]] = {
    "relu_bound_to_power_of_2": (False, (
        "thresholds are searched on the data for any grid; for power-of-two hardware set "
        "activation_quantization_method=QuantizationMethod.POWER_OF_TWO or pass the platform's "
        "target_platform_capabilities")),
    "weights_second_moment_correction": (False, (
        "batch norms are folded with their running statistics and not re-estimated; weights_bias_correction "
        "(on by default) corrects the mean shift quantized weights cause")),
    "input_scaling": (False, f"the input is quantized on its own grid; {_KEEP_FLOAT_HINT}"),
    "softmax_shift": (False, f"softmax inputs are quantized like any activation; {_KEEP_FLOAT_HINT}"),
    "linear_collapsing": (False, "consecutive linear layers are quantized one by one; leave linear_collapsing=False"),
    "residual_collapsing": (False, "residual additions are quantized as they are; leave residual_collapsing=False"),
    "shift_negative_params_search": (False, (
        "with shift_negative_activation_correction the shift is the smallest grid step at or above -min and the "
        "threshold is searched again on the shifted values; remove shift_negative_params_search")),
    "activation_bias_correction": (False, (
        "the mean error of quantized activations is not corrected; weights_bias_correction (on by default) "
        "corrects the weights' mean shift")),
    "activation_bias_correction_threshold": (0.0, "it belongs to activation_bias_correction, which is not provided"),
    "min_threshold": (2.0**-16, "the smallest threshold is fixed at 2**-16; remove min_threshold"),
    "custom_tpc_opset_to_layer": (None, (
        "custom operator sets are not provided; select layers with mct.core.network_editor.NodeTypeFilter or "
        "NodeNameFilter in a mct.core.BitWidthConfig or DebugConfig(network_editor=[...])")),
}  # fmt: skip
_DEBUG_NOT_PROVIDED: dict[str, tuple[object, str]] = {
    "simulate_scheduler": (False, (
        "activation memory is the peak of the tensors alive at once in the graph's topological order; "
        "remove simulate_scheduler")),
    "bypass": (False, "to use the float model, call it directly instead of the PTQ function"),
}


def _check_bits(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_BITS <= value <= MAX_BITS:
        raise ConfigurationError(
            f"{name} must be an integer from {MIN_BITS} to {MAX_BITS}; got {value!r}"
        )


@dataclass
class QuantizationConfig:
    """How weights and activations are quantized.

    Weights are quantized symmetrically per output channel (``weights_per_channel``),
    activations per tensor, each on the grid its collected values ask for (see
    ``activation_quantization_method``).

    Args:
        weights_n_bits: bits of quantized weights, 2 to 16.
        activation_n_bits: bits of quantized activations, 2 to 16.
        weights_quantization_method: how a weight range is parametrised.
        activation_quantization_method: how an activation range is parametrised. None
            (the default): chosen per activation from its collected histogram, by the
            error the threshold search minimises (``activation_error_method``; MSE for
            NOCLIPPING): unsigned symmetric when the minimum is >= 0, else signed
            symmetric unless ``UNIFORM`` (a zero point) has less than 0.8 times its error
            (the mean error of the error method, MSE for NOCLIPPING and KL),
            as after a ReLU then a batch norm with a negative shift. ``SYMMETRIC``,
            ``POWER_OF_TWO`` or ``UNIFORM`` set here, by a target platform or by a
            network editor rule is used for every activation it covers, as given.
        weights_error_method: how weight thresholds are chosen (on the weights).
        activation_error_method: how activation thresholds are chosen (on the histogram).
        weights_per_channel: one threshold per output channel (else one per tensor).
        l_p_value: the p of ``QuantizationErrorMethod.LP``.
        histogram_bins: bins of the activation histograms collected.
        weights_bias_correction: correct the bias of each layer with quantized weights
            for the mean shift the quantized kernel causes, ``(Wq - W) * mean(input)``,
            as MCT does by default (see `core.calibration.bias_correction`).
        calibration_batches: at most this many batches of ``representative_data_gen`` are
            read to collect the statistics (MCT 1.x's ``n_iter``), so that a generator that
            never ends is read for a bounded time; None reads every batch (the generator
            must end). The progress display shows the number, and the log says when the
            reading stopped at it.
        z_threshold: outlier removal before an activation's threshold search: values more
            than ``z_threshold`` standard deviations from the mean are left out of the
            histogram (and of the no-clipping range). ``inf``: nothing removed.
        shift_negative_activation_correction: an activation such as GELU, SiLU or
            Hardswish whose outputs are negative only by a little (``-min <=
            shift_negative_ratio * threshold``) and that feeds only conv or dense layers
            is quantized on an unsigned grid shifted down by the smallest grid step at or
            above ``-min``: all its levels serve values that occur, instead of half of
            them waiting for negatives. The shift is what the next layer's bias absorbs on
            hardware. Off by default here (MCT: on).
        shift_negative_ratio: the largest ``-min / threshold`` that is shifted.
        shift_negative_threshold_recalculation: the threshold of a shifted activation is
            always searched again on the shifted values; True asks for exactly that.
        concat_threshold_update: every quantized input of a concatenation takes the
            concatenation's grid, so that it concatenates values already on one grid.
        activation_channel_equalization: cross-layer scale equalization (Nagel et al.
            2019, `core.equalization`) before statistics are collected: where a conv or
            dense layer (or its batch norm) feeds another through ReLU, leaky ReLU, pooling
            or nothing, each channel's scale moves from the first layer's weights into the
            second's, ``s_c = sqrt(r1_c / r2_c)`` of their per-channel weight ranges. The
            float function is unchanged; an outlier channel that ruined a per-tensor
            activation grid comes back to the others' range, in integers only. The user's
            model is not changed (the library's copy of its weights is).

    The other fields of MCT's ``QuantizationConfig`` (``relu_bound_to_power_of_2``,
    ``linear_collapsing``, ``residual_collapsing``, ``input_scaling``, ``softmax_shift``,
    ``weights_second_moment_correction``,
    ``activation_bias_correction``, ``shift_negative_params_search``,
    ``custom_tpc_opset_to_layer``, ``min_threshold``) are accepted at their default; any
    other value is an error that says what to use here instead.
    """

    weights_n_bits: int = 8
    activation_n_bits: int = 8
    weights_quantization_method: QuantizationMethod = QuantizationMethod.SYMMETRIC
    activation_quantization_method: QuantizationMethod | None = None
    weights_error_method: QuantizationErrorMethod = QuantizationErrorMethod.MSE
    activation_error_method: QuantizationErrorMethod = QuantizationErrorMethod.MSE
    weights_per_channel: bool = True
    l_p_value: float = 2.0
    histogram_bins: int = 2048
    weights_bias_correction: bool = True
    calibration_batches: int | None = 500
    z_threshold: float = math.inf
    shift_negative_activation_correction: bool = False
    shift_negative_ratio: float = 0.05
    shift_negative_threshold_recalculation: bool = False
    concat_threshold_update: bool = False
    # MCT's fields this library does not provide: accepted at these defaults only
    relu_bound_to_power_of_2: bool = False
    weights_second_moment_correction: bool = False
    input_scaling: bool = False
    softmax_shift: bool = False
    activation_channel_equalization: bool = False
    linear_collapsing: bool = False
    residual_collapsing: bool = False
    shift_negative_params_search: bool = False
    activation_bias_correction: bool = False
    activation_bias_correction_threshold: float = 0.0
    min_threshold: float = 2.0**-16
    custom_tpc_opset_to_layer: dict | None = None

    def validate(self) -> None:
        if isinstance(self.weights_n_bits, QuantizationErrorMethod) or isinstance(
            self.activation_n_bits, QuantizationErrorMethod
        ):
            raise ConfigurationError(
                "QuantizationConfig got an error method where a bit-width goes: its first arguments here are "
                "weights_n_bits and activation_n_bits, not MCT's activation_error_method and weights_error_method. "
                "Pass them by keyword: QuantizationConfig(activation_error_method=..., weights_error_method=...)"
            )
        check_not_provided(self, _NOT_PROVIDED)
        for name in ("shift_negative_activation_correction", "shift_negative_threshold_recalculation",
                     "concat_threshold_update", "activation_channel_equalization"):  # fmt: skip
            if not isinstance(getattr(self, name), bool):
                raise ConfigurationError(f"{name} must be True or False; got {getattr(self, name)!r}")
        z = self.z_threshold
        if isinstance(z, bool) or not isinstance(z, (int, float)) or math.isnan(z) or z <= 0:
            raise ConfigurationError(f"z_threshold must be a number > 0 (math.inf: no outlier removal); got {z!r}")
        r = self.shift_negative_ratio
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r <= 0:
            raise ConfigurationError(f"shift_negative_ratio must be a finite number > 0; got {r!r}")
        if self.activation_error_method == QuantizationErrorMethod.HMSE:
            raise ConfigurationError(
                "activation_error_method=HMSE: the Hessian-weighted error is defined for weights (each weight scaled "
                "by the input it multiplies), as in MCT; for activations use MSE, MAE, LP, KL or NOCLIPPING"
            )
        if not isinstance(self.weights_bias_correction, bool):
            raise ConfigurationError(
                f"weights_bias_correction must be True or False; got {self.weights_bias_correction!r}"
            )
        _check_bits("weights_n_bits", self.weights_n_bits)
        _check_bits("activation_n_bits", self.activation_n_bits)
        _check_enum("weights_quantization_method", self.weights_quantization_method, QuantizationMethod)
        if self.activation_quantization_method is not None:
            _check_enum("activation_quantization_method", self.activation_quantization_method, QuantizationMethod)
        _check_enum("weights_error_method", self.weights_error_method, QuantizationErrorMethod)
        _check_enum("activation_error_method", self.activation_error_method, QuantizationErrorMethod)
        if not isinstance(self.l_p_value, (int, float)) or not math.isfinite(self.l_p_value) or self.l_p_value <= 0:
            raise ConfigurationError(f"l_p_value must be a finite number > 0; got {self.l_p_value!r}")
        if not isinstance(self.histogram_bins, int) or not 16 <= self.histogram_bins <= 65536:
            raise ConfigurationError(
                f"histogram_bins must be an integer from 16 to 65536; got {self.histogram_bins!r}"
            )
        batches = self.calibration_batches
        if batches is not None and (isinstance(batches, bool) or not isinstance(batches, int) or batches < 1):
            raise ConfigurationError(
                f"calibration_batches must be an integer >= 1 (the batches read for calibration), or None "
                f"to read every batch; got {batches!r}"
            )


@dataclass
class DebugConfig:
    """What is analysed and logged beyond quantization itself.

    Args:
        analyze_similarity: compare the float and quantized models layer by layer on
            the first ``similarity_samples`` samples and fill ``info.similarity``. None
            (the default): only when a log folder is set; True: always, logged or not;
            False: never.
        similarity_samples: how many representative samples the comparison uses.
        similarity_memory_cap: bytes of layer outputs the comparison may hold at once.
            When the float outputs of all the samples fit, the statistics pass keeps
            them and the float model does not run again; else samples are processed in
            chunks that stay under it.
        impact_samples: the first samples on which each quantizer's damage to the model
            output, with that quantizer alone switched on, is measured (the ranking of
            causes and the suggested fix; see the similarity docs). Whole batches are
            taken until there are this many, so a model traced for one batch size runs.
        max_impact_quantizers: how many quantizers at most get that measure: those whose
            own error is not negligible, the largest first.
        network_editor: MCT's edit rules (`mct.core.network_editor.EditRule`), applied in
            order after the target platform's and the `BitWidthConfig`'s choices.
        simulate_scheduler: MCT's scheduler simulation; not provided (activation memory
            here is the peak of the tensors alive at once in the graph's order).
        bypass: MCT's "return the float model unchanged"; not provided (call the float
            model itself).
    """

    analyze_similarity: bool | None = None
    similarity_samples: int = 20
    similarity_memory_cap: int = 1 << 30
    impact_samples: int = 8
    max_impact_quantizers: int = 12
    network_editor: list = field(default_factory=list)
    simulate_scheduler: bool = False
    bypass: bool = False

    def validate(self) -> None:
        check_not_provided(self, _DEBUG_NOT_PROVIDED)
        if isinstance(self.network_editor, (str, bytes)) or not isinstance(self.network_editor, Sequence):
            raise ConfigurationError(
                f"network_editor must be a list of mct.core.network_editor.EditRule; got {self.network_editor!r}"
            )
        if self.analyze_similarity is not None and not isinstance(self.analyze_similarity, bool):
            raise ConfigurationError(
                f"analyze_similarity must be True, False or None (on when a log folder is set); "
                f"got {self.analyze_similarity!r}"
            )
        if isinstance(self.similarity_samples, bool) or not isinstance(self.similarity_samples, int) or self.similarity_samples < 1:
            raise ConfigurationError(f"similarity_samples must be an integer >= 1; got {self.similarity_samples!r}")
        for name in ("impact_samples", "max_impact_quantizers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(f"{name} must be an integer >= 0; got {value!r}")
        if not isinstance(self.similarity_memory_cap, int) or self.similarity_memory_cap < 1 << 20:
            raise ConfigurationError(
                f"similarity_memory_cap must be an integer number of bytes >= 1 MiB; got {self.similarity_memory_cap!r}"
            )


@dataclass
class KeepFloat:
    r"""Layers to keep unquantized, chosen by exact name, regular expression or layer type.

    Names and patterns match the layer names the model uses (PyTorch module paths such as
    ``"layer1.0.conv1"``, Keras layer names); a pattern must match a whole name. Types are
    layer type names (``"Conv2d"``, ``"Dense"``), classes, or the neutral kinds
    (``"conv"``, ``"dense"``, ``"activation"``...). ``weights`` / ``activations`` say which
    part stays float::

        mct.core.KeepFloat(names=["features.0"])                  # weights and output
        mct.core.KeepFloat(patterns=[r"layer4\..*"], activations=False)  # weights only
        mct.core.KeepFloat(types=["Softmax"], weights=False)       # outputs only
    """

    names: Sequence[str] = ()
    patterns: Sequence[str] = ()
    types: Sequence[str | type] = ()
    weights: bool = True
    activations: bool = True

    def validate(self) -> None:
        for field_name in ("names", "patterns", "types"):
            value = getattr(self, field_name)
            if isinstance(value, (str, type)) or not isinstance(value, Sequence):
                raise ConfigurationError(
                    f"KeepFloat.{field_name} must be a list; got {value!r}. Write {field_name}=[{value!r}]."
                )
        for pattern in self.patterns:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ConfigurationError(f"KeepFloat pattern {pattern!r} is not a valid regular expression: {err}") from None
        if not (self.weights or self.activations):
            raise ConfigurationError("KeepFloat keeps nothing float: weights and activations are both False")


def keep_float_rules(activations: Sequence[str], weights: Sequence[str]) -> list[KeepFloat]:
    """Rules keeping these layers' outputs float, and these layers' weights float."""
    rules = []
    if activations:
        rules.append(KeepFloat(names=list(activations), weights=False))
    if weights:
        rules.append(KeepFloat(names=list(weights), activations=False))
    return rules


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


@dataclass
class TuningConfig:
    """Accuracy-driven tuning: keep the worst layers float until the drop is small enough.

    Args:
        max_drop: the largest allowed drop of the evaluation score below the float
            model's (absolute, in the score's units, or a fraction of it with ``relative``).
        relative: read ``max_drop`` as a fraction of the float score.
        max_trials: how many quantized models may be evaluated at most.
        layers_per_trial: how many more layers each new trial keeps float.
    """

    max_drop: float = 0.01
    relative: bool = False
    max_trials: int = 3
    layers_per_trial: int = 1

    def validate(self) -> None:
        if isinstance(self.max_drop, bool) or not isinstance(self.max_drop, (int, float)) or not math.isfinite(self.max_drop) or self.max_drop < 0:
            raise ConfigurationError(f"max_drop must be a finite number >= 0; got {self.max_drop!r}")
        for name in ("max_trials", "layers_per_trial"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"{name} must be an integer >= 1; got {value!r}")


def _is_rule_list(value: object) -> bool:
    """A list, tuple or other sequence (a `SuggestedFix`) of `KeepFloat` rules."""
    return (
        isinstance(value, Sequence)
        and not isinstance(value, (str, bytes))
        and all(isinstance(rule, KeepFloat) for rule in value)
    )


@dataclass
class CoreConfig:
    """Everything that steers a PTQ call; the first four arguments in MCT's order.

    Args:
        quantization_config: bits, methods and threshold selection.
        mixed_precision_config: how bit-widths are chosen when the PTQ call is given a
            ``target_resource_utilization``: a `MixedPrecisionConfig`, or MCT's
            `MixedPrecisionQuantizationConfig`.
        bit_width_config: manual bit-widths for chosen layers (`mct.core.BitWidthConfig`).
        debug_config: what is analysed and logged beyond quantization, and MCT's network
            editor rules.
        keep_float: layers kept unquantized (one `KeepFloat` or a list of them, or the
            fix a similarity report suggests: ``info.similarity.suggested_fix()``).
        target_platform_capabilities: the platform the model is quantized for; the PTQ
            functions set it from their ``target_platform_capabilities`` argument.
        integer_only: the target runs integers only (an int8 TFLite delegate, an NPU): the
            similarity report's suggested fix never keeps a layer float and asks for no
            more than 8 bits, and says so when nothing integer restores the output. A
            ``target_platform_capabilities`` makes the target integer-only too, with the
            bit-widths that platform lists.

    Precedence, from weakest to strongest: the platform's defaults and per-operator rules,
    values of ``quantization_config`` set away from their defaults, the
    ``bit_width_config``, the ``network_editor`` rules, ``keep_float``.
    """

    quantization_config: QuantizationConfig = field(default_factory=QuantizationConfig)
    mixed_precision_config: MixedPrecisionConfig | MixedPrecisionQuantizationConfig = field(
        default_factory=MixedPrecisionConfig
    )
    bit_width_config: BitWidthConfig = field(default_factory=BitWidthConfig)
    debug_config: DebugConfig = field(default_factory=DebugConfig)
    keep_float: KeepFloat | Sequence[KeepFloat] = ()
    target_platform_capabilities: object = None
    integer_only: bool = False

    @property
    def keep_float_rules(self) -> list[KeepFloat]:
        if isinstance(self.keep_float, KeepFloat):
            return [self.keep_float]
        return list(self.keep_float) if _is_rule_list(self.keep_float) else []

    def validate(self) -> None:
        if not isinstance(self.quantization_config, QuantizationConfig):
            raise ConfigurationError(
                f"quantization_config must be a mct.core.QuantizationConfig; got {type(self.quantization_config).__name__}"
            )
        if not isinstance(self.debug_config, DebugConfig):
            raise ConfigurationError(
                f"debug_config must be a mct.core.DebugConfig; got {type(self.debug_config).__name__}"
            )
        if not isinstance(self.integer_only, bool):
            raise ConfigurationError(f"integer_only must be True or False; got {self.integer_only!r}")
        self.quantization_config.validate()
        self.debug_config.validate()
        if not (isinstance(self.keep_float, KeepFloat) or _is_rule_list(self.keep_float)):
            raise ConfigurationError(
                f"keep_float must be a mct.core.KeepFloat or a list of them; got {self.keep_float!r}"
            )
        for rule in self.keep_float_rules:
            rule.validate()
        if self.bit_width_config is not None and not isinstance(self.bit_width_config, BitWidthConfig):
            raise ConfigurationError(
                f"bit_width_config must be a mct.core.BitWidthConfig; got {type(self.bit_width_config).__name__}"
            )
        if not isinstance(self.mixed_precision_config, (MixedPrecisionConfig, MixedPrecisionQuantizationConfig)):
            raise ConfigurationError(
                "mixed_precision_config must be a mct.core.MixedPrecisionConfig or MixedPrecisionQuantizationConfig; "
                f"got {type(self.mixed_precision_config).__name__}"
            )
        self.mixed_precision_config.validate()
