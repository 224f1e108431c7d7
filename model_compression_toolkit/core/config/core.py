"""`CoreConfig`, everything that steers a PTQ call, and `TuningConfig`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from model_compression_toolkit.core.bit_width import BitWidthConfig
from model_compression_toolkit.core.config.debug import DebugConfig
from model_compression_toolkit.core.config.layers import KeepFloat
from model_compression_toolkit.core.config.mixed_precision import (
    MixedPrecisionConfig,
    MixedPrecisionQuantizationConfig,
)
from model_compression_toolkit.core.config.quantization import QuantizationConfig
from model_compression_toolkit.errors import ConfigurationError


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
        integer_only: the target runs integers only (an int8 TFLite delegate, an NPU): every
            tensor an int8 runtime holds gets a grid (only ReLU and ReLU6 fuse into the layer
            before them; `core.preparation.integer_runtime_grids`), and the similarity
            report's suggested fix never keeps a layer float and asks for no more than 8
            bits, and says so when nothing integer restores the output. A
            ``target_platform_capabilities`` makes the target integer-only too, with the
            bit-widths that platform lists.
        quantize_outputs: whether the model's outputs are put on a grid too. None (the
            default): on an integer-only target (``integer_only``, a target platform) yes,
            as MCT does; otherwise they are handed on unrounded, as PyTorch's pt2e and
            Intel NNCF do (the layers computing them still read quantized inputs with
            quantized weights), which keeps a detector whose one output joins pixel boxes
            and 0-1 scores from rounding its scores away. False on an integer-only target
            is an error.

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
    quantize_outputs: bool | None = None

    @property
    def outputs_float(self) -> bool:
        """Whether the model's outputs stay unrounded (``quantize_outputs``)."""
        return not self.quantize_outputs if self.quantize_outputs is not None else not self.integer_target

    @property
    def integer_target(self) -> bool:
        """Whether the target runs integers only: ``integer_only``, or a target platform."""
        return self.integer_only or self.target_platform_capabilities is not None

    @property
    def grids_for(self) -> str:
        """What the grids are placed for (`core.preparation.assign_quantization`): ``"int8"``
        (``integer_only`` without a target platform: every tensor an int8 runtime holds),
        ``"platform"`` (a target platform's fusing patterns decide) or ``"float"``."""
        if self.target_platform_capabilities is not None:
            return "platform"
        return "int8" if self.integer_only else "float"

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
        if self.quantize_outputs is not None and not isinstance(self.quantize_outputs, bool):
            raise ConfigurationError(f"quantize_outputs must be None, True or False; got {self.quantize_outputs!r}")
        if self.quantize_outputs is False and self.integer_target:
            target = "integer_only=True" if self.integer_only else "a target_platform_capabilities"
            raise ConfigurationError(
                f"quantize_outputs=False leaves the model's outputs float, which an integer-only target ({target}) "
                "cannot run; leave quantize_outputs at None (or True) for that target"
            )
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
