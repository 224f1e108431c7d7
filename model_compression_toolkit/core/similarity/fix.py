"""The smallest change that removes the causes the analysis found.

A cause that is an activation keeps that layer's *output* float (``KeepFloat(...,
weights=False)``). A cause that is a layer's weights gets more bits, the fewest of
`MORE_BITS` with which those weights alone no longer damage the output (their output SQNR
alone at least `CANDIDATE_DB`), or, if none does, is kept float (``KeepFloat(...,
activations=False)``). Linked causes go together: an outlier channel ruins the grid of the activation it is in and of
every later quantizer of the same values (a max pooling after it), so each is a cause on
its own and the fix names them all. The fix is then measured, the model quantized with it
on the same samples: if the output is still damaged, the next entries in rank order join
it, a few at most.

    q_model, info = mct.ptq.pytorch_post_training_quantization(model, data_gen)
    fix = info.similarity.suggested_fix()
    print(fix.code())        # mct.core.KeepFloat(names=['act2', 'pool'], weights=False) ...
    q_model, info = mct.ptq.pytorch_post_training_quantization(
        model, data_gen, core_config=mct.core.CoreConfig(keep_float=fix))

``CoreConfig(keep_float=fix)`` applies all of it: the `KeepFloat` rules, and the bits, which
the call's configuration resolution (`core.resolution`) adds to its `BitWidthConfig`;
``fix.apply(core_config)`` gives the same as a `CoreConfig` of one's own with the fix added.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from model_compression_toolkit.core.bit_width import BitWidthConfig
from model_compression_toolkit.core.calibration.thresholds import fill_weights_config
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

MAX_EXTRA = 3  # entries added to a fix that does not yet lift the output above CAUSE_DB
MORE_BITS = (4, 6, 8, 12, 16)  # the weight bit-widths a fix may give a layer, fewest first


@dataclass
class SuggestedFix(Sequence):
    """What to keep float to remove the causes found, and what that costs.

    A sequence of `KeepFloat` rules: ``CoreConfig(keep_float=fix)`` quantizes with it, and
    ``CoreConfig(keep_float=[*my_rules, *fix])`` adds it to rules of one's own.

    Attributes:
        activations: layers whose outputs stay float.
        weights: layers whose weights stay float.
        weight_bits: layers whose weights get more bits, and how many.
        weights_bytes_before / weights_bytes_after: the weights memory without and with the fix.
        activation_bytes_before / activation_bytes_after: the activation memory of one
            sample without and with the fix.
        output_sqnr_db_before / output_sqnr_db_after: the model output's SQNR (dB) on the
            analysis's impact samples, quantized as it was and with the fix; None when
            not measured.
    """

    activations: list[str] = field(default_factory=list)
    weights: list[str] = field(default_factory=list)
    weight_bits: dict[str, int] = field(default_factory=dict)
    weights_bytes_before: float = 0.0
    weights_bytes_after: float = 0.0
    activation_bytes_before: float = 0.0
    activation_bytes_after: float = 0.0
    output_sqnr_db_before: float | None = None
    output_sqnr_db_after: float | None = None

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
        return bool(self.activations or self.weights or self.weight_bits)

    def bit_width_config(self, base: BitWidthConfig | None = None) -> BitWidthConfig:
        """``base`` (or an empty `BitWidthConfig`) with this fix's weight bit-widths added
        after its own selections (a later selection of a layer wins)."""
        config = copy.deepcopy(base) if base is not None else BitWidthConfig()
        for name, bits in self.weight_bits.items():
            config.set_manual_weights_bit_width(NodeNameFilter(name), bits)
        return config

    def apply(self, core_config: CoreConfig | None = None) -> CoreConfig:
        """A copy of ``core_config`` (or of the defaults) with the fix added: its `KeepFloat`
        rules after the config's own, its bit-widths after the config's own."""
        config = core_config if core_config is not None else CoreConfig()
        own = [] if config.keep_float is self else config.keep_float_rules
        bits = self.bit_width_config(config.bit_width_config) if self.weight_bits else config.bit_width_config
        return dataclasses.replace(config, keep_float=[*own, *self.rules], bit_width_config=bits)

    def code(self) -> str:
        """The fix as Python to paste (``mct.core.KeepFloat(...)``, one per line)."""
        lines = [f"mct.core.KeepFloat(names={list(self.activations)!r}, weights=False)"] if self.activations else []
        if self.weights:
            lines.append(f"mct.core.KeepFloat(names={list(self.weights)!r}, activations=False)")
        for name, bits in self.weight_bits.items():
            lines.append(
                f"bit_width_config.set_manual_weights_bit_width(mct.core.common.network_editors.NodeNameFilter({name!r}), {bits})"
            )
        return "\n".join(lines) if lines else "# nothing to keep float: no quantizer damages the output on its own"

    def summary(self) -> str:
        """The fix, what it costs in memory, and what it gives, in a few lines."""
        if not self:
            return "suggested fix: none (no quantizer damages the output on its own)"
        cost = self.weights_bytes_after - self.weights_bytes_before
        act = self.activation_bytes_after - self.activation_bytes_before
        lines = ["suggested fix (CoreConfig(keep_float=fix) applies it):"] + ["  " + line for line in self.code().splitlines()]
        lines.append(
            f"  costs {cost / 1024:+.1f} KiB of weights ({self.weights_bytes_before / 1024:.1f} -> "
            f"{self.weights_bytes_after / 1024:.1f} KiB) and {act / 1024:+.1f} KiB of activations per sample"
        )
        if self.output_sqnr_db_before is not None and self.output_sqnr_db_after is not None:
            lines.append(
                f"  output SQNR {self.output_sqnr_db_before:.1f} dB -> {self.output_sqnr_db_after:.1f} dB with it"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "activations": list(self.activations),
            "weights": list(self.weights),
            "weight_bits": dict(self.weight_bits),
            "code": self.code(),
            "weights_bytes_before": self.weights_bytes_before,
            "weights_bytes_after": self.weights_bytes_after,
            "activation_bytes_before": self.activation_bytes_before,
            "activation_bytes_after": self.activation_bytes_after,
            "output_sqnr_db_before": self.output_sqnr_db_before,
            "output_sqnr_db_after": self.output_sqnr_db_after,
        }


def suggest_fix(
    entries: Sequence[QuantizerEntry], graph: Graph, probe: ImpactProbe | None, l_p_value: float = 2.0
) -> SuggestedFix:
    """The causes among ``entries`` (ranked) fixed, measured with ``probe`` and grown by the
    next entries in rank order while the output stays under `CAUSE_DB`.

    Args:
        entries: every quantizer, ranked worst first (`causes.measure_impacts`).
        graph: the quantized graph the entries belong to.
        probe: runs variants on the impact samples; None: weights causes are kept float,
            the fix is not measured or grown.
        l_p_value: the p of the ``LP`` error method, for the grids of more bits.
    """
    chosen = [e for e in entries if e.cause]
    bits = {e.name: _enough_bits(graph, e, probe, l_p_value) for e in chosen if e.kind != ACTIVATION}
    fix = _fix(graph, chosen, bits, l_p_value)
    if probe is None or not chosen:
        return fix
    fix.output_sqnr_db_before = probe.output_sqnr_db(graph)
    fix.output_sqnr_db_after = probe.output_sqnr_db(fixed_graph(graph, fix, l_p_value))
    rest = [e for e in entries if not e.cause and e.output_sqnr_db is not None]
    for entry in rest[:MAX_EXTRA]:
        if fix.output_sqnr_db_after >= CAUSE_DB:
            break
        if entry.kind != ACTIVATION:
            bits[entry.name] = _enough_bits(graph, entry, probe, l_p_value)
        grown = _fix(graph, [*chosen, entry], bits, l_p_value)
        grown.output_sqnr_db_before = fix.output_sqnr_db_before
        grown.output_sqnr_db_after = probe.output_sqnr_db(fixed_graph(graph, grown, l_p_value))
        if grown.output_sqnr_db_after > fix.output_sqnr_db_after:
            chosen.append(entry)
            fix = grown
    return fix


def with_weight_bits(graph: Graph, layers: dict[str, int], l_p_value: float) -> Graph:
    """A copy of ``graph`` whose ``layers`` have their weights at those bits (grids refilled)."""
    out = graph.copy()
    for name, bits in layers.items():
        node = out.node(name)
        for wname, cfg in node.quant.weights.items():
            cfg.n_bits = bits
            fill_weights_config(cfg, node.weights[wname], l_p_value)
    return out


def fixed_graph(graph: Graph, fix: SuggestedFix, l_p_value: float) -> Graph:
    """``graph`` as the fix quantizes it."""
    return without(with_weight_bits(graph, fix.weight_bits, l_p_value), fix.activations, fix.weights)


def _enough_bits(graph: Graph, entry: QuantizerEntry, probe: ImpactProbe | None, l_p_value: float) -> int | None:
    """The fewest of `MORE_BITS` (above the layer's) with which its weights alone keep the
    output SQNR at `CANDIDATE_DB` or more; None: none does (the weights stay float)."""
    if probe is None:
        return None
    for bits in (b for b in MORE_BITS if b > entry.bits):
        variant = isolate(with_weight_bits(graph, {entry.name: bits}, l_p_value), entry)
        if probe.output_sqnr_db(variant) >= CANDIDATE_DB:
            return bits
    return None


def _fix(graph: Graph, chosen: Sequence[QuantizerEntry], bits: dict[str, int | None], l_p_value: float) -> SuggestedFix:
    activations = [e.name for e in chosen if e.kind == ACTIVATION]
    weights = [e.name for e in chosen if e.kind != ACTIVATION and bits.get(e.name) is None]
    weight_bits = {e.name: bits[e.name] for e in chosen if e.kind != ACTIVATION and bits.get(e.name) is not None}
    fix = SuggestedFix(activations, weights, weight_bits)
    before = total(graph_memory(graph, quantized=True))
    after = total(graph_memory(fixed_graph(graph, fix, l_p_value), quantized=True))
    fix.weights_bytes_before, fix.weights_bytes_after = before.weights_bytes, after.weights_bytes
    fix.activation_bytes_before, fix.activation_bytes_after = before.activation_bytes, after.activation_bytes
    return fix
