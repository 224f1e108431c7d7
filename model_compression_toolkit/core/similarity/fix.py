"""The smallest change that removes the causes the analysis found.

A cause that is an activation gets 16 bits where 16 bits make it harmless (its output SQNR
alone at least `CANDIDATE_DB`: a concatenation of box coordinates in pixels and class
scores in 0-1 keeps its scores at 16 bits), else keeps that layer's *output* float
(``KeepFloat(..., weights=False)``). A cause that is a layer's weights gets more bits, the fewest of
`MORE_BITS` with which those weights alone no longer damage the output (their output SQNR
alone at least `CANDIDATE_DB`), or, if none does, is kept float (``KeepFloat(...,
activations=False)``). Linked causes go together: an outlier channel ruins the grid of the activation it is in and of
every later quantizer of the same values (a max pooling after it), so each is a cause on
its own and the fix names them all. The fix is then measured, the model quantized with it
on the same samples: if the output is still damaged, the next entries in rank order join
it, a few at most.

When no quantizer damages the output on its own but all of them together do (a deep
network whose every quantizer keeps 30 dB or more, the error growing over hundreds of
them), no ranking of single quantizers can name a cause: the loss is *spread*. The fix
is then the setting that restores the output everywhere, measured: every activation, or
every weight, at 8 bits (where they have fewer) or 16, the cheapest of those that lift the
output to `CANDIDATE_DB` (or the best, when none does).

    q_model, info = mct.ptq.pytorch_post_training_quantization(model, data_gen)
    fix = info.similarity.suggested_fix()
    print(fix.code())        # mct.core.KeepFloat(names=['act2', 'pool'], weights=False) ...
    q_model, info = mct.ptq.pytorch_post_training_quantization(
        model, data_gen, core_config=mct.core.CoreConfig(keep_float=fix))

``CoreConfig(keep_float=fix)`` applies all of it: the `KeepFloat` rules, and the bits, which
the call's configuration resolution (`core.resolution`) adds to its `BitWidthConfig`;
``fix.apply(core_config)`` gives the same as a `CoreConfig` of one's own with the fix added.

What the fix may use is the target's (`fix_menu.FixMenu`): on an integer-only target
(``CoreConfig(integer_only=True)``, a ``target_platform_capabilities``) nothing stays float
and no bit-width the target lacks is asked for. A cause that shows an outlier channel is
first tried with the channels equalized (`core.equalization`: exact in float, no bytes,
integer); the report lists every alternative measured, and on an integer-only target
suggests the cheapest that restores the output, or says plainly that nothing integer does.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np

from model_compression_toolkit.core.bit_width import BitWidthConfig
from model_compression_toolkit.core.calibration.quantizers import symmetric_grid, uniform_grid
from model_compression_toolkit.core.calibration.statistics import NodeStatistics
from model_compression_toolkit.core.calibration.thresholds import fill_activation_config, fill_weights_config
from model_compression_toolkit.core.config import CoreConfig, KeepFloat, keep_float_rules
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.memory import graph_memory, total
from model_compression_toolkit.core.node_filters import NodeNameFilter
from model_compression_toolkit.core.similarity.causes import (
    ACTIVATION,
    CANDIDATE_DB,
    CAUSE_DB,
    ImpactProbe,
    QuantizerEntry,
    isolate,
    without,
)
from model_compression_toolkit.core.similarity.fix_menu import (
    MORE_ACTIVATION_BITS,
    MORE_BITS,
    FixAlternative,
    FixMenu,
    alternative,
    choose,
    equalized_variant,
    has_outlier_channels,
    not_allowed,
    pair_text,
)

__all__ = ["MORE_ACTIVATION_BITS", "MORE_BITS", "FixMenu", "SuggestedFix", "suggest_fix"]
MAX_EXTRA = 3  # entries added to a fix that does not yet lift the output above CAUSE_DB
SPREAD_BITS = (8, 16)  # every activation (or weight) at one of these: the fix of a spread loss


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
            analysis's impact samples, quantized as it was and with the fix; None when
            not measured.
        equalize: the fix equalizes channels
            (``QuantizationConfig(activation_channel_equalization=True)``).
        equalized_pairs: the layers it equalizes, ``"conv2 -> act2 -> pool -> conv3"``.
        alternatives: every fix tried for the causes, what each gives and costs.
        integer_only: the fix was chosen for an integer-only target (nothing float).
        target: that target, in words.
        note: what to know beyond the fix (nothing integer restores the output).
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
    equalize: bool = False
    equalized_pairs: list[str] = field(default_factory=list)
    alternatives: list[FixAlternative] = field(default_factory=list)
    integer_only: bool = False
    target: str | None = None
    note: str | None = None

    @property
    def rules(self) -> list[KeepFloat]:
        return keep_float_rules(self.activations, self.weights)

    @overload
    def __getitem__(self, index: int) -> KeepFloat: ...

    @overload
    def __getitem__(self, index: slice) -> list[KeepFloat]: ...

    def __getitem__(self, index):
        return self.rules[index]

    def __len__(self) -> int:
        return len(self.rules)

    def __bool__(self) -> bool:
        return bool(
            self.activations or self.weights or self.weight_bits or self.activation_bits
            or self.activation_n_bits or self.weights_n_bits or self.equalize
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
        of every activation or weight where the loss is spread, and its equalization."""
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
        return dataclasses.replace(config, keep_float=[*own, *self.rules], bit_width_config=bits, quantization_config=qc)

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
                lines.append(f"bit_width_config.set_manual_activation_bit_width({name_filter}({name!r}), {bits})")
            for name, bits in self.weight_bits.items():
                lines.append(f"bit_width_config.set_manual_weights_bit_width({name_filter}({name!r}), {bits})")
            args.append("bit_width_config=bit_width_config")
        rules = []
        if self.activations:
            rules.append(f"mct.core.KeepFloat(names={list(self.activations)!r}, weights=False)")
        if self.weights:
            rules.append(f"mct.core.KeepFloat(names={list(self.weights)!r}, activations=False)")
        if rules:
            args.append("keep_float=[" + ", ".join(rules) + "]")
        bits = {"activation_n_bits": self.activation_n_bits, "weights_n_bits": self.weights_n_bits}
        given = [f"{k}={v}" for k, v in bits.items() if v is not None]
        if self.equalize:
            given.append("activation_channel_equalization=True")
        if given:
            args.append(f"quantization_config=mct.core.QuantizationConfig({', '.join(given)})")
        if self.integer_only:
            args.append("integer_only=True")
        lines.append("core_config = mct.core.CoreConfig(" + ", ".join(args) + ")")
        return "\n".join(lines)

    @property
    def restores(self) -> bool | None:
        """Whether the fix lifts the output to `CAUSE_DB` or more (None: not measured)."""
        return None if self.output_sqnr_db_after is None else self.output_sqnr_db_after >= CAUSE_DB

    def effects(self) -> list[str]:
        """What the fix costs in memory and what it gives, a sentence a line."""
        cost = self.weights_bytes_after - self.weights_bytes_before
        act = self.activation_bytes_after - self.activation_bytes_before
        lines = [
            f"costs {cost / 1024:+.1f} KiB of weights ({self.weights_bytes_before / 1024:.1f} -> "
            f"{self.weights_bytes_after / 1024:.1f} KiB) and {act / 1024:+.1f} KiB of activations per sample"
        ]
        if self.output_sqnr_db_before is not None and self.output_sqnr_db_after is not None:
            lines.append(f"output SQNR {self.output_sqnr_db_before:.1f} dB -> {self.output_sqnr_db_after:.1f} dB with it")
        if self.equalize:
            lines.append("equalizes the channels of " + "; ".join(self.equalized_pairs) + " (exact in float, integer)")
        if self.restores is False and self.note is None:
            lines.append(
                f"it does NOT restore the output (under {CAUSE_DB:g} dB with it): the causes found are not the "
                "whole loss; check the task metric, and keep more of the ranked quantizers float or at 16 bits"
            )
        return lines

    def summary(self) -> str:
        """The fix, what it costs in memory, and what it gives, in a few lines."""
        if not self:
            none = "suggested fix: none (no quantizer damages the output on its own)"
            tried = ["  tried: " + a.line() for a in self.alternatives]
            return "\n".join([none if self.note is None else "suggested fix: none", *tried, *filter(None, [self.note])])
        lines = [f"the loss is spread: {self.spread}"] if self.spread else []
        lines.append("suggested fix (CoreConfig(keep_float=fix) applies it, or paste):")
        lines += ["  " + line for line in self.code().splitlines() if line]
        lines += ["  " + line for line in self.effects()]
        if self.alternatives:
            lines.append("  tried" + (f" (target: {self.target})" if self.target else "") + ":")
            lines += ["    " + a.line() for a in self.alternatives]
        if self.note:
            lines.append("  " + self.note)
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
            "equalize": self.equalize,
            "equalized_pairs": list(self.equalized_pairs),
            "alternatives": [a.to_dict() for a in self.alternatives],
            "integer_only": self.integer_only,
            "target": self.target,
            "note": self.note,
        }


def suggest_fix(
    entries: Sequence[QuantizerEntry],
    graph: Graph,
    probe: ImpactProbe | None,
    l_p_value: float = 2.0,
    stats: Mapping[str, NodeStatistics] | None = None,
    menu: FixMenu | None = None,
) -> SuggestedFix:
    """The fix the target allows (``menu``; None: any) for the causes among ``entries``:
    the per-layer fix (`layer_fix`) and, where a cause shows an outlier channel, the
    channels equalized, each measured with ``probe``; the cheapest that restores the output
    (`CAUSE_DB`), the alternatives listed with it.

    The menu, cheapest first: ``equalize channels -> 16-bit activations -> more weight bits
    -> keep float``, each but the first only as the target allows. On an integer-only
    target the cheapest that restores is suggested, and when nothing integer restores, the
    best integer fix, with a note that says so; elsewhere the per-layer fix stays the
    suggestion when it restores (`fix_menu.choose`).
    """
    menu = menu or FixMenu()
    stats = stats or {}
    fix = layer_fix(entries, graph, probe, l_p_value, stats, menu)
    fix.integer_only, fix.target = menu.integer_only, menu.target
    if probe is None or not any(e.cause for e in entries):
        return fix
    before = fix.output_sqnr_db_before if fix.output_sqnr_db_before is not None else probe.output_sqnr_db(graph)
    tried = [fix] if fix else []
    if has_outlier_channels(entries):
        variant = equalized_variant(graph, probe, l_p_value)
        if variant is not None:
            eq_graph, pairs = variant
            eq = SuggestedFix(equalize=True, equalized_pairs=[pair_text(p) for p in pairs])
            _cost(graph, eq, l_p_value, stats, into=eq)
            eq.output_sqnr_db_before, eq.output_sqnr_db_after = before, probe.output_sqnr_db(eq_graph)
            tried.insert(0, eq)
    best = choose(tried, menu) if tried else fix
    best.integer_only, best.target = menu.integer_only, menu.target
    best.alternatives = [alternative(f, f is best) for f in tried] + not_allowed(entries, graph, menu)
    if menu.integer_only and not best.restores:
        found = (
            f"the best integer fix measured leaves {best.output_sqnr_db_after:.1f} dB"
            if tried
            else f"no integer change the target allows applies to these causes (the output stays at {before:.1f} dB)"
        )
        best.note = (
            f"nothing integer restores the output on this target ({menu.target}): {found}, under {CAUSE_DB:g} dB; "
            "no layer is kept float, since the target runs integers only. Check the task metric, or quantize for "
            "a target that allows more bits."
        )
    return best


def layer_fix(
    entries: Sequence[QuantizerEntry],
    graph: Graph,
    probe: ImpactProbe | None,
    l_p_value: float = 2.0,
    stats: Mapping[str, NodeStatistics] | None = None,
    menu: FixMenu | None = None,
) -> SuggestedFix:
    """The causes among ``entries`` (ranked) fixed, measured with ``probe`` and grown by the
    next entries in rank order while the output stays under `CAUSE_DB` (activations given
    16 bits each that do not restore it together are kept float instead); without a cause,
    the setting that restores a spread loss (see the module doc).

    Args:
        entries: every quantizer, ranked worst first (`causes.measure_impacts`).
        graph: the quantized graph the entries belong to.
        probe: runs variants on the impact samples; None: weights causes are kept float,
            the fix is not measured or grown.
        l_p_value: the p of the ``LP`` error method, for the grids of more bits.
        stats: the collected statistics by node: activation grids of more bits are chosen
            from them (without, the threshold stays and only the step shrinks).
    """
    stats, menu = stats or {}, menu or FixMenu()
    chosen = [e for e in entries if e.cause]
    bits = {e.name: _enough_bits(graph, e, probe, l_p_value, menu) for e in chosen if e.kind != ACTIVATION}
    act_bits = {e.name: _enough_activation_bits(graph, e, probe, stats, menu) for e in chosen if e.kind == ACTIVATION}
    fix = _fix(graph, chosen, bits, act_bits, l_p_value, stats, menu)
    if probe is None:
        return fix
    before = probe.output_sqnr_db(graph)
    if not chosen:  # nothing harmful alone: a loss spread over many quantizers, if any
        spread = _spread_fix(entries, graph, probe, before, l_p_value, stats, menu) if before < CAUSE_DB else None
        return spread if spread is not None else fix
    fix.output_sqnr_db_before = before
    fix.output_sqnr_db_after = probe.output_sqnr_db(fixed_graph(graph, fix, l_p_value, stats))
    if fix.output_sqnr_db_after < CAUSE_DB and fix.activation_bits and not menu.integer_only:  # 16 bits each alone
        act_bits = dict.fromkeys(act_bits)
        floated = _fix(graph, chosen, bits, act_bits, l_p_value, stats, menu)
        floated.output_sqnr_db_before = before
        floated.output_sqnr_db_after = probe.output_sqnr_db(fixed_graph(graph, floated, l_p_value, stats))
        if floated.output_sqnr_db_after > fix.output_sqnr_db_after:
            fix = floated
    rest = [e for e in entries if not e.cause and e.output_sqnr_db is not None]
    for entry in rest[:MAX_EXTRA]:
        if fix.output_sqnr_db_after >= CAUSE_DB:
            break
        if entry.kind != ACTIVATION:
            bits[entry.name] = _enough_bits(graph, entry, probe, l_p_value, menu)
        else:
            act_bits[entry.name] = _enough_activation_bits(graph, entry, probe, stats, menu)
        grown = _fix(graph, [*chosen, entry], bits, act_bits, l_p_value, stats, menu)
        grown.output_sqnr_db_before = fix.output_sqnr_db_before
        grown.output_sqnr_db_after = probe.output_sqnr_db(fixed_graph(graph, grown, l_p_value, stats))
        if grown.output_sqnr_db_after < fix.output_sqnr_db_after + 1.0:
            break  # the next entries in rank order do not add up to a fix: stop paying for passes
        chosen.append(entry)
        fix = grown
    if fix.output_sqnr_db_after < CAUSE_DB:  # the causes are not the whole loss: is it spread?
        spread = _spread_fix(
            entries, graph, probe, before, l_p_value, stats, menu, causes=(len(chosen), fix.output_sqnr_db_after)
        )
        if spread is not None and spread.output_sqnr_db_after > fix.output_sqnr_db_after + 3.0:
            return spread
    return fix


def _spread_fix(
    entries: Sequence[QuantizerEntry],
    graph: Graph,
    probe: ImpactProbe,
    before: float,
    l_p_value: float,
    stats: Mapping[str, NodeStatistics],
    menu: FixMenu,
    causes: tuple[int, float] | None = None,
) -> SuggestedFix | None:
    """Every activation, or every weight, at `SPREAD_BITS` (8 first where they have fewer):
    the cheapest that lifts the output to `CANDIDATE_DB`, else the best; None if none gains
    3 dB. ``causes``: how many causes a fix of their own did not restore, and the output
    SQNR with that fix (dB)."""
    acts = [n for n in graph.nodes() if n.quant.activation is not None and n.quant.activation.grid is not None]
    weighted = [n for n in graph.nodes() if any(c.grid is not None for c in n.quant.weights.values())]
    act_now = max((n.quant.activation.n_bits for n in acts), default=SPREAD_BITS)
    w_now = max((c.n_bits for n in weighted for c in n.quant.weights.values()), default=SPREAD_BITS)
    tried = []
    allowed_act = [b for b in SPREAD_BITS if b <= (menu.activation_bits or max(SPREAD_BITS[0], act_now))]
    allowed = {True: allowed_act, False: [b for b in SPREAD_BITS if b in menu.weight_bits]}
    for is_act, now, nodes in ((True, act_now, acts), (False, w_now, weighted)):
        for bits in (b for b in allowed[is_act] if b > now):  # the fewest bits that restore, per kind
            layers = {n.name: bits for n in nodes}
            fix = SuggestedFix(activation_n_bits=bits) if is_act else SuggestedFix(weights_n_bits=bits)
            variant = SuggestedFix(activation_bits=layers) if is_act else SuggestedFix(weight_bits=layers)
            _cost(graph, variant, l_p_value, stats, into=fix)
            fix.output_sqnr_db_before = before
            fix.output_sqnr_db_after = probe.output_sqnr_db(fixed_graph(graph, variant, l_p_value, stats))
            tried.append(fix)
            if fix.output_sqnr_db_after >= CANDIDATE_DB:
                break
    good = [f for f in tried if f.output_sqnr_db_after >= CANDIDATE_DB]
    best = min(good, key=_bytes) if good else max(tried, key=lambda f: f.output_sqnr_db_after, default=None)
    if best is None or best.output_sqnr_db_after < before + 3.0:
        return None
    alone = [e.own_db for e in entries]
    kinds = Counter(n.layer_type for n in graph.nodes() if n.quant.activation is not None)
    measured = ", ".join(
        f"every {'activation' if f.activation_n_bits else 'weight'} at "
        f"{f.activation_n_bits or f.weights_n_bits} bits: {f.output_sqnr_db_after:.1f} dB"
        for f in tried
    )
    alone_text = (
        f"and fixing the {causes[0]} quantizers that damage it alone gives only {causes[1]:.1f} dB"
        if causes
        else f"though no quantizer alone damages it ({len(entries)} quantizers, the median keeping "
        f"{float(np.median(alone)) if alone else 0.0:.0f} dB of its own)"
    )
    best.spread = (
        f"the output keeps {before:.1f} dB with every quantizer on, {alone_text}; "
        f"the error accumulates over {sum(kinds.values())} quantized activations, most in "
        + ", ".join(f"{t} ({c})" for t, c in kinds.most_common(3))
        + f". Measured: {measured}."
    )
    return best


def _bytes(fix: SuggestedFix) -> float:
    return fix.weights_bytes_after + fix.activation_bytes_after


def with_weight_bits(graph: Graph, layers: dict[str, int], l_p_value: float) -> Graph:
    """A copy of ``graph`` whose ``layers`` have their weights at those bits (grids refilled)."""
    out = graph.copy()
    for name, bits in layers.items():
        node = out.node(name)
        for wname, cfg in node.quant.weights.items():
            cfg.n_bits = bits
            fill_weights_config(cfg, node.weights[wname], l_p_value)
    return out


def with_activation_bits(
    graph: Graph, layers: dict[str, int], stats: Mapping[str, NodeStatistics], l_p_value: float = 2.0
) -> Graph:
    """A copy of ``graph`` whose ``layers`` have their outputs at those bits: the grid chosen
    again from the layer's statistics, or (without them) the same range in finer steps."""
    out = graph.copy()
    for name, bits in layers.items():
        cfg = out.node(name).quant.activation
        if cfg is None or cfg.grid is None:
            continue
        cfg.n_bits = bits
        if name in stats:
            fill_activation_config(cfg, stats[name], l_p_value)
        elif cfg.threshold is not None:
            cfg.grid = symmetric_grid(cfg.threshold, bits, bool(cfg.signed))
        elif cfg.range_min is not None and cfg.range_max is not None:
            cfg.grid = uniform_grid(cfg.range_min, cfg.range_max, bits)
    return out


def fixed_graph(
    graph: Graph, fix: SuggestedFix, l_p_value: float, stats: Mapping[str, NodeStatistics] | None = None
) -> Graph:
    """``graph`` as the fix quantizes it."""
    out = with_weight_bits(graph, fix.weight_bits, l_p_value)
    out = with_activation_bits(out, fix.activation_bits, stats or {}, l_p_value)
    return without(out, fix.activations, fix.weights)


def _enough_bits(
    graph: Graph, entry: QuantizerEntry, probe: ImpactProbe | None, l_p_value: float, menu: FixMenu
) -> int | None:
    """The fewest of the menu's weight bits (above the layer's) with which its weights alone
    keep the output SQNR at `CANDIDATE_DB` or more; None: none does (the weights stay
    float, or as they are on an integer-only target)."""
    if probe is None:
        return None
    for bits in menu.more_weight_bits(entry.bits):
        variant = isolate(with_weight_bits(graph, {entry.name: bits}, l_p_value), entry)
        if probe.output_sqnr_db(variant, at=entry.name) >= CANDIDATE_DB:
            return bits
    return None


def _enough_activation_bits(
    graph: Graph,
    entry: QuantizerEntry,
    probe: ImpactProbe | None,
    stats: Mapping[str, NodeStatistics],
    menu: FixMenu,
) -> int | None:
    """`MORE_ACTIVATION_BITS` if the target allows them there and with them the activation
    alone keeps the output SQNR at `CANDIDATE_DB` or more (a grid of finer steps, kept
    integer); None: it stays float (or as it is on an integer-only target)."""
    if probe is None or entry.bits >= MORE_ACTIVATION_BITS:
        return None
    if not menu.allows_activation_bits(graph, entry.name, MORE_ACTIVATION_BITS):
        return None
    variant = isolate(with_activation_bits(graph, {entry.name: MORE_ACTIVATION_BITS}, stats), entry)
    return MORE_ACTIVATION_BITS if probe.output_sqnr_db(variant, at=entry.name) >= CANDIDATE_DB else None


def _fix(
    graph: Graph,
    chosen: Sequence[QuantizerEntry],
    bits: dict[str, int | None],
    act_bits: dict[str, int | None],
    l_p_value: float,
    stats: Mapping[str, NodeStatistics],
    menu: FixMenu,
) -> SuggestedFix:
    weighted = [e for e in chosen if e.kind != ACTIVATION]
    activated = [e for e in chosen if e.kind == ACTIVATION]
    floats = not menu.integer_only  # an integer-only target keeps nothing float
    fix = SuggestedFix(
        activations=[e.name for e in activated if act_bits.get(e.name) is None and floats],
        weights=[e.name for e in weighted if bits.get(e.name) is None and floats],
        weight_bits={e.name: bits[e.name] for e in weighted if bits.get(e.name) is not None},
        activation_bits={e.name: act_bits[e.name] for e in activated if act_bits.get(e.name) is not None},
    )
    return _cost(graph, fix, l_p_value, stats, into=fix)


def _cost(
    graph: Graph, fix: SuggestedFix, l_p_value: float, stats: Mapping[str, NodeStatistics], into: SuggestedFix
) -> SuggestedFix:
    """``into`` with the memory before and after ``fix`` (the same fix, or its per-layer form)."""
    before = total(graph_memory(graph, quantized=True))
    after = total(graph_memory(fixed_graph(graph, fix, l_p_value, stats), quantized=True))
    into.weights_bytes_before, into.weights_bytes_after = before.weights_bytes, after.weights_bytes
    into.activation_bytes_before, into.activation_bytes_after = before.activation_bytes, after.activation_bytes
    return into
