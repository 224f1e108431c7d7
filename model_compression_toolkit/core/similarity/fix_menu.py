"""What a suggested fix may change, as the target allows, how a candidate is judged, and
the equalization it tries.

The menu, cheapest first (`core.similarity.fix` measures it in this order and stops at the
first entry that restores):

    equalize channels (no bytes, integer) -> the causes' own fix (16-bit output, more
    weight bits, float) -> every activation at 16 bits -> both -> every weight at 16 too

A target that runs integers only (``CoreConfig(integer_only=True)``, or any
``target_platform_capabilities``: IMX500, int8 TFLite) takes no float layer and only the
bit-widths it lists: the menu says which (`FixMenu.of`), and the fix keeps to it.
Each candidate is judged where its harm lands (`judge`): the model output's worst part
(`ImpactProbe`), and, where the call has the user's metric (`FixMetric`), that metric on
the candidate's model. Equalization is measured the same way: the quantized graph
equalized (`core.equalization`), the grids of what it changed chosen again on the impact
samples.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from model_compression_toolkit.core.calibration.rounding import InputMoments
from model_compression_toolkit.core.calibration.shared_grids import share_grids
from model_compression_toolkit.core.calibration.statistics import NodeStatistics, StatisticsCollector
from model_compression_toolkit.core.calibration.thresholds import fill_activation_config, fill_weights_config
from model_compression_toolkit.core.config import CoreConfig
from model_compression_toolkit.core.equalization import EqualizationPair, equalize, find_pairs
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.similarity.causes import ACTIVATION, ImpactProbe, QuantizerEntry, isolate
from model_compression_toolkit.core.similarity.suggested import FixAlternative, SuggestedFix
from model_compression_toolkit.errors import ConfigurationError

__all__ = ["FixAlternative", "FixMenu", "FixMetric"]
MORE_BITS = (4, 6, 8, 12, 16)  # the weight bit-widths a fix may give a layer, fewest first
MORE_ACTIVATION_BITS = 16  # the bits a fix may give an activation before keeping it float
INTEGER_MAX_BITS = 8  # an integer-only target without a platform model: int8
OUTLIER_SPREAD = 8.0  # a channel range this many times the median channel's is an outlier


@dataclass(frozen=True)
class FixMetric:
    """The user's task metric, to judge each fix candidate by (``evaluate`` of a tuned call).

    Attributes:
        evaluate: model -> score, higher is better; called on each candidate's model as
            the backend builds it from the candidate's graph.
        baseline: the float model's score.
        max_drop: the largest drop below ``baseline`` a fix may leave (a fraction of it
            with ``relative``).
        relative: read ``max_drop`` as a fraction of ``baseline``.
    """

    evaluate: Callable[[object], object]
    baseline: float
    max_drop: float = 0.01
    relative: bool = False

    def score(self, model: object) -> float:
        """``evaluate(model)`` as a finite float, else ConfigurationError."""
        value = self.evaluate(model)
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            number = math.nan
        if isinstance(value, (str, bytes, bool)) or not math.isfinite(number):
            raise ConfigurationError(
                f"evaluate must return a finite number (higher is better); for a fix candidate it returned {value!r}"
            )
        return number

    def restores(self, score: float) -> bool:
        """Whether ``score`` is within the allowed drop of the baseline."""
        drop = self.baseline - score
        drop = drop / abs(self.baseline) if self.relative and self.baseline else drop
        return drop <= self.max_drop + 1e-9 * max(1.0, abs(self.max_drop))


@dataclass(frozen=True)
class FixMenu:
    """What the target allows a fix to use.

    Attributes:
        integer_only: no layer may stay float.
        quantize_outputs: the call puts the model's outputs on grids on a target that runs
            float (``CoreConfig(quantize_outputs=True)``): a fix's snippet says so too.
        weight_bits: the weight bit-widths a layer may get.
        activation_bits: the bits an activation may get to keep it on an integer grid
            (16), or None when the target has none above its default.
        target: the target in words (``"imx500 1.0"``, ``"integer-only (int8)"``), or None.
        prefer_equalization: suggest equalization whenever it restores the output (it
            costs no bytes); False keeps the per-layer fix of bits or float as the
            suggestion and lists equalization among the alternatives.
        metric: the user's metric, to judge each candidate by besides the output SQNR;
            None: the output SQNR alone (`suggested.RESTORE_DB`).
        moments: graph -> its compensated layers' input moments on the calibration data
            (`core.calibration.rounding`), collected when a candidate first rounds with
            compensation; None: no candidate does (a comparison run on its own).
    """

    integer_only: bool = False
    weight_bits: tuple[int, ...] = MORE_BITS
    activation_bits: int | None = MORE_ACTIVATION_BITS
    target: str | None = None
    prefer_equalization: bool = True
    metric: FixMetric | None = field(default=None, compare=False)
    moments: Callable[[Graph], Mapping[str, InputMoments]] | None = field(default=None, compare=False)
    quantize_outputs: bool = False

    @classmethod
    def of(cls, config: CoreConfig) -> FixMenu:
        """The menu of a resolved `CoreConfig`: its platform's bit-widths when it has one
        (integer only), else int8 with ``integer_only``, else everything."""
        tpc: Any = config.target_platform_capabilities  # a `core.tpc` platform model, read by name
        if tpc is not None:
            weights = tuple(sorted({*tpc.mixed_precision_weights_bits, tpc.weights_n_bits}))
            options = [tpc.default_qco, *tpc.sets.values()]
            wide = any(MORE_ACTIVATION_BITS in qc.supported_activation_n_bits for qc in options)
            name = f"{tpc.tpc_platform_type} {tpc.tpc_version}"
            return cls(True, weights, MORE_ACTIVATION_BITS if wide else None, name, True)
        if config.integer_only:
            qc = config.quantization_config
            top = max(INTEGER_MAX_BITS, qc.weights_n_bits)
            act = MORE_ACTIVATION_BITS if qc.activation_n_bits >= MORE_ACTIVATION_BITS else None
            return cls(
                True,
                tuple(b for b in MORE_BITS if b <= top),
                act,
                f"integer-only (int{INTEGER_MAX_BITS})",
                True,
            )
        return cls(quantize_outputs=bool(config.quantize_outputs))

    def more_weight_bits(self, now: int) -> tuple[int, ...]:
        return tuple(b for b in self.weight_bits if b > now)

    def allows_activation_bits(self, graph: Graph, name: str, bits: int) -> bool:
        """Whether the target runs the output of ``name`` at ``bits``."""
        if self.activation_bits is None or bits > self.activation_bits:
            return False
        cfg = graph.node(name).quant.activation
        return cfg is None or cfg.allowed_bits is None or bits in cfg.allowed_bits


def has_outlier_channels(entries: Sequence[QuantizerEntry]) -> bool:
    """Whether a cause shows an outlier channel: an activation whose largest channel's range
    is `OUTLIER_SPREAD` times the median's, or weights that lose an input channel whole."""
    return any(
        e.cause and ((e.kind == ACTIVATION and (e.channel_range_spread or 0.0) >= OUTLIER_SPREAD)
                     or bool(e.lost_input_channels_percent))
        for e in entries
    )  # fmt: skip


def pair_text(pair: EqualizationPair) -> str:
    """``conv2 -> act2 -> pool -> conv3`` (an add's other producers named too)."""
    return pair.text()


def probe_statistics(
    probe: ImpactProbe, graph: Graph, names: Sequence[str], bins: int = 2048
) -> dict[str, NodeStatistics]:
    """Statistics of ``names``' float outputs in ``graph`` on the probe's samples."""
    if not names:
        return {}
    model = probe.backend.build(isolate(graph, None), quantized=False, extra_outputs=list(names))
    collectors = {n: StatisticsCollector(bins, graph.node(n).channel_axis) for n in names}
    count = len(graph.outputs)
    for chunk in probe.chunks:
        values = probe.backend.forward(model, chunk)[count:]
        for name, value in zip(names, values):
            collectors[name].update(value)
    return {n: c.result() for n, c in collectors.items()}


def equalized_variant(
    graph: Graph, probe: ImpactProbe, l_p_value: float, pairs: Sequence[EqualizationPair] | None = None
) -> tuple[Graph, list[EqualizationPair]] | None:
    """``graph`` (quantized) with its channels equalized as
    ``QuantizationConfig(activation_channel_equalization=True)`` does (every pair, or
    ``pairs``), the grids of what changed chosen again: kernels on the new weights,
    activations on the probe's samples. None when no pair changes."""
    pairs = find_pairs(graph) if pairs is None else pairs
    out, scales = equalize(graph, pairs)
    done = [p for p in pairs if p.producer in scales]
    if not done:
        return None
    for pair in done:
        for name in pair.changed_weights:  # an add's other producers, a join's other consumers too
            node = out.node(name)
            for wname, wcfg in node.quant.weights.items():
                if wcfg.grid is not None:
                    fill_weights_config(wcfg, node.weights[wname], l_p_value)
    changed = [n for p in done for n in p.changed_outputs]
    quantized = [
        n for n in dict.fromkeys(changed)
        if (cfg := out.node(n).quant.activation) is not None and cfg.grid is not None and cfg.grid_from is None
    ]  # fmt: skip
    stats = probe_statistics(probe, out, quantized)
    for name in quantized:
        act = out.node(name).quant.activation
        assert act is not None  # chosen above for having a grid
        fill_activation_config(act, stats[name], l_p_value)
    share_grids(out)
    return out, done


def not_allowed(entries: Sequence[QuantizerEntry], graph: Graph, menu: FixMenu) -> list[FixAlternative]:
    """What an integer-only target rules out for the causes: 16-bit outputs it lacks, float."""
    if not menu.integer_only:
        return []
    causes = [e for e in entries if e.cause]
    wide = [e.name for e in causes if e.kind == ACTIVATION]
    wide = [n for n in wide if not menu.allows_activation_bits(graph, n, MORE_ACTIVATION_BITS)]
    out = [FixAlternative("16-bit activations", ", ".join(wide), allowed=False)] if wide else []
    names = ", ".join(dict.fromkeys(e.name for e in causes))
    return out + [FixAlternative("keep float", names, float_layers=len(causes), allowed=False)]


def judge(
    fix: SuggestedFix,
    variant: Graph,
    probe: ImpactProbe,
    menu: FixMenu,
    before: float,
    metric_before: float | None,
) -> SuggestedFix:
    """``fix`` with what its ``variant`` (the quantized graph as the fix leaves it) gives:
    the output SQNR where the harm lands (the part furthest under its own bar, so that the
    fix restores only when every part is at its bar), and the user's metric on the
    variant's model where the menu has one."""
    impact = probe.impact(variant)
    fix.output_sqnr_db_before, fix.output_sqnr_db_after = before, impact.sqnr_db
    fix.output_probability = impact.probability
    if menu.metric is not None:
        fix.metric_before = metric_before
        fix.metric_after = menu.metric.score(probe.backend.build(variant, quantized=True))
        fix.metric_restores = menu.metric.restores(fix.metric_after)
    return fix


def choose(tried: Sequence[SuggestedFix], menu: FixMenu) -> SuggestedFix:
    """The cheapest fix that restores (no float layer first, then fewest bytes); without
    ``menu.prefer_equalization`` the per-layer fix stays when it restores; when none does,
    the one that gives the most (the metric where measured, then the output's margin over
    its bar: a box part at 18 dB is nearer its 20 dB than class scores at 25 dB are their 30)."""
    restoring = [f for f in tried if f.restores]
    if restoring and not menu.prefer_equalization:
        layer = [f for f in restoring if not f.equalize]
        restoring = layer or restoring
    if restoring:
        return min(
            restoring,
            key=lambda f: (
                len(f.activations) + len(f.weights),
                f.weights_bytes_after + f.activation_bytes_after,
            ),
        )
    return max(tried, key=lambda f: (-math.inf if f.metric_after is None else f.metric_after, f.margin_after))


def alternative(fix: SuggestedFix, chosen: bool) -> FixAlternative:
    """``fix`` as a line of the alternatives tried."""
    if fix.equalize:
        name, change = "equalize channels", "; ".join(fix.equalized_pairs)
    else:
        parts = [f"{n} output at {b} bits" for n, b in fix.activation_bits.items()]
        parts += [f"{n} weights at {b} bits" for n, b in fix.weight_bits.items()]
        parts += [f"{n} output float" for n in fix.activations] + [f"{n} weights float" for n in fix.weights]
        parts += [
            f"every {k} at {v} bits"
            for k, v in (("activation", fix.activation_n_bits), ("weight", fix.weights_n_bits))
            if v
        ]
        parts += ["kernels rounded with their errors compensated"] if fix.compensated_rounding else []
        name = "keep float" if fix.activations or fix.weights else "more bits"
        if name == "more bits" and fix.compensated_rounding and len(parts) == 1:
            name = "compensated rounding"
        change = ", ".join(parts)
    return FixAlternative(
        name, change, fix.output_sqnr_db_after,
        fix.weights_bytes_after - fix.weights_bytes_before, fix.activation_bytes_after - fix.activation_bytes_before,
        len(fix.activations) + len(fix.weights), chosen=chosen, metric=fix.metric_after, restores=fix.restores,
    )  # fmt: skip
