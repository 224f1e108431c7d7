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

    Args:
        weights_n_bits: bits of quantized weights, 2 to 16.
        activation_n_bits: bits of quantized activations, 2 to 16.
        weights_quantization_method: how a weight range is parametrised.
        activation_quantization_method: how an activation range is parametrised.
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
    weights_bias_correction: bool = True
    calibration_batches: int | None = 500

    def validate(self) -> None:
        if not isinstance(self.weights_bias_correction, bool):
            raise ConfigurationError(
                f"weights_bias_correction must be True or False; got {self.weights_bias_correction!r}"
            )
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
            causes and the suggested fix; see the similarity docs).
        max_impact_quantizers: how many quantizers at most get that measure: those whose
            own error is not negligible, the largest first.
    """

    analyze_similarity: bool | None = None
    similarity_samples: int = 20
    similarity_memory_cap: int = 1 << 30
    impact_samples: int = 8
    max_impact_quantizers: int = 12

    def validate(self) -> None:
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
    """A memory budget, as in MCT: ``weights_memory`` is the bytes all weights may take.

    Weights of quantized layers count at their bit-width, everything else at 32 bits.
    """

    weights_memory: float = math.inf

    def validate(self) -> None:
        w = self.weights_memory
        if isinstance(w, bool) or not isinstance(w, (int, float)) or math.isnan(w) or w <= 0:
            raise ConfigurationError(f"weights_memory must be a number of bytes > 0; got {w!r}")


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
    """Everything that steers a PTQ call.

    Args:
        quantization_config: bits, methods and threshold selection.
        debug_config: what is analysed and logged beyond quantization.
        keep_float: layers kept unquantized (one `KeepFloat` or a list of them, or the
            fix a similarity report suggests: ``info.similarity.suggested_fix()``).
        mixed_precision_config: how bit-widths are chosen when the PTQ call is given a
            ``target_resource_utilization``.
    """

    quantization_config: QuantizationConfig = field(default_factory=QuantizationConfig)
    debug_config: DebugConfig = field(default_factory=DebugConfig)
    keep_float: KeepFloat | Sequence[KeepFloat] = ()
    mixed_precision_config: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)

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
        self.quantization_config.validate()
        self.debug_config.validate()
        if not (isinstance(self.keep_float, KeepFloat) or _is_rule_list(self.keep_float)):
            raise ConfigurationError(
                f"keep_float must be a mct.core.KeepFloat or a list of them; got {self.keep_float!r}"
            )
        for rule in self.keep_float_rules:
            rule.validate()
        if not isinstance(self.mixed_precision_config, MixedPrecisionConfig):
            raise ConfigurationError(
                f"mixed_precision_config must be a mct.core.MixedPrecisionConfig; got {type(self.mixed_precision_config).__name__}"
            )
        self.mixed_precision_config.validate()
