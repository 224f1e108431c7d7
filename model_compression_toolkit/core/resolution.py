"""The configuration a call runs with: a user's `CoreConfig`, MCT's objects in it and a
target platform, resolved once into one validated `CoreConfig`.

    CoreConfig + TPC -> defaults of the platform (user-set fields win), MCT's mixed-precision
    config -> MixedPrecisionConfig, rules checked -> resolved CoreConfig
    resolved CoreConfig -> quantization_edits -> what `assign_quantization` applies, in order
    graph without KeepFloat + graph with it -> keep_float_notes -> what the user is told

Overlapping settings on one layer are resolved by one stated rule: ``KeepFloat`` applies
last, so it wins over a ``BitWidthConfig`` on the same layer; a warning says so, and
``info`` gives it as the layer's float reason.
"""

from __future__ import annotations

import dataclasses

from model_compression_toolkit.core.calibration.shared_grids import ConcatThresholdUpdate
from model_compression_toolkit.core.config import (
    CoreConfig,
    MixedPrecisionConfig,
    MixedPrecisionQuantizationConfig,
    QuantizationConfig,
)
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.network_editor import EditRule
from model_compression_toolkit.core.node_rules import bit_width_rules
from model_compression_toolkit.core.preparation import KEPT_FLOAT, QuantizationEdit
from model_compression_toolkit.core.similarity.fix import SuggestedFix
from model_compression_toolkit.core.tpc import TargetPlatformCapabilities
from model_compression_toolkit.errors import ConfigurationError

# QuantizationConfig field -> the platform's field it overrides when set away from its default
PLATFORM_FIELDS = {
    "weights_n_bits": "weights_n_bits",
    "weights_quantization_method": "weights_quantization_method",
    "weights_per_channel": "weights_per_channel_threshold",
    "activation_n_bits": "activation_n_bits",
    "activation_quantization_method": "activation_quantization_method",
}
_GET_ONE = "get one with mct.get_target_platform_capabilities('pytorch', 'default') or (tpc_version='1.0', device_type='imx500')"


def _platform(core_config: CoreConfig, tpc: object) -> TargetPlatformCapabilities | None:
    own = core_config.target_platform_capabilities
    if tpc is not None and own is not None and tpc != own:
        raise ConfigurationError(
            "two target platforms given: the target_platform_capabilities argument and "
            "CoreConfig.target_platform_capabilities differ; give one of them"
        )
    tpc = tpc if tpc is not None else own
    if tpc is not None and not isinstance(tpc, TargetPlatformCapabilities):
        raise ConfigurationError(
            f"target_platform_capabilities must be this library's TargetPlatformCapabilities; got "
            f"{type(tpc).__module__}.{type(tpc).__name__}. MCT's or edgemdt_tpc's objects are not read: {_GET_ONE}"
        )
    return tpc


def resolve_core_config(core_config: CoreConfig | None, target_platform_capabilities: object = None) -> CoreConfig:
    """The validated `CoreConfig` a call runs with; the user's object is not changed.

    With a target platform, its defaults replace the `QuantizationConfig`'s bits, methods
    and per-channel choice, except the fields the user set away from their defaults,
    which override the platform's for every operator; mixed precision chooses among the
    platform's kernel bit-widths unless the user gave candidate bits.
    """
    if core_config is None:
        core_config = CoreConfig()
    if not isinstance(core_config, CoreConfig):
        raise ConfigurationError(f"core_config must be a mct.core.CoreConfig; got {type(core_config).__name__}")
    if isinstance(core_config.keep_float, SuggestedFix):  # its bit-widths go to the BitWidthConfig
        core_config = core_config.keep_float.apply(core_config)
    tpc = _platform(core_config, target_platform_capabilities)
    qc, mp = core_config.quantization_config, core_config.mixed_precision_config
    if tpc is not None and isinstance(qc, QuantizationConfig):
        defaults = QuantizationConfig()
        user = {f: getattr(qc, f) for f in PLATFORM_FIELDS if getattr(qc, f) != getattr(defaults, f)}
        tpc = tpc.with_overrides(**{PLATFORM_FIELDS[f]: v for f, v in user.items()})
        qc = dataclasses.replace(
            qc, weights_n_bits=tpc.weights_n_bits, weights_quantization_method=tpc.weights_quantization_method,
            weights_per_channel=tpc.weights_per_channel_threshold, activation_n_bits=tpc.activation_n_bits,
            activation_quantization_method=tpc.activation_quantization_method,
        )  # fmt: skip
    platform_bits = tpc.mixed_precision_weights_bits if tpc is not None else None
    if isinstance(mp, MixedPrecisionQuantizationConfig):
        mp.validate()
        mp = mp.resolved(platform_bits)
    elif isinstance(mp, MixedPrecisionConfig) and platform_bits and mp.candidate_bits == MixedPrecisionConfig().candidate_bits:
        mp = dataclasses.replace(mp, candidate_bits=tuple(platform_bits))
    resolved = dataclasses.replace(
        core_config, quantization_config=qc, mixed_precision_config=mp, target_platform_capabilities=tpc
    )
    resolved.validate()
    for i, rule in enumerate(resolved.debug_config.network_editor):
        if not isinstance(rule, EditRule):
            raise ConfigurationError(
                f"network_editor[{i}] must be a mct.core.network_editor.EditRule(filter=..., action=...); "
                f"got {type(rule).__name__}"
            )
    quantization_edits(resolved)  # every rule checked now, before any work
    return resolved


def quantization_edits(config: CoreConfig) -> list[QuantizationEdit]:
    """What changes the quantization `assign_quantization` decides, in order: the platform,
    the manual bit-widths, the network editor rules, concat threshold update."""
    edits: list[QuantizationEdit] = []
    if isinstance(config.target_platform_capabilities, TargetPlatformCapabilities):
        edits.append(config.target_platform_capabilities)
    if config.bit_width_config is not None:
        edits += bit_width_rules(config.bit_width_config)
    edits += [rule.rule(i) for i, rule in enumerate(config.debug_config.network_editor)]
    if config.quantization_config.concat_threshold_update:
        edits.append(ConcatThresholdUpdate())
    return edits


def _quantized(graph: Graph) -> set[str]:
    return {n.name for n in graph.nodes() if n.quant.weights or n.quant.activation is not None}


def keep_float_notes(plain: Graph, kept: Graph, config: CoreConfig) -> tuple[list[str], dict[str, str]]:
    """What the user is told about the `KeepFloat` rules of ``config``.

    Args:
        plain: the graph quantized with every edit but no KeepFloat rule.
        kept: the same graph with the KeepFloat rules applied (what the call quantizes).
        config: the resolved configuration.

    Returns:
        The warnings (rules that keep every layer float; layers a KeepFloat rule and a
        `BitWidthConfig` both select: KeepFloat wins) and, for the latter, each layer's
        float reason as ``info`` gives it.
    """
    rules = config.keep_float_rules
    if not rules:
        return [], {}
    warnings, reasons = [], {}
    if _quantized(plain) and not _quantized(kept):
        shown = "; ".join(_describe_rule(r) for r in rules)
        warnings.append(
            f"expected KeepFloat to keep some layers float; {shown} keeps every layer float, so nothing is "
            "quantized and the model returned computes as the float model does. A pattern must match a whole "
            "name ('.*' matches every name): narrow the rule to the layers meant, or drop it to quantize."
        )
    if config.bit_width_config is None:
        return warnings, reasons
    for rule in bit_width_rules(config.bit_width_config):
        part = "weights" if rule.weights else "output"
        overlap = []
        for node in plain.nodes():
            if not rule.select.apply(node):
                continue
            carrier = node.name if rule.weights else (node.quant.fused_into or node.name)
            before, after = plain.node(carrier).quant, kept.node(carrier).quant
            if rule.weights and before.weights and not after.weights and after.weights_float_reason == KEPT_FLOAT:
                overlap.append(carrier)
            if rule.activation and before.activation and after.activation is None and (
                after.activation_float_reason == KEPT_FLOAT
            ):
                overlap.append(carrier)
        for name in dict.fromkeys(overlap):
            reasons[name] = f"{KEPT_FLOAT}, which wins over {rule.source}"
        if overlap:
            names = ", ".join(repr(n) for n in dict.fromkeys(overlap))
            warnings.append(
                f"{rule.source} and a KeepFloat rule both select {names}: KeepFloat wins (it applies last), so "
                f"the {part} stay float there. Remove the layer from one of them to say which you mean."
            )
    return warnings, reasons


def _describe_rule(rule: object) -> str:
    given = {f: getattr(rule, f) for f in ("names", "patterns", "types") if getattr(rule, f, ())}
    return "KeepFloat(" + ", ".join(f"{k}={list(v)!r}" for k, v in given.items()) + ")"


def resolve_config(
    core_config: CoreConfig | None, logging_on: bool, target_platform_capabilities: object = None
) -> CoreConfig:
    """The configuration a call runs with: validated, defaults filled in, the target
    platform's choices merged in (`resolve_core_config`), the similarity analysis on or off
    (its default: on when a log folder is set). The user's object is not changed."""
    core_config = resolve_core_config(core_config, target_platform_capabilities)
    debug = core_config.debug_config
    analyze = logging_on if debug.analyze_similarity is None else debug.analyze_similarity
    return dataclasses.replace(core_config, debug_config=dataclasses.replace(debug, analyze_similarity=analyze))
