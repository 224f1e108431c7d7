"""The name a call shows in TensorBoard's run names: given, or what makes the call differ.

    <log folder>/Sequential_20250101-120000/                 a call with every default
    <log folder>/Sequential_float-5-out_20250101-120100/     CoreConfig(keep_float=KeepFloat(names=["5"], weights=False))
    <log folder>/Sequential_w4_20250101-120200/              QuantizationConfig(weights_n_bits=4)
    <log folder>/Sequential_a16-5_w12-6_20250101-120230/     a BitWidthConfig: output of 5 at 16 bits, weights of 6 at 12
    <log folder>/Sequential_with-fix_20250101-120300/        run_name="with fix"

So calls into one log folder differ by more than a time stamp in every run menu.
"""

from __future__ import annotations

import dataclasses
import re
from enum import Enum

from model_compression_toolkit.core.config import CoreConfig, KeepFloat, QuantizationConfig

MAX_CHARS = 48
_SHORT = {  # QuantizationConfig field -> its short form in a name
    "weights_n_bits": "w", "activation_n_bits": "a", "weights_quantization_method": "wq-",
    "activation_quantization_method": "aq-", "weights_error_method": "werr-", "activation_error_method": "aerr-",
    "l_p_value": "p", "histogram_bins": "bins",
}  # fmt: skip


def slug(text: str) -> str:
    """``text`` as a file-name part: letters, digits and ``._+-``; ``-`` for the rest."""
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", str(text)).strip("-._")[:MAX_CHARS].strip("-._")


def _value(value: object) -> str:
    return value.value if isinstance(value, Enum) else str(value)


def _rule(rule: KeepFloat) -> str:
    chosen = [*rule.names, *(f"re-{p}" for p in rule.patterns), *(getattr(t, "__name__", str(t)) for t in rule.types)]
    part = "float-" + "+".join(chosen)
    return part + ("-out" if not rule.weights else "-w" if not rule.activations else "")


def _bits(config: CoreConfig) -> list[str]:
    """``a16-<layer>`` / ``w12-<layer>`` for each manual bit-width of a `BitWidthConfig`
    (a suggested fix's too, once resolved into the config)."""
    bits = config.bit_width_config
    if bits is None:
        return []
    selections = [("a", s) for s in bits.manual_activation_bit_width_selection_list]
    selections += [("w", s) for s in bits.manual_weights_bit_width_selection_list]
    return [f"{kind}{s.bit_width}-{_filter(s.filter)}" for kind, s in selections]


def _filter(f: object) -> str:
    name = getattr(f, "node_name", None)
    if name is not None:
        return str(name)
    return f.describe() if hasattr(f, "describe") else repr(f)


def call_label(run_name: str | None, config: CoreConfig, budget: bool = False, tuned: bool = False) -> str:
    """``run_name`` made safe, or else what differs from the defaults: bits, methods, the
    `KeepFloat` rules, the manual bit-widths, a memory budget (``mp``), tuning (``tuned``);
    empty for a call with every default."""
    if run_name:
        return slug(run_name)
    parts = []
    defaults = QuantizationConfig()
    for f in dataclasses.fields(QuantizationConfig):
        value = getattr(config.quantization_config, f.name)
        if value != getattr(defaults, f.name):
            if f.name == "weights_per_channel":
                parts.append("per-tensor")
            elif f.name == "weights_bias_correction":
                parts.append("no-bias-corr")
            elif f.name == "activation_channel_equalization":
                parts.append("equalized")
            else:
                parts.append(f"{_SHORT.get(f.name, f.name + '-')}{_value(value)}")
    parts += [_rule(rule) for rule in config.keep_float_rules]
    parts += _bits(config)
    parts += ["integer"] if getattr(config, "integer_only", False) else []
    parts += ["mp"] if budget else []
    parts += ["tuned"] if tuned else []
    return slug("_".join(parts))
