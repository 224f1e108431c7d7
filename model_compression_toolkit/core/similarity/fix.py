"""The cheapest change that gives the task back, searched through the target's menu.

A cause that is an activation gets 16 bits where 16 bits make it harmless (its output SQNR
alone at least `CANDIDATE_DB`: a concatenation of box coordinates in pixels and class
scores in 0-1 keeps its scores at 16 bits), else keeps that layer's *output* float
(``KeepFloat(..., weights=False)``). A cause that is a layer's weights gets more bits, the
fewest of `MORE_BITS` with which those weights alone no longer damage the output (their
output SQNR alone at least `CANDIDATE_DB`), or, if none does, is kept float (``KeepFloat(...,
activations=False)``). Linked causes go together: an outlier channel ruins the grid of the
activation it is in and of every later quantizer of the same values (a max pooling after
it), so each is a cause on its own and the fix names them all. That fix is then measured,
the model quantized with it on the same samples: if the output is still damaged, the next
entries in rank order join it, a few at most.

When no quantizer damages the output on its own but all of them together do (a deep
network whose every quantizer keeps 30 dB or more, the error growing over hundreds of
them), no ranking of single quantizers can name a cause: the loss is *spread*. Its fix is
the setting that restores the output everywhere: every activation, or every weight, at 8
bits (where they have fewer) or 16.

Every candidate is judged where its harm lands (`fix_menu.judge`): the output's worst part
(a detector's class scores, not its boxes in pixels) at `RESTORE_DB` (`DECISION_RESTORE_DB`
for probabilities a decision reads at a threshold or by rank), or, where the call
has the user's metric (`FixMenu.metric`), that metric within the allowed drop. The search
goes through the menu, cheapest first, until a candidate restores::

    equalize channels -> compensated rounding (a cause is a weight) -> the causes' own fix
      (grown; with compensated rounding) -> (no cause: compensated rounding) every
      activation (every weight) at 16 bits ->
      the causes' fix and every activation, or every weight, or both at 16 bits, and every
      activation at 16 bits with compensated rounding

Compensated rounding (``QuantizationConfig(weights_compensated_rounding=True)``, the default)
keeps every grid and rounds the kernels with their errors compensated: no byte, no float
layer, so it comes before more bits, where the call rounds kernels to nearest
(``weights_compensated_rounding=False``); its input moments come from the call
(`FixMenu.moments`, on the calibration data, once a candidate asks). The search suggests the cheapest that restores
(no float layer first, then fewest bytes). When no candidate restores, it suggests the one
that gives the most and says plainly, in ``fix.note``, that no fix tried restores and what
each gave. YOLOv8n: every activation at 16 bits leaves its class scores, still on the head
concatenation's one grid with the boxes, at 21 dB (AP50 98.9 %); that concatenation float
too, still 21 dB (the 8-bit weights' rounding); with the kernels rounded with compensation,
34 dB and AP50 99.5 %, where every weight at 16 bits gives about 60 dB and 99.7 % for 2.9 MiB
more (float: 100 %).

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
and no bit-width the target lacks is asked for.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import cast

import numpy as np

from model_compression_toolkit.core.calibration.quantizers import symmetric_grid, uniform_grid
from model_compression_toolkit.core.calibration.rounding import compensated_layers, set_input_moments
from model_compression_toolkit.core.calibration.statistics import NodeStatistics
from model_compression_toolkit.core.calibration.thresholds import fill_weights_config
from model_compression_toolkit.core.calibration.wider import fill
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.memory import graph_memory, total
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
    FixMetric,
    alternative,
    choose,
    equalized_variant,
    has_outlier_channels,
    judge,
    not_allowed,
    pair_text,
)
from model_compression_toolkit.core.similarity.suggested import (
    DECISION_RESTORE_DB,
    PARTS_BAR,
    RESTORE_DB,
    SuggestedFix,
    no_restore_note,
)
from model_compression_toolkit.core.similarity.trials import MeasuredOnce, SearchStats, changes

__all__ = [
    "DECISION_RESTORE_DB", "MORE_ACTIVATION_BITS", "MORE_BITS", "RESTORE_DB", "FixAlternative", "FixMenu", "FixMetric", "SuggestedFix",
    "suggest_fix",
]  # fmt: skip
MAX_EXTRA = 3  # entries added to the causes' fix while it does not restore the output
SPREAD_BITS = (8, 16)  # every activation (or weight) at one of these: the fix of a spread loss
USEFUL_DB = 3.0  # a spread setting that gains less than this is no fix


class _Search:
    """What every candidate of one search shares: the graph, the probe, the menu, and the
    output (and metric) before any fix."""

    def __init__(
        self,
        graph: Graph,
        probe: ImpactProbe,
        l_p_value: float,
        stats: Mapping[str, NodeStatistics],
        menu: FixMenu,
    ) -> None:
        self.graph, self.l_p_value, self.menu = graph, l_p_value, menu
        # each candidate's graph made once (its grids of more bits chosen once per activation),
        # and measured once: a fix whose margin was measured is judged on that run
        self.stats = stats if isinstance(stats, SearchStats) else SearchStats(stats)
        # MeasuredOnce answers every ImpactProbe call (by delegation), the graph-wide impact from memory
        self.probe = cast(ImpactProbe, MeasuredOnce(probe))
        self.impact_before = self.probe.impact(graph)  # the graph as quantized, measured once
        self.before = self.impact_before.sqnr_db
        self.metric_before = (
            menu.metric.score(probe.backend.build(graph, quantized=True)) if menu.metric is not None else None
        )
        self._compensable: bool | None = None

    def compensable(self) -> bool:
        """Whether a candidate may round every kernel with its errors compensated: the call
        collects the input moments it needs (`FixMenu.moments`, once, on first asking) and
        the graph rounds some kernel to nearest that compensation applies to (a call with
        ``weights_compensated_rounding=False``; by default every such kernel within the work
        budget is compensated already)."""
        if self._compensable is None:
            graph, menu = self.graph, self.menu
            nearest = [n for n in compensated_layers(graph) if graph.node(n).quant.input_moments is None]
            self._compensable = False
            if menu.moments is not None and nearest:
                self.stats.moments = menu.moments(graph)
                self._compensable = bool(self.stats.moments)
        return self._compensable

    def margin(self, fix: SuggestedFix) -> float:
        """How far (dB) the output's worst part with ``fix`` is over the SQNR that restores
        it (`SuggestedFix.restore_db`), without the metric: the steps inside one candidate
        (growing the causes' fix)."""
        return self.probe.impact(fixed_graph(self.graph, fix, self.l_p_value, self.stats)).margin_db

    def judged(self, fix: SuggestedFix, variant: Graph | None = None) -> SuggestedFix:
        """``fix`` with its cost and what it gives (``variant``: its graph, when not `fixed_graph`'s)."""
        if variant is None:
            variant = fixed_graph(self.graph, fix, self.l_p_value, self.stats)
        _cost(self.graph, fix, variant)
        return judge(fix, variant, self.probe, self.menu, self.before, self.metric_before)


def suggest_fix(
    entries: Sequence[QuantizerEntry],
    graph: Graph,
    probe: ImpactProbe | None,
    l_p_value: float = 2.0,
    stats: Mapping[str, NodeStatistics] | None = None,
    menu: FixMenu | None = None,
) -> SuggestedFix:
    """The cheapest fix the target allows (``menu``; None: any) that restores what the causes
    among ``entries`` (ranked) damage, judged where the harm lands and by the user's metric
    where the menu has one; when none restores, the best, with a note that says so and
    what each gave (see the module doc).

    Args:
        entries: every quantizer, ranked worst first (`causes.measure_impacts`).
        graph: the quantized graph the entries belong to.
        probe: runs variants on the impact samples; None: the causes' fix, not measured
            (weights causes kept float).
        l_p_value: the p of the ``LP`` error method, for the grids of more bits.
        stats: the collected statistics by node: activation grids of more bits are chosen
            from them (without, the threshold stays and only the step shrinks).
        menu: what the fix may use, and the user's metric.
    """
    menu, stats = menu or FixMenu(), stats or {}
    causes = [e for e in entries if e.cause]
    if probe is None:
        fix = _fix(graph, causes, {}, {}, l_p_value, stats, menu)
        return _for_target(_cost(graph, fix, fixed_graph(graph, fix, l_p_value, stats)), menu)
    search = _Search(graph, probe, l_p_value, stats, menu)
    # nothing to fix: no cause and every part over the cause bound (`OutputImpact.cause_view`)
    if not causes and search.impact_before.cause_view().sqnr_db >= CAUSE_DB:
        return _for_target(_cost(graph, SuggestedFix(), graph), menu)
    tried: list[SuggestedFix] = []
    if causes and has_outlier_channels(entries):
        variant = equalized_variant(graph, probe, l_p_value)
        if variant is not None:
            eq = SuggestedFix(equalize=True, equalized_pairs=[pair_text(p) for p in variant[1]])
            tried.append(search.judged(eq, variant[0]))
    # compensated rounding keeps every grid (no byte, no float layer): tried where the kernels'
    # rounding can matter, first where a cause is a weight, with what else is tried later
    weights_cause = any(e.kind != ACTIVATION for e in causes)
    if weights_cause and not any(f.restores for f in tried) and search.compensable():
        tried.append(search.judged(SuggestedFix(compensated_rounding=True)))
    own = _causes_fix(search, entries, causes) if causes else None
    if own:
        tried.append(search.judged(own))
        if not any(f.restores for f in tried) and search.compensable():
            tried.append(search.judged(_compensated(own)))
    spread, combined = _wider(search, entries, own)
    if not any(f.restores for f in tried):
        if not causes and search.compensable():  # a spread loss (an activation cause had it with its fix)
            spread.insert(0, [_compensated(SuggestedFix(spread=_spread_text(search, entries, own)))])
        for group in spread:  # per kind, the fewest bits that restore
            for candidate in group:
                tried.append(search.judged(candidate))
                if candidate.restores:
                    break
        if not any(f.restores for f in tried):  # all measured: the cheapest that restores wins
            if search.compensable():  # more activation bits with compensated kernels, not more weight bits
                more = [_compensated(dataclasses.replace(f, weights_n_bits=None)) for f in combined if f.activation_n_bits]
                combined += list({changes(f): f for f in more}.values())
            tried += [search.judged(candidate) for candidate in combined]
    useful = tried  # a spread setting that gains nothing is no fix (listed, never suggested)
    if not causes:
        useful = [f for f in tried if f.sqnr_after >= search.before + USEFUL_DB or f.restores]
    chosen = choose(useful, menu) if useful else _cost(graph, SuggestedFix(output_sqnr_db_before=search.before), graph)
    # a copy: the candidates hold the chosen fix, never the fix that lists them (no cycle)
    best = dataclasses.replace(chosen, candidates=[])
    for fix in [*tried, best]:
        _for_target(fix, menu)
    best.alternatives = [alternative(f, f is chosen) for f in tried] + not_allowed(entries, graph, menu)
    best.candidates = list(tried)
    if best.spread:
        measured = [f"{alternative(f, False).change}: {f.gives()}" for f in tried if f.spread]
        best.spread += ". Measured: " + ", ".join(measured) + "."
    if causes and not best.restores:
        best.note = _no_restore_note(search, best, tried)
    return best


def _for_target(fix: SuggestedFix, menu: FixMenu) -> SuggestedFix:
    """``fix``, marked with the target it was chosen for (its snippet and `apply` say it)."""
    fix.integer_only, fix.target, fix.quantize_outputs = menu.integer_only, menu.target, menu.quantize_outputs
    return fix


def _compensated(fix: SuggestedFix) -> SuggestedFix:
    """``fix`` with its kernels rounded with their errors compensated (a candidate of its own)."""
    return dataclasses.replace(fix, compensated_rounding=True, alternatives=[], candidates=[])


def _no_restore_note(search: _Search, best: SuggestedFix, tried: Sequence[SuggestedFix]) -> str:
    """``"no fix tried restores ...: <each fix> gave <metric, SQNR>"``, in words."""
    menu = search.menu
    if menu.metric is not None:
        drop = f"{100 * menu.metric.max_drop:g} %" if menu.metric.relative else f"{menu.metric.max_drop:g}"
        bar = f"your metric within {drop} of float ({menu.metric.baseline:.4g})"
    else:
        bar = PARTS_BAR
    gave = "; ".join(f"{(a := alternative(f, False)).change} gave {a.gives()}" for f in tried)
    start = ""
    if menu.integer_only:
        start = (
            f"nothing integer restores the output on this target ({menu.target}); no layer is kept float, since "
            "the target runs integers only. "
        )
    if not tried:
        return start + (
            f"No change the target allows applies to these causes (the output stays at {search.before:.1f} dB)."
        )
    return start + no_restore_note(bar, gave, menu.integer_only)


def _causes_fix(
    search: _Search, entries: Sequence[QuantizerEntry], causes: list[QuantizerEntry]
) -> SuggestedFix:
    """The causes fixed one by one, measured, and grown by the next entries in rank order
    while the output stays under what restores it (activations given 16 bits each that do not
    restore it together are kept float instead, where the target allows float)."""
    graph, probe, l_p, stats, menu = search.graph, search.probe, search.l_p_value, search.stats, search.menu
    chosen = list(causes)
    bits = {e.name: _enough_bits(graph, e, probe, l_p, menu) for e in chosen if e.kind != ACTIVATION}
    act_bits = {
        e.name: _enough_activation_bits(graph, e, probe, stats, menu) for e in chosen if e.kind == ACTIVATION
    }
    fix = _fix(graph, chosen, bits, act_bits, l_p, stats, menu)
    margin = search.margin(fix)
    if margin < 0 and fix.activation_bits and not menu.integer_only:  # 16 bits each alone
        act_bits = dict.fromkeys(act_bits)
        floated = _fix(graph, chosen, bits, act_bits, l_p, stats, menu)
        floated_margin = search.margin(floated)
        if floated_margin > margin:
            fix, margin = floated, floated_margin
    rest = [e for e in entries if not e.cause and e.output_sqnr_db is not None]
    for entry in rest[:MAX_EXTRA]:
        if margin >= 0:
            break
        if entry.kind != ACTIVATION:
            bits[entry.name] = _enough_bits(graph, entry, probe, l_p, menu)
        else:
            act_bits[entry.name] = _enough_activation_bits(graph, entry, probe, stats, menu)
        grown = _fix(graph, [*chosen, entry], bits, act_bits, l_p, stats, menu)
        grown_margin = search.margin(grown)
        if grown_margin < margin + 1.0:
            break  # the next entries in rank order do not add up to a fix: stop paying for passes
        chosen.append(entry)
        fix, margin = grown, grown_margin
    return fix


def _wider(
    search: _Search, entries: Sequence[QuantizerEntry], own: SuggestedFix | None
) -> tuple[list[list[SuggestedFix]], list[SuggestedFix]]:
    """The menu after the causes' own fix: every activation, and every weight, at each of
    `SPREAD_BITS` above theirs (a group per kind, fewest bits first); then both together
    where there is no causes' fix, else the causes' fix together with every activation at
    16 bits, with every weight at 16 bits, and with both
    (YOLOv8n: its head concatenation float and every activation at 16 bits leave the class
    scores at 21 dB, the 8-bit weights' noise; with every weight at 16 bits too, about 60 dB).
    Each as the target allows, each described as a spread loss's fix."""
    graph, menu = search.graph, search.menu
    acts = [n.quant.activation for n in graph.nodes() if n.quant.activation is not None]
    act_now = max((a.n_bits for a in acts if a.grid is not None), default=SPREAD_BITS[0])
    weights = [c for n in graph.nodes() for c in n.quant.weights.values() if c.grid is not None]
    w_now = max((c.n_bits for c in weights), default=SPREAD_BITS[0])
    act_top = menu.activation_bits or max(SPREAD_BITS[0], act_now)
    act_bits = [b for b in SPREAD_BITS if act_now < b <= act_top]
    w_bits = [b for b in SPREAD_BITS if b > w_now and b in menu.weight_bits]
    spread = [
        [SuggestedFix(activation_n_bits=b) for b in act_bits],
        [SuggestedFix(weights_n_bits=b) for b in w_bits],
    ]
    combined: list[SuggestedFix] = []
    if not own and act_bits and w_bits:  # a loss spread over both kinds (PicoDet: 93.4 % and 44.8 % alone, 99.4 % both)
        combined = [SuggestedFix(activation_n_bits=act_bits[-1], weights_n_bits=w_bits[-1])]
    if own:
        act = act_bits[-1] if act_bits else None
        w = w_bits[-1] if w_bits else None
        settings = [(act, None), (None, w), (act, w)] if act and w else [(act, None)] if act else [(None, w)]
        combined = [
            dataclasses.replace(own, activation_n_bits=a, weights_n_bits=b, alternatives=[], candidates=[])
            for a, b in settings
            if a or b
        ]
    for fix in [*spread[0], *spread[1], *combined]:
        fix.spread = _spread_text(search, entries, own)
    return spread, combined


def _spread_text(search: _Search, entries: Sequence[QuantizerEntry], own: SuggestedFix | None) -> str:
    """Why a setting of every activation or weight: what the causes' own fix gave, or that
    no quantizer alone damages the output; where the error accumulates."""
    kinds = Counter(n.layer_type for n in search.graph.nodes() if n.quant.activation is not None)
    alone = [e.own_db for e in entries]
    if own is not None:
        count = len(own.activations) + len(own.weights) + len(own.activation_bits) + len(own.weight_bits)
        why = f"fixing the {count} quantizers that damage it gives {own.gives()}"
    else:
        why = (
            f"though no quantizer alone damages it ({len(entries)} quantizers, the median keeping "
            f"{float(np.median(alone)) if alone else 0.0:.0f} dB of its own)"
        )
    return (
        f"the output keeps {search.before:.1f} dB with every quantizer on, and {why}; the error accumulates over "
        f"{sum(kinds.values())} quantized activations, most in "
        + ", ".join(f"{t} ({c})" for t, c in kinds.most_common(3))
    )


def with_weight_bits(graph: Graph, layers: dict[str, int], l_p_value: float) -> Graph:
    """A copy of ``graph`` whose ``layers`` have their weights at those bits (grids refilled)."""
    out = graph.copy()
    _set_weight_bits(out, layers, l_p_value)
    return out


def with_activation_bits(
    graph: Graph, layers: dict[str, int], stats: Mapping[str, NodeStatistics], l_p_value: float = 2.0
) -> Graph:
    """A copy of ``graph`` whose ``layers`` have their outputs at those bits: the grid chosen
    again from the layer's statistics (once per layer and bits where ``stats`` is an
    `ActivationGrids`), or (without them) the same range in finer steps."""
    out = graph.copy()
    _set_activation_bits(out, layers, stats, l_p_value)
    return out


def _set_weight_bits(graph: Graph, layers: dict[str, int], l_p_value: float) -> None:
    """`with_weight_bits` on ``graph`` itself (a copy that owns its configs)."""
    for name, bits in layers.items():
        node = graph.node(name)
        for wname, cfg in node.quant.weights.items():
            cfg.n_bits = bits
            fill_weights_config(cfg, node.weights[wname], l_p_value)


def _set_activation_bits(
    graph: Graph, layers: dict[str, int], stats: Mapping[str, NodeStatistics], l_p_value: float
) -> None:
    """`with_activation_bits` on ``graph`` itself (a copy that owns its configs)."""
    for name, bits in layers.items():
        cfg = graph.node(name).quant.activation
        if cfg is None or cfg.grid is None:
            continue
        cfg.n_bits = bits
        if name in stats:
            fill(cfg, name, stats, l_p_value)
        elif cfg.threshold is not None:
            cfg.grid = symmetric_grid(cfg.threshold, bits, bool(cfg.signed))
        elif cfg.range_min is not None and cfg.range_max is not None:
            cfg.grid = uniform_grid(cfg.range_min, cfg.range_max, bits)


def fixed_graph(
    graph: Graph, fix: SuggestedFix, l_p_value: float, stats: Mapping[str, NodeStatistics] | None = None
) -> Graph:
    """``graph`` as the fix quantizes it: every activation or weight at the fix's bits (where
    it sets them), then its per-layer bits (a layer's own wins), its float layers.

    One copy: the float layers go first (their quantizers, off, need no grid), then the
    bits are set on that copy. With a search's `SearchStats`, once per search and fix."""
    if isinstance(stats, SearchStats):
        return stats.graph_of(graph, fix, l_p_value, lambda: _fixed_graph(graph, fix, l_p_value, stats))
    return _fixed_graph(graph, fix, l_p_value, stats)


def _fixed_graph(
    graph: Graph, fix: SuggestedFix, l_p_value: float, stats: Mapping[str, NodeStatistics] | None
) -> Graph:
    weight_bits: dict[str, int] = {}
    if fix.weights_n_bits is not None:
        weight_bits = {
            n.name: fix.weights_n_bits
            for n in graph.nodes()
            if any(c.grid is not None for c in n.quant.weights.values())
        }
    act_bits: dict[str, int] = {}
    if fix.activation_n_bits is not None:
        act_bits = {
            n.name: fix.activation_n_bits
            for n in graph.nodes()
            if n.quant.activation is not None and n.quant.activation.grid is not None
        }
    out = without(graph, fix.activations, fix.weights)
    _set_weight_bits(out, {**weight_bits, **fix.weight_bits}, l_p_value)
    _set_activation_bits(out, {**act_bits, **fix.activation_bits}, stats or {}, l_p_value)
    moments = getattr(stats, "moments", None)
    if fix.compensated_rounding and moments:  # the kernels rounded with compensation when built
        set_input_moments(out, moments)
    return out


def _enough_bits(
    graph: Graph, entry: QuantizerEntry, probe: ImpactProbe | None, l_p_value: float, menu: FixMenu
) -> int | None:
    """The fewest of the menu's weight bits (above the layer's) with which its weights alone
    keep the output SQNR at `CANDIDATE_DB` or more; None: none does (the weights stay
    float, or as they are on an integer-only target)."""
    if probe is None:
        return None
    for bits in menu.more_weight_bits(entry.bits):
        variant = _isolated(graph, entry)
        _set_weight_bits(variant, {entry.name: bits}, l_p_value)
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
    variant = _isolated(graph, entry)
    _set_activation_bits(variant, {entry.name: MORE_ACTIVATION_BITS}, stats, 2.0)
    return MORE_ACTIVATION_BITS if probe.output_sqnr_db(variant, at=entry.name) >= CANDIDATE_DB else None


def _isolated(graph: Graph, entry: QuantizerEntry) -> Graph:
    """``isolate(graph, entry)`` whose entry's quantizer config is its own copy (isolate
    shares it with ``graph``), to be given more bits in place: one graph copy, not two."""
    out = isolate(graph, entry)
    quant = out.node(entry.name).quant
    if entry.kind == ACTIVATION:
        quant.activation = copy.deepcopy(quant.activation)
    else:
        quant.weights = copy.deepcopy(quant.weights)
    return out


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
    return SuggestedFix(
        activations=[e.name for e in activated if act_bits.get(e.name) is None and floats],
        weights=[e.name for e in weighted if bits.get(e.name) is None and floats],
        weight_bits={e.name: b for e in weighted if (b := bits.get(e.name)) is not None},
        activation_bits={e.name: b for e in activated if (b := act_bits.get(e.name)) is not None},
    )


def _cost(graph: Graph, fix: SuggestedFix, variant: Graph) -> SuggestedFix:
    """``fix`` with the memory before it (``graph``) and after it (``variant``: the graph as
    the fix leaves it)."""
    before = total(graph_memory(graph, quantized=True))
    after = total(graph_memory(variant, quantized=True))
    fix.weights_bytes_before, fix.weights_bytes_after = before.weights_bytes, after.weights_bytes
    fix.activation_bytes_before, fix.activation_bytes_after = before.activation_bytes, after.activation_bytes
    return fix
