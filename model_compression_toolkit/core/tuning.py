"""What accuracy-driven tuning decides and returns, without running anything.

``trial n's similarity report -> next_groups -> layers trial n+1 keeps float``

The worst layers come from the previous trial's similarity report, by local error (that
layer alone quantized), so a layer that only inherits damage from an earlier one is not
chosen. Keeping a compare point float keeps its whole local group float (``conv -> relu``:
both), weights and output. The loop that quantizes and evaluates is `pipeline.tuning`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import Any

from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.similarity.plan import local_group
from model_compression_toolkit.core.similarity.report import SimilarityReport


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
        kept_float: the layers tuning kept float in this trial (earlier trials' included).
        added: the compare points whose local groups this trial added to ``kept_float``.
        weights_bytes: memory of all weights at their bit-widths.
        run_name: its TensorBoard run inside the call's call folder.
    """

    n: int
    score: float
    drop: float
    kept_float: list[str]
    added: list[str]
    weights_bytes: float
    run_name: str


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
            lines.append(
                f"  trial {t.n}: score {t.score:.4f}  drop {self.format_drop(t.drop)}  "
                f"weights {t.weights_bytes / 1024:.1f} KiB  kept float: {kept}"
            )
        return "\n".join(lines)


def rank(trial: TuningTrial) -> tuple[float, int]:
    """Higher is better: the score, then fewer layers kept float."""
    return trial.score, -len(trial.kept_float)


def next_groups(
    report: SimilarityReport,
    graph: Graph,
    count: int,
    tried: set[str],
    kept: Collection[str],
    layer_names: Collection[str],
) -> list[tuple[str, list[str]]]:
    """The next ``count`` worst compare points of ``report`` and their local groups' layer names.

    Worst first by local error; points with no local error of their own (ranked by the
    error they inherit) come after, model outputs among them last. Points in ``tried`` are
    skipped; every point looked at is added to it.

    Args:
        report: the last trial's similarity report.
        graph: the last trial's quantized graph.
        count: how many groups to return at most.
        tried: compare points already kept float or found not worth it (updated).
        kept: layer names already kept float.
        layer_names: the layer names of the user's model (what `KeepFloat` matches).

    Returns:
        (compare point, layer names to keep float) pairs, worst first.
    """
    ranked = report.ranked()
    order = (
        [p for p in ranked if p.local_sqnr_db is not None]
        + [p for p in ranked if p.local_sqnr_db is None and not p.is_output]
        + [p for p in ranked if p.local_sqnr_db is None and p.is_output]
    )
    chosen: list[tuple[str, list[str]]] = []
    for point in order:
        if len(chosen) == count:
            break
        if point.name in tried or point.name not in graph:
            continue
        tried.add(point.name)
        names = group_names(graph, point.name, kept, layer_names)
        if names:
            chosen.append((point.name, names))
    return chosen


def group_names(graph: Graph, point: str, kept: Collection[str], layer_names: Collection[str]) -> list[str]:
    """Layer names (as the user's model calls them) of the point's still-quantized local group."""
    names: list[str] = []
    for member in reversed(local_group(graph, graph.node(point))):  # producers first
        if member.quant.activation is None and not member.quant.weights:
            continue  # nothing quantized: keeping it float changes nothing
        own = [member.name] if member.name in layer_names else [o for o in member.origin if o in layer_names]
        names += [n for n in own if n not in kept and n not in names]
    return names
