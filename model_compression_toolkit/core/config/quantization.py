"""`QuantizationConfig`: bits, methods and threshold selection (MCT's fields, checked)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from model_compression_toolkit.core.config.methods import (
    QuantizationErrorMethod,
    QuantizationMethod,
    _check_bits,
    _check_enum,
    check_not_provided,
)
from model_compression_toolkit.errors import ConfigurationError

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
            as after a ReLU then a batch norm with a negative shift. The default grid
            also takes the widest range within 20 % of the least error (the calibration
            samples do not hold every large value unseen data brings); a max pooling or a
            ReLU after a quantized input shares its input's grid (on the pool's values when
            the pool alone reads them: no second rounding); a model output is not clipped
            and leaves room past its collected values (`core.calibration.outputs`).
            ``SYMMETRIC``, ``POWER_OF_TWO`` or ``UNIFORM`` set here, by a target platform or
            by a network editor rule is used for every activation it covers, as given, each
            output on its own grid searched for the least error.
        weights_error_method: how weight thresholds are chosen (on the weights).
        activation_error_method: how activation thresholds are chosen (on the histogram).
        weights_per_channel: one threshold per output channel (else one per tensor).
        l_p_value: the p of ``QuantizationErrorMethod.LP``.
        histogram_bins: bins of the activation histograms collected.
        weights_bias_correction: correct the bias of each layer with quantized weights
            for the mean shift the quantized kernel causes, ``(Wq - W) * mean(input)``,
            as MCT does by default (see `core.calibration.bias_correction`).
        weights_compensated_rounding: round each kernel of a dense layer or a one-group
            convolution onto its grid column by column, each rounding error moved onto the
            weights not yet rounded by the second moments of the layer's float input (its
            covariance where bias correction takes the mean error out; GPTQ's rounding,
            without gradients; see `core.calibration.rounding`). The grid is the same; the
            layer's output error on correlated inputs is much smaller. On by default: on the
            bench's models it gives up to 2 dB of 8-bit output SQNR (7.5 dB on the digits
            CNN) over rounding each weight to nearest (bench/results/peers.md), for about
            0.7 float passes of work on the zoo's 626-layer text recognizer. ``False``: every
            weight rounded to its nearest level, as MCT's PTQ does.
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
    weights_compensated_rounding: bool = True
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
        if not isinstance(self.weights_compensated_rounding, bool):
            raise ConfigurationError(
                f"weights_compensated_rounding must be True or False; got {self.weights_compensated_rounding!r}"
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
