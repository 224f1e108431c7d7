"""What accuracy-driven tuning decides and returns, without running anything.

``trial n's similarity report -> next_quantizers -> quantizers trial n+1 keeps float``

The quantizers to keep float come from the previous trial's similarity report, ranked by
how much each alone damages the model output (`core.similarity.causes`), so a layer that
only inherits damage from an earlier one is not chosen. A layer's output and its weights
are separate quantizers, changed separately: the report's suggested fix first (every
cause, linked causes together; channels equalized, outputs given 16 bits or kept float,
weights given more bits or kept float: the cheapest the target allows), then the next
quantizers in rank order, kept float, unless the target runs integers only (then tuning
stops where the fix ends). The loop that quantizes and evaluates is `pipeline.tuning`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from model_compression_toolkit.core.similarity.causes import ACTIVATION, WEIGHTS
from model_compression_toolkit.core.similarity.fix import SuggestedFix
from model_compression_toolkit.core.similarity.report import SimilarityReport

EQUALIZE = "equalize"  # the kind of a change that equalizes channels, in ``tried``
COMPENSATED = "compensated"  # the kind of a change that rounds the kernels with compensation


def run_name(n: int, score: float) -> str:
    """``baseline_acc_<score>`` for n = 0, else ``tune_<n>_acc_<score>`` (4 decimals)."""
    return f"baseline_acc_{score:.4f}" if n == 0 else f"tune_{n}_acc_{score:.4f}"


@dataclass
class TuningTrial:
    """One evaluated quantized model.

    Attributes:
        n: the trial number (1 = the plain PTQ).
        score: what ``evaluate`` returned for it.
        drop: how far below the baseline it is, in ``max_drop``'s units (a fraction of
            the baseline when ``relative``).
        kept_float: the layers tuning kept float in this trial, output or weights (earlier
            trials' included).
        added: the quantizers this trial added, as ``"<layer> (activation)"`` or
            ``"<layer> (weights)"``.
        weights_bytes: memory of all weights at their bit-widths.
        run_name: its name in TensorBoard: the tag of its graph in the call's
            ``5_quantized_graph`` run (trial 1's is that run's graph).
        kept_activations: the layers whose outputs tuning kept float.
        kept_weights: the layers whose weights tuning kept float.
        weight_bits: the layers whose weights tuning gave more bits, and how many.
        activation_bits: the layers whose outputs tuning gave more bits, and how many.
        n_bits: the `QuantizationConfig` fields tuning set for every activation or weight
            (``{"activation_n_bits": 16}``, ``{"weights_compensated_rounding": True}``).
        equalized: the channels tuning equalized (``"conv2 -> act2 -> conv3"``); empty: none.
    """

    n: int
    score: float
    drop: float
    kept_float: list[str]
    added: list[str]
    weights_bytes: float
    run_name: str
    kept_activations: list[str] = field(default_factory=list)
    kept_weights: list[str] = field(default_factory=list)
    weight_bits: dict[str, int] = field(default_factory=dict)
    activation_bits: dict[str, int] = field(default_factory=dict)
    n_bits: dict[str, int] = field(default_factory=dict)
    equalized: list[str] = field(default_factory=list)

    def bit_changes(self) -> list[str]:
        """Every bit-width this trial changed, in words (``"cat (output, 16 bits)"``), and
        the channels it equalized."""
        changes = [f"channels equalized ({p})" for p in self.equalized]
        changes += [f"{n} (output, {b} bits)" for n, b in self.activation_bits.items()]
        changes += [f"{n} (weights, {b} bits)" for n, b in self.weight_bits.items()]
        return changes + [f"{k}={v}" for k, v in self.n_bits.items()]


@dataclass
class TuningResult:
    """The trials of one tuning call; ``info.tuning``.

    Attributes:
        baseline_score: ``evaluate`` on the float model.
        baseline_weights_bytes: the float model's weights memory.
        max_drop, relative: the allowed drop, as configured.
        target_met: whether the best trial's drop is within ``max_drop``.
        trials: every trial, in order.
        best_trial: ``n`` of the trial returned (highest score; ties: fewer float layers).
    """

    baseline_score: float
    baseline_weights_bytes: float
    max_drop: float
    relative: bool
    target_met: bool
    trials: list[TuningTrial] = field(default_factory=list)
    best_trial: int = 1

    @property
    def baseline_run(self) -> str:
        return run_name(0, self.baseline_score)

    @property
    def best(self) -> TuningTrial:
        return self.trials[self.best_trial - 1]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable (every number is finite)."""
        out = asdict(self)
        out["baseline_run"] = self.baseline_run
        return out

    def format_drop(self, drop: float) -> str:
        return f"{drop * 100:.2f}% of the baseline" if self.relative else f"{drop:.4f}"

    def shortfall(self) -> str | None:
        """What to tell the user when the best trial misses the allowed drop, else None."""
        if self.target_met:
            return None
        best = self.best
        return (
            f"accuracy tuning did not meet the allowed drop: the best of {len(self.trials)} trials "
            f"(trial {best.n}) scores {best.score:.4f} against the float model's {self.baseline_score:.4f}, "
            f"a drop of {self.format_drop(best.drop)} where {self.format_drop(self.max_drop)} is allowed. "
            "Returning that trial; raise max_trials or layers_per_trial, or allow a larger max_drop."
        )

    def summary(self) -> str:
        best = self.best
        verdict = "met" if self.target_met else "NOT met"
        lines = [
            f"tuning: baseline {self.baseline_score:.4f}; allowed drop {self.format_drop(self.max_drop)}; "
            f"target {verdict}; best trial {best.n} ({best.score:.4f}, drop {self.format_drop(best.drop)}, "
            f"{len(best.kept_float)} layers kept float)"
        ]
        for t in self.trials:
            kept = ", ".join(t.kept_float) or "-"
            bits = ", ".join(t.bit_changes())
            lines.append(
                f"  trial {t.n}: score {t.score:.4f}  drop {self.format_drop(t.drop)}  "
                f"weights {t.weights_bytes / 1024:.1f} KiB  kept float: {kept}" + (f"  changed: {bits}" if bits else "")
            )
        return "\n".join(lines)


def rank(trial: TuningTrial) -> tuple[float, int]:
    """Higher is better: the score, then fewer layers kept float."""
    return trial.score, -len(trial.kept_float)


def next_changes(report: SimilarityReport, count: int, tried: set[tuple[str, str]]) -> SuggestedFix:
    """What the next trial changes: the report's suggested fix, less what earlier trials
    changed already, when anything is left of it; else the next ``count`` quantizers in rank
    order, kept float.

    Args:
        report: the last trial's similarity report (its quantizers ranked worst first).
        count: how many quantizers to keep float when the fix adds nothing.
        tried: (layer, kind) of the quantizers earlier trials changed (layer ``"*"``: all
            of that kind given more bits; ``("*", "equalize")``: channels equalized;
            ``("*", "compensated")``: kernels rounded with compensation); not chosen again.

    On an integer-only target (the fix says so), nothing is kept float: when the fix has
    nothing left, the change is empty and tuning stops.
    """
    fix = report.fix
    fresh = SuggestedFix(
        [n for n in fix.activations if (n, ACTIVATION) not in tried],
        [n for n in fix.weights if (n, WEIGHTS) not in tried],
        {n: b for n, b in fix.weight_bits.items() if (n, WEIGHTS) not in tried},
        {n: b for n, b in fix.activation_bits.items() if (n, ACTIVATION) not in tried},
        fix.activation_n_bits if ("*", ACTIVATION) not in tried else None,
        fix.weights_n_bits if ("*", WEIGHTS) not in tried else None,
        equalize=fix.equalize and ("*", EQUALIZE) not in tried,
        equalized_pairs=list(fix.equalized_pairs),
        compensated_rounding=fix.compensated_rounding and ("*", COMPENSATED) not in tried,
    )
    if fresh or fix.integer_only:
        return fresh
    rest = [q for q in report.quantizers if (q.name, q.kind) not in tried][:count]
    return SuggestedFix([q.name for q in rest if q.kind == ACTIVATION], [q.name for q in rest if q.kind == WEIGHTS])
