"""The suggested fix as data: what it changes, what it costs, what it gives, and every
alternative the search measured (`core.similarity.fix` searches; this module only holds
and words the result).

A fix *restores* when the user's metric, where the call was given one (`FixMetric`), is
within the allowed drop of float with it; without a metric, when every part of the model
output is at its own bar with it (`parts.restore_bar_db`): `RESTORE_DB` for values read as
they are, `DECISION_RESTORE_DB` for probabilities a decision reads at a threshold or by
rank: a detector's class scores just over the cause bound still lose detections (YOLOv8n:
every activation at 16 bits leaves them at 21 dB, on the head concatenation's one grid with
the boxes, and AP50 a point or more under float). The output SQNR a fix gives is that of
the part furthest under its own bar (`parts.OutputImpact`): PicoDet's box distributions at
23 dB pass their bar while its class scores stay under theirs, and the fix does not restore.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, overload

from model_compression_toolkit.core.bit_width import BitWidthConfig
from model_compression_toolkit.core.config import CoreConfig, KeepFloat, keep_float_rules
from model_compression_toolkit.core.node_filters import NodeNameFilter
from model_compression_toolkit.core.similarity.parts import DECISION_RESTORE_DB, RESTORE_DB, restore_bar_db

__all__ = ["DECISION_RESTORE_DB", "RESTORE_DB", "FixAlternative", "SuggestedFix", "alternative_gives"]


@dataclass
class FixAlternative:
    """One fix the report tried for the causes, what it gives and what it costs.

    Attributes:
        name: ``"equalize channels"``, ``"more bits"``, ``"keep float"``.
        change: what it changes, in words.
        output_sqnr_db: the model output's SQNR with it (dB, its worst part); None: not measured.
        weights_bytes / activation_bytes: what it adds to the weights memory and to the
            activation memory of one sample (bytes, negative when it saves).
        float_layers: the layers it keeps float (output or weights).
        allowed: whether the target allows it; not allowed: listed, never suggested.
        chosen: whether it is the suggested fix.
        metric: the user's metric with it (`FixMetric`); None: no metric given.
        restores: whether it restores (the metric within the allowed drop, else the output
            at `RESTORE_DB`); None: not measured.
    """

    name: str
    change: str
    output_sqnr_db: float | None = None
    weights_bytes: float = 0.0
    activation_bytes: float = 0.0
    float_layers: int = 0
    allowed: bool = True
    chosen: bool = False
    metric: float | None = None
    restores: bool | None = None

    def gives(self) -> str:
        """``"metric 0.955, output SQNR 21.0 dB"``: what it gave."""
        return alternative_gives(self.metric, self.output_sqnr_db)

    def line(self) -> str:
        if not self.allowed:
            return f"{self.name}: {self.change}: not allowed on this target"
        cost = f"{self.weights_bytes / 1024:+.1f} KiB weights, {self.activation_bytes / 1024:+.1f} KiB activations"
        floats = f", {self.float_layers} float" if self.float_layers else ""
        verdict = {True: ", restores", False: ", does not restore", None: ""}[self.restores]
        mark = " <- suggested" if self.chosen else ""
        return f"{self.name}: {self.change}: {self.gives()}{verdict}; {cost}{floats}{mark}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SuggestedFix(Sequence):
    """What to keep float to remove the causes found, and what that costs.

    A sequence of `KeepFloat` rules: ``CoreConfig(keep_float=fix)`` quantizes with it, and
    ``CoreConfig(keep_float=[*my_rules, *fix])`` adds it to rules of one's own.

    Attributes:
        activations: layers whose outputs stay float.
        weights: layers whose weights stay float.
        weight_bits: layers whose weights get more bits, and how many.
        activation_bits: layers whose outputs get more bits, and how many.
        activation_n_bits / weights_n_bits: every activation / weight at these bits (a loss
            spread over many quantizers); None: unchanged.
        spread: when the loss is spread over many quantizers, what was measured, in words.
        weights_bytes_before / weights_bytes_after: the weights memory without and with the fix.
        activation_bytes_before / activation_bytes_after: the activation memory of one
            sample without and with the fix.
        output_sqnr_db_before / output_sqnr_db_after: the model output's SQNR (dB) on the
            analysis's impact samples, quantized as it was and with the fix: the part
            furthest under its own bar (`parts.OutputImpact`); None when not measured.
        output_probability: whether that part with the fix holds probabilities a decision
            reads (judged at `DECISION_RESTORE_DB`, any other at `RESTORE_DB`).
        metric_before / metric_after: the user's metric (`FixMetric`) quantized as it was
            and with the fix; None: no metric given.
        metric_restores: whether the metric with the fix is within the allowed drop.
        compensated_rounding: the fix rounds the kernels with their errors compensated
            (``QuantizationConfig(weights_compensated_rounding=True)``: the same grids,
            other roundings; integer, no memory).
        equalize: the fix equalizes channels
            (``QuantizationConfig(activation_channel_equalization=True)``).
        equalized_pairs: the layers it equalizes, ``"conv2 -> act2 -> pool -> conv3"``.
        alternatives: every fix tried for the causes, what each gives and costs.
        integer_only: the fix was chosen for an integer-only target (nothing float).
        quantize_outputs: the fix was chosen for a call that puts the model's outputs on
            grids on a target that runs float (``CoreConfig(quantize_outputs=True)``); its
            snippet and `apply` say so too (a bit-width for an output needs its grid).
        target: that target, in words.
        note: what to know beyond the fix (no fix tried restores, and what each gave).
        candidates: every fix measured, as fixes (``alternatives`` words them): apply any of
            them as this one (``fix.candidates[i].apply(core_config)``).
    """

    activations: list[str] = field(default_factory=list)
    weights: list[str] = field(default_factory=list)
    weight_bits: dict[str, int] = field(default_factory=dict)
    activation_bits: dict[str, int] = field(default_factory=dict)
    activation_n_bits: int | None = None
    weights_n_bits: int | None = None
    spread: str | None = None
    weights_bytes_before: float = 0.0
    weights_bytes_after: float = 0.0
    activation_bytes_before: float = 0.0
    activation_bytes_after: float = 0.0
    output_sqnr_db_before: float | None = None
    output_sqnr_db_after: float | None = None
    output_probability: bool = False
    metric_before: float | None = None
    metric_after: float | None = None
    metric_restores: bool | None = None
    compensated_rounding: bool = False
    equalize: bool = False
    equalized_pairs: list[str] = field(default_factory=list)
    alternatives: list[FixAlternative] = field(default_factory=list)
    integer_only: bool = False
    target: str | None = None
    note: str | None = None
    quantize_outputs: bool = False
    candidates: list[SuggestedFix] = field(default_factory=list, repr=False, compare=False)

    @property
    def rules(self) -> list[KeepFloat]:
        return keep_float_rules(self.activations, self.weights)

    @overload
    def __getitem__(self, index: int) -> KeepFloat: ...

    @overload
    def __getitem__(self, index: slice) -> list[KeepFloat]: ...

    def __getitem__(self, index: int | slice) -> KeepFloat | list[KeepFloat]:
        return self.rules[index]

    def __len__(self) -> int:
        return len(self.rules)

    def __bool__(self) -> bool:
        return bool(
            self.activations or self.weights or self.weight_bits or self.activation_bits
            or self.activation_n_bits or self.weights_n_bits or self.equalize or self.compensated_rounding
        )  # fmt: skip

    def bit_width_config(self, base: BitWidthConfig | None = None) -> BitWidthConfig:
        """``base`` (or an empty `BitWidthConfig`) with this fix's bit-widths added after its
        own selections (a later selection of a layer wins)."""
        config = copy.deepcopy(base) if base is not None else BitWidthConfig()
        for name, bits in self.weight_bits.items():
            config.set_manual_weights_bit_width(NodeNameFilter(name), bits)
        for name, bits in self.activation_bits.items():
            config.set_manual_activation_bit_width(NodeNameFilter(name), bits)
        return config

    def apply(self, core_config: CoreConfig | None = None) -> CoreConfig:
        """A copy of ``core_config`` (or of the defaults) with the fix added: its `KeepFloat`
        rules after the config's own, its bit-widths after the config's own, the bits
        of every activation or weight where the loss is spread, its equalization and its
        compensated rounding."""
        config = core_config if core_config is not None else CoreConfig()
        own = [] if config.keep_float is self else config.keep_float_rules
        changed = self.weight_bits or self.activation_bits
        bits = self.bit_width_config(config.bit_width_config) if changed else config.bit_width_config
        qc = config.quantization_config
        if self.activation_n_bits is not None:
            qc = dataclasses.replace(qc, activation_n_bits=self.activation_n_bits)
        if self.weights_n_bits is not None:
            qc = dataclasses.replace(qc, weights_n_bits=self.weights_n_bits)
        if self.equalize:
            qc = dataclasses.replace(qc, activation_channel_equalization=True)
        if self.compensated_rounding:
            qc = dataclasses.replace(qc, weights_compensated_rounding=True)
        outputs = True if self.quantize_outputs and config.quantize_outputs is None else config.quantize_outputs
        return dataclasses.replace(
            config,
            keep_float=[*own, *self.rules],
            bit_width_config=bits,
            quantization_config=qc,
            quantize_outputs=outputs,
        )

    def code(self) -> str:
        """The fix as Python to paste after one's own PTQ call: it defines every name it
        uses and ends with the ``core_config`` to quantize with again."""
        if not self:
            return "# nothing to change: no quantizer damages the output on its own"
        lines, args = ["import model_compression_toolkit as mct", ""], []
        if self.weight_bits or self.activation_bits:
            lines.append("bit_width_config = mct.core.BitWidthConfig()")
            name_filter = "mct.core.network_editor.NodeNameFilter"
            for name, bits in self.activation_bits.items():
                lines.append(
                    f"bit_width_config.set_manual_activation_bit_width({name_filter}({name!r}), {bits})"
                )
            for name, bits in self.weight_bits.items():
                lines.append(
                    f"bit_width_config.set_manual_weights_bit_width({name_filter}({name!r}), {bits})"
                )
            args.append("bit_width_config=bit_width_config")
        rules = []
        if self.activations:
            rules.append(f"mct.core.KeepFloat(names={list(self.activations)!r}, weights=False)")
        if self.weights:
            rules.append(f"mct.core.KeepFloat(names={list(self.weights)!r}, activations=False)")
        if rules:
            args.append("keep_float=[" + ", ".join(rules) + "]")
        n_bits = {"activation_n_bits": self.activation_n_bits, "weights_n_bits": self.weights_n_bits}
        given = [f"{k}={v}" for k, v in n_bits.items() if v is not None]
        if self.equalize:
            given.append("activation_channel_equalization=True")
        if self.compensated_rounding:
            given.append("weights_compensated_rounding=True")
        if given:
            args.append(f"quantization_config=mct.core.QuantizationConfig({', '.join(given)})")
        if self.integer_only:
            args.append("integer_only=True")
        elif self.quantize_outputs:
            args.append("quantize_outputs=True")
        lines.append("core_config = mct.core.CoreConfig(" + ", ".join(args) + ")")
        return "\n".join(lines)

    @property
    def restores(self) -> bool | None:
        """Whether the fix gives the task back: the user's metric within the allowed drop
        where one was given, else every output part at its own bar: the part furthest under
        its bar at `restore_db` or more (None: not measured)."""
        if self.metric_restores is not None:
            return self.metric_restores
        return None if self.output_sqnr_db_after is None else self.output_sqnr_db_after >= self.restore_db

    @property
    def restore_db(self) -> float:
        """The output SQNR (dB) that restores: `DECISION_RESTORE_DB` where the part furthest
        under its bar holds probabilities a decision reads, else `RESTORE_DB`."""
        return restore_bar_db(self.output_probability)

    @property
    def margin_after(self) -> float:
        """How far (dB) the output with the fix is over what restores it (`restore_db`); the
        floor of the SQNR scale where not measured. Candidates whose worst parts differ (a
        box part at 23 dB, class scores at 25 dB) compare by it, not by their SQNRs."""
        return -1e9 if self.output_sqnr_db_after is None else self.output_sqnr_db_after - self.restore_db

    @property
    def sqnr_after(self) -> float:
        """``output_sqnr_db_after`` (dB), the floor of the SQNR scale where not measured."""
        return -1e9 if self.output_sqnr_db_after is None else self.output_sqnr_db_after

    def gives(self) -> str:
        """What it gave, in words: ``"metric 0.955, output SQNR 21.0 dB"``."""
        return alternative_gives(self.metric_after, self.output_sqnr_db_after)

    def effects(self) -> list[str]:
        """What the fix costs in memory and what it gives, a sentence a line; the note last."""
        cost = self.weights_bytes_after - self.weights_bytes_before
        act = self.activation_bytes_after - self.activation_bytes_before
        lines = [
            f"costs {cost / 1024:+.1f} KiB of weights ({self.weights_bytes_before / 1024:.1f} -> "
            f"{self.weights_bytes_after / 1024:.1f} KiB) and {act / 1024:+.1f} KiB of activations per sample"
        ]
        if self.output_sqnr_db_before is not None and self.output_sqnr_db_after is not None:
            lines.append(
                f"output SQNR {self.output_sqnr_db_before:.1f} dB -> {self.output_sqnr_db_after:.1f} dB with it"
            )
        if self.metric_before is not None and self.metric_after is not None:
            lines.append(f"your metric {self.metric_before:.4g} -> {self.metric_after:.4g} with it")
        if self.equalize:
            lines.append(
                "equalizes the channels of " + "; ".join(self.equalized_pairs) + " (exact in float, integer)"
            )
        if self.compensated_rounding:
            lines.append("rounds the kernels with their errors compensated (the same grids: integer, no memory)")
        note = self.said_note
        if note:
            lines.append(note)
        return lines

    @property
    def said_note(self) -> str | None:
        """``note``; where the search left none and the fix does not restore (a loss spread
        over many quantizers, no cause), the same plain words: no fix tried restores, and
        what each gave (``alternatives``)."""
        if self.note or not self or self.restores is not False:
            return self.note
        tried = [a for a in self.alternatives if a.allowed and a.restores is not None]
        bar = "your metric within the allowed drop of float" if self.metric_restores is not None else PARTS_BAR
        gave = "; ".join(f"{a.change} gave {a.gives()}" for a in tried) or f"this fix gave {self.gives()}"
        return no_restore_note(bar, gave)

    def summary(self) -> str:
        """The fix, what it costs in memory and what it gives, in a few lines."""
        if not self:
            none = "suggested fix: none (no quantizer damages the output on its own)"
            tried = ["  tried: " + a.line() for a in self.alternatives]
            return "\n".join(
                [none if self.note is None else "suggested fix: none", *tried, *filter(None, [self.note])]
            )
        lines = [f"the loss is spread: {self.spread}"] if self.spread else []
        lines.append("suggested fix (CoreConfig(keep_float=fix) applies it, or paste):")
        lines += ["  " + line for line in self.code().splitlines() if line]
        lines += ["  " + line for line in self.effects()]
        if self.alternatives:
            lines.append("  tried" + (f" (target: {self.target})" if self.target else "") + ":")
            lines += ["    " + a.line() for a in self.alternatives]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "activations": list(self.activations),
            "weights": list(self.weights),
            "weight_bits": dict(self.weight_bits),
            "activation_bits": dict(self.activation_bits),
            "activation_n_bits": self.activation_n_bits,
            "weights_n_bits": self.weights_n_bits,
            "spread": self.spread,
            "code": self.code(),
            "weights_bytes_before": self.weights_bytes_before,
            "weights_bytes_after": self.weights_bytes_after,
            "activation_bytes_before": self.activation_bytes_before,
            "activation_bytes_after": self.activation_bytes_after,
            "output_sqnr_db_before": self.output_sqnr_db_before,
            "output_sqnr_db_after": self.output_sqnr_db_after,
            "output_probability": self.output_probability,
            "metric_before": self.metric_before,
            "metric_after": self.metric_after,
            "restores": self.restores,
            "equalize": self.equalize,
            "compensated_rounding": self.compensated_rounding,
            "equalized_pairs": list(self.equalized_pairs),
            "alternatives": [a.to_dict() for a in self.alternatives],
            "integer_only": self.integer_only,
            "quantize_outputs": self.quantize_outputs,
            "target": self.target,
            "note": self.said_note,
        }


# what restores without the user's metric, in words
PARTS_BAR = (
    f"every output part at its own bar: {RESTORE_DB:g} dB, {DECISION_RESTORE_DB:g} dB for probabilities a "
    "decision reads"
)


def no_restore_note(bar: str, gave: str, integer_only: bool = False) -> str:
    """``"No fix tried restores (<bar>): <gave>. ..."``: what the summary says when no
    candidate restores, with what each gave."""
    return (
        f"No fix tried restores ({bar}): {gave}. The suggestion is the one that gives the most; check the "
        "task metric" + (", or quantize for a target that allows more bits." if integer_only else ".")
    )


def alternative_gives(metric: float | None, sqnr_db: float | None) -> str:
    """``"metric 0.955, output SQNR 21.0 dB"`` (the metric only where one was given)."""
    sqnr = "output SQNR not measured" if sqnr_db is None else f"output SQNR {sqnr_db:.1f} dB"
    return sqnr if metric is None else f"metric {metric:.4g}, {sqnr}"
