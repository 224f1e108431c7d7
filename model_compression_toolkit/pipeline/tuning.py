"""Accuracy-driven tuning: quantize, evaluate, keep the worst layers float, try again.

``baseline = evaluate(float model)``
``trial 1 = the normal PTQ (every stage logged) -> evaluate``
``trial n = trial n-1 + the next worst local groups kept float -> evaluate``

until the drop below the baseline is allowed or ``max_trials`` models were evaluated. The
worst layers come from the previous trial's similarity report, by local error (that layer
alone quantized), so a layer that only inherits damage from an earlier one is not chosen.
Keeping a compare point float keeps its whole local group float (``conv -> relu``: both),
weights and output. Statistics are collected once; each trial only re-selects thresholds.

Each evaluation is a TensorBoard run in the call's run folder, ``baseline_acc_<score>``
and ``tune_<n>_acc_<score>``, holding the same activation histogram tags, plus a
``tuning`` run with the score per trial (see `visualization.tuning`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from model_compression_toolkit.core.config import CoreConfig, KeepFloat, TuningConfig
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.info import QuantizationInfo
from model_compression_toolkit.core.memory import graph_memory, total
from model_compression_toolkit.core.similarity.analysis import SimilarityResult
from model_compression_toolkit.core.similarity.plan import _local_group
from model_compression_toolkit.errors import ConfigurationError
from model_compression_toolkit.observers.log_folder import RunContext, ptq_run
from model_compression_toolkit.pipeline.events import StageReport, StageSink
from model_compression_toolkit.pipeline.session import Session, Trial

LOG = logging.getLogger("model_compression_toolkit")
TUNING_RUN = "tuning"


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
        run_name: its TensorBoard run inside the call's run folder.
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


def check_tuning_config(tuning_config: TuningConfig | None) -> TuningConfig:
    if tuning_config is None:
        return TuningConfig()
    if not isinstance(tuning_config, TuningConfig):
        raise ConfigurationError(
            f"tuning_config must be a mct.core.TuningConfig; got {type(tuning_config).__name__}"
        )
    tuning_config.validate()
    return tuning_config


def check_score(value: Any, what: str) -> float:
    """``value`` as a finite float, else ConfigurationError naming what returned it."""
    number = None
    if not isinstance(value, (str, bytes, bool)):
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = None
    if number is None or not math.isfinite(number):
        raise ConfigurationError(
            f"evaluate must return a finite number (higher is better); for {what} it returned {value!r}. "
            "Return e.g. the accuracy as a float."
        )
    return number


def _rank(trial: TuningTrial) -> tuple[float, int]:
    """Higher is better: the score, then fewer layers kept float."""
    return trial.score, -len(trial.kept_float)


class _Capture:
    """Forwards stage reports to the run's sink and keeps the ``quantized_graph`` one."""

    def __init__(self, sink: StageSink) -> None:
        self.sink = sink
        self.report: StageReport | None = None

    def stage(self, report: StageReport) -> None:
        if report.name == "quantized_graph":
            self.report = report
        self.sink.stage(report)

    def close(self) -> None:
        self.sink.close()

    def __getattr__(self, name: str) -> Any:  # writer(), when the sink has one
        return getattr(self.__dict__["sink"], name)


class _Tuner:
    """The loop's state: trials so far, the layers kept float, the best trial."""

    def __init__(
        self,
        session: Session,
        evaluate: Callable[[Any], Any],
        config: TuningConfig,
        baseline: float,
        run: RunContext,
    ) -> None:
        self.session, self.evaluate, self.config = session, evaluate, config
        self.baseline, self.run = baseline, run
        self.rules = session.config.keep_float_rules
        self.layer_names = {n for node in session.initial.nodes() for n in (node.name, *node.origin)}
        self.kept: list[str] = []
        self.tried: set[str] = set()  # compare points kept float or found not worth it
        self.records: list[TuningTrial] = []
        self.best: tuple[TuningTrial, Trial] | None = None
        self.tags: list[str] = []

    # ------------------------------------------------------------- scores
    def drop(self, score: float) -> float:
        drop = self.baseline - score
        return drop / abs(self.baseline) if self.config.relative else drop

    def met(self, drop: float) -> bool:
        return drop <= self.config.max_drop + 1e-9 * max(1.0, abs(self.config.max_drop))

    # ------------------------------------------------------------- trials
    def first_trial(self) -> Trial:
        """The plain PTQ, every stage reported to the run's sink; similarity even when not logged."""
        capture = _Capture(self.run.sink)
        q_model, _ = self.session.run(RunContext(folder=self.run.folder, sink=capture))
        assert capture.report is not None, "the runner reports quantized_graph"
        graph = capture.report.graph
        similarity = capture.report.similarity or self.session.analyze(graph)
        return Trial(graph, q_model, similarity)

    def record(self, n: int, trial: Trial, added: list[str]) -> TuningTrial:
        from model_compression_toolkit.observers import tuning_view as view

        score = check_score(self.evaluate(trial.q_model), f"trial {n}'s quantized model")
        memory = graph_memory(trial.graph, quantized=True)
        rec = TuningTrial(
            n=n, score=score, drop=self.drop(score), kept_float=list(self.kept), added=added,
            weights_bytes=total(memory).weights_bytes, run_name=run_name(n, score),
        )  # fmt: skip
        LOG.info(
            "tuning trial %d: score %.4f, drop %.4f, %d layers kept float", n, score, rec.drop, len(self.kept)
        )
        similarity: SimilarityResult = trial.similarity
        if n == 1:  # the baseline's histograms are the float side of trial 1's comparison
            self.tags = list(similarity.histograms)
            self._write(
                run_name(0, self.baseline), lambda w: view.write_evaluation(
                    w, self.session.initial, graph_memory(self.session.initial, quantized=False),
                    view.activation_histograms(similarity.histograms, self.tags, quantized=False),
                ),
            )  # fmt: skip
        self._write(
            rec.run_name, lambda w: view.write_evaluation(
                w, trial.graph, memory, view.activation_histograms(similarity.histograms, self.tags, quantized=True),
                similarity=similarity.report,
            ),
        )  # fmt: skip
        self.records.append(rec)
        if self.best is None or _rank(rec) > _rank(self.best[0]):
            self.best = (rec, trial)
        return rec

    def _write(self, name: str, write: Callable[[Any], None]) -> None:
        writer = self.run.writer(name)
        try:
            write(writer)
        finally:
            writer.close()

    def next_groups(self, trial: Trial) -> list[tuple[str, list[str]]]:
        """The next ``layers_per_trial`` worst compare points and their local groups' layer names.

        Worst first by local error; points with no local error of their own (ranked by the
        error they inherit) come after, model outputs among them last.
        """
        ranked = trial.similarity.report.ranked()
        order = (
            [p for p in ranked if p.local_sqnr_db is not None]
            + [p for p in ranked if p.local_sqnr_db is None and not p.is_output]
            + [p for p in ranked if p.local_sqnr_db is None and p.is_output]
        )
        chosen: list[tuple[str, list[str]]] = []
        for point in order:
            if len(chosen) == self.config.layers_per_trial:
                break
            if point.name in self.tried or point.name not in trial.graph:
                continue
            self.tried.add(point.name)
            names = self._group_names(trial.graph, point.name)
            if names:
                chosen.append((point.name, names))
        return chosen

    def _group_names(self, graph: Graph, point: str) -> list[str]:
        """Layer names (as the user's model calls them) of the point's still-quantized local group."""
        names: list[str] = []
        for member in reversed(_local_group(graph, graph.node(point))):  # producers first
            if member.quant.activation is None and not member.quant.weights:
                continue  # nothing quantized: keeping it float changes nothing
            own = (
                [member.name]
                if member.name in self.layer_names
                else [o for o in member.origin if o in self.layer_names]
            )
            names += [n for n in own if n not in self.kept and n not in names]
        return names

    # ------------------------------------------------------------- the loop
    def tune(self) -> tuple[Any, QuantizationInfo]:
        trial = self.first_trial()
        rec = self.record(1, trial, [])
        while not self.met(rec.drop) and rec.n < self.config.max_trials:
            groups = self.next_groups(trial)
            if not groups:
                LOG.info("tuning: no quantized layer left to keep float after trial %d", rec.n)
                break
            for _, names in groups:
                self.kept += names
            keep = [*self.rules, KeepFloat(names=list(self.kept))]
            trial = self.session.quantize(keep_float=keep, similarity=True)
            rec = self.record(rec.n + 1, trial, [point for point, _ in groups])
        return self.finish()

    def finish(self) -> tuple[Any, QuantizationInfo]:
        from model_compression_toolkit.observers import tuning_view as view

        assert self.best is not None
        best, trial = self.best
        result = TuningResult(
            baseline_score=self.baseline,
            baseline_weights_bytes=total(graph_memory(self.session.initial, quantized=False)).weights_bytes,
            max_drop=float(self.config.max_drop),
            relative=self.config.relative,
            target_met=self.met(best.drop),
            trials=self.records,
            best_trial=best.n,
        )
        if not result.target_met:
            self.session.warn(
                f"accuracy tuning did not meet the allowed drop: the best of {len(self.records)} trials "
                f"(trial {best.n}) scores {best.score:.4f} against the float model's {self.baseline:.4f}, "
                f"a drop of {result.format_drop(best.drop)} where {result.format_drop(result.max_drop)} is allowed. "
                "Returning that trial; raise max_trials or layers_per_trial, or allow a larger max_drop."
            )
        self._write(TUNING_RUN, lambda w: view.write_tuning(w, result))
        info = self.session.info(trial.graph, self.run)
        info.similarity = trial.similarity.report
        info.tuning = result
        LOG.info(result.summary())
        return trial.q_model, info


def tuned_post_training_quantization(
    model: Any,
    representative_data_gen: Callable[[], Any],
    evaluate: Callable[[Any], Any],
    tuning_config: TuningConfig | None,
    core_config: CoreConfig | None,
    framework: str,
) -> tuple[Any, QuantizationInfo]:
    """PTQ that keeps the worst layers float until ``evaluate`` drops little enough.

    The body of both public tuned PTQ functions. Bad configuration, a non-callable
    ``evaluate`` or a float score that is not a finite number fail before any file is written.

    Returns:
        The best trial's quantized model and its `QuantizationInfo`, whose ``tuning`` is a
        `TuningResult` and whose ``similarity`` is that trial's report.
    """
    config = check_tuning_config(tuning_config)
    if not callable(evaluate):
        raise ConfigurationError(
            f"evaluate must be a callable taking a model and returning a score (higher is better); "
            f"got {type(evaluate).__name__}"
        )
    session = Session(model, representative_data_gen, core_config, framework)
    session.reference_samples = session.config.debug_config.similarity_samples  # every trial is compared
    baseline = check_score(evaluate(model), "the float model")
    if config.relative and baseline == 0:
        raise ConfigurationError(
            "a relative max_drop is a fraction of the float model's score, which is 0; "
            "use an absolute max_drop (relative=False)"
        )
    with ptq_run(session.model_name) as run:
        return _Tuner(session, evaluate, config, baseline, run).tune()
