"""The smallest change that removes the causes the analysis found, as `KeepFloat` rules.

A cause that is an activation keeps that layer's *output* float (``weights=False``); a
cause that is a layer's weights keeps those weights float (``activations=False``). Linked
causes go together: an outlier channel ruins the grid of the activation it is in and of
every later quantizer of the same values (a max pooling after it), so each is a cause on
its own and the fix names them all. The fix is then measured, the model quantized with it
on the same samples: if the output is still damaged, the next entries in rank order join
it, a few at most.

    q_model, info = mct.ptq.pytorch_post_training_quantization(model, data_gen)
    fix = info.similarity.suggested_fix()
    print(fix.code())        # mct.core.KeepFloat(names=['act2', 'pool'], weights=False)
    q_model, info = mct.ptq.pytorch_post_training_quantization(
        model, data_gen, mct.core.CoreConfig(keep_float=fix))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from model_compression_toolkit.core.config import KeepFloat, keep_float_rules
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.memory import graph_memory, total
from model_compression_toolkit.core.similarity.causes import (
    ACTIVATION,
    CAUSE_DB,
    ImpactProbe,
    QuantizerEntry,
    without,
)

MAX_EXTRA = 3  # entries added to a fix that does not yet lift the output above CAUSE_DB


@dataclass
class SuggestedFix(Sequence):
    """What to keep float to remove the causes found, and what that costs.

    A sequence of `KeepFloat` rules: ``CoreConfig(keep_float=fix)`` quantizes with it, and
    ``CoreConfig(keep_float=[*my_rules, *fix])`` adds it to rules of one's own.

    Attributes:
        activations: layers whose outputs stay float.
        weights: layers whose weights stay float.
        weights_bytes_before / weights_bytes_after: the weights memory without and with the fix.
        activation_bytes_before / activation_bytes_after: the activation memory of one
            sample without and with the fix.
        output_sqnr_db_before / output_sqnr_db_after: the model output's SQNR (dB) on the
            analysis's impact samples, quantized as it was and with the fix; None when
            not measured.
    """

    activations: list[str] = field(default_factory=list)
    weights: list[str] = field(default_factory=list)
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

    def code(self) -> str:
        """The fix as Python to paste (``mct.core.KeepFloat(...)``, one per line)."""
        lines = [f"mct.core.KeepFloat(names={list(self.activations)!r}, weights=False)"] if self.activations else []
        if self.weights:
            lines.append(f"mct.core.KeepFloat(names={list(self.weights)!r}, activations=False)")
        return "\n".join(lines) if lines else "# nothing to keep float: no quantizer damages the output on its own"

    def summary(self) -> str:
        """The fix, what it costs in memory, and what it gives, in a few lines."""
        if not self:
            return "suggested fix: none (no quantizer damages the output on its own)"
        cost = self.weights_bytes_after - self.weights_bytes_before
        act = self.activation_bytes_after - self.activation_bytes_before
        lines = ["suggested fix: CoreConfig(keep_float=[" + ", ".join(self.code().splitlines()) + "])"]
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
            "code": self.code(),
            "weights_bytes_before": self.weights_bytes_before,
            "weights_bytes_after": self.weights_bytes_after,
            "activation_bytes_before": self.activation_bytes_before,
            "activation_bytes_after": self.activation_bytes_after,
            "output_sqnr_db_before": self.output_sqnr_db_before,
            "output_sqnr_db_after": self.output_sqnr_db_after,
        }


def suggest_fix(entries: Sequence[QuantizerEntry], graph: Graph, probe: ImpactProbe | None) -> SuggestedFix:
    """The causes among ``entries`` (ranked) kept float, measured with ``probe`` and grown
    by the next entries in rank order while the output stays under `CAUSE_DB`.

    Args:
        entries: every quantizer, ranked worst first (`causes.measure_impacts`).
        graph: the quantized graph the entries belong to.
        probe: runs variants on the impact samples; None: the fix is not measured or grown.
    """
    chosen = [e for e in entries if e.cause]
    fix = _fix(graph, chosen)
    if probe is None or not chosen:
        return fix
    fix.output_sqnr_db_before = probe.output_sqnr_db(graph)
    fix.output_sqnr_db_after = probe.output_sqnr_db(without(graph, fix.activations, fix.weights))
    rest = [e for e in entries if not e.cause and e.output_sqnr_db is not None]
    for entry in rest[:MAX_EXTRA]:
        if fix.output_sqnr_db_after >= CAUSE_DB:
            break
        chosen.append(entry)
        grown = _fix(graph, chosen)
        grown.output_sqnr_db_before = fix.output_sqnr_db_before
        grown.output_sqnr_db_after = probe.output_sqnr_db(without(graph, grown.activations, grown.weights))
        if grown.output_sqnr_db_after > fix.output_sqnr_db_after:
            fix = grown
        else:
            chosen.pop()
    return fix


def _fix(graph: Graph, chosen: Sequence[QuantizerEntry]) -> SuggestedFix:
    activations = [e.name for e in chosen if e.kind == ACTIVATION]
    weights = [e.name for e in chosen if e.kind != ACTIVATION]
    before = total(graph_memory(graph, quantized=True))
    after = total(graph_memory(without(graph, activations, weights), quantized=True))
    return SuggestedFix(
        activations, weights, before.weights_bytes, after.weights_bytes, before.activation_bytes, after.activation_bytes
    )
