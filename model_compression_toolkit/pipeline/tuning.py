"""Accuracy-driven tuning: quantize, evaluate, keep the worst layers float, try again.

``baseline = evaluate(float model)``
``trial 1 = the staged PTQ (every stage reported) -> evaluate``
``trial n = trial n-1 + the change its report suggests (core.tuning: channels equalized, more
bits, or the quantizers it blames kept float, as the target allows) -> evaluate``

until the drop below the baseline is allowed or ``max_trials`` models were evaluated.
Statistics are collected once; each trial only re-selects thresholds. Each evaluated
trial is reported to the observer (`TrialReport`), and the result at the end.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from model_compression_toolkit.core.config import KeepFloat, TuningConfig, keep_float_rules
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.info import model_memory
from model_compression_toolkit.core.memory import graph_memory, total
from model_compression_toolkit.core.similarity.fix import SuggestedFix
from model_compression_toolkit.core.tuning import (
    COMPENSATED,
    EQUALIZE,
    TuningResult,
    TuningTrial,
    next_changes,
    rank,
    run_name,
)
from model_compression_toolkit.errors import ConfigurationError
from model_compression_toolkit.pipeline.events import Observer, Progress, TrialReport
from model_compression_toolkit.pipeline.session import Quantization

LOG = logging.getLogger("model_compression_toolkit")


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


def _n_bits(fix: SuggestedFix) -> dict[str, int]:
    """The `QuantizationConfig` fields a fix sets for every activation or weight: bits, compensated rounding."""
    bits = {"activation_n_bits": fix.activation_n_bits, "weights_n_bits": fix.weights_n_bits}
    found = {k: v for k, v in bits.items() if v is not None}
    return {**found, "weights_compensated_rounding": True} if fix.compensated_rounding else found


class Tuner:
    """The loop's state: trials so far, the layers kept float, the best trial.

    Args:
        quantize: quantizes the model with these `KeepFloat` rules and these layers' weight
            bit-widths, similarity included.
        float_graph: the float model's graph (the baseline's).
        rules: the user's own `KeepFloat` rules, kept in every trial.
        evaluate: model -> score, higher is better.
        config: the allowed drop and the trial budget.
        baseline: ``evaluate`` of the float model.
        observer: told about every evaluated trial and the result.
    """

    def __init__(
        self,
        quantize: Callable[[Sequence[KeepFloat], SuggestedFix], Quantization],
        float_graph: Graph,
        rules: Sequence[KeepFloat],
        evaluate: Callable[[Any], Any],
        config: TuningConfig,
        baseline: float,
        observer: Observer,
    ) -> None:
        self.quantize, self.float_graph, self.rules = quantize, float_graph, list(rules)
        self.evaluate, self.config, self.baseline, self.observer = evaluate, config, baseline, observer
        self.activations: list[str] = []  # layers whose outputs tuning keeps float
        self.weights: list[str] = []  # layers whose weights tuning keeps float
        self.bits = SuggestedFix()  # the bit-widths tuning gives (its weight_bits, activation_bits, n_bits)
        self.records: list[TuningTrial] = []
        self.best: tuple[TuningTrial, Quantization] | None = None

    def drop(self, score: float) -> float:
        drop = self.baseline - score
        return drop / abs(self.baseline) if self.config.relative else drop

    def met(self, drop: float) -> bool:
        return drop <= self.config.max_drop + 1e-9 * max(1.0, abs(self.config.max_drop))

    def record(self, n: int, trial: Quantization, added: list[str]) -> TuningTrial:
        """Evaluate one trial, keep it if it is the best so far, and report it."""
        score = check_score(self.evaluate(trial.model), f"trial {n}'s quantized model")
        memory = graph_memory(trial.graph, quantized=True)
        kept = list(dict.fromkeys([*self.activations, *self.weights]))  # the layers with anything float
        rec = TuningTrial(
            n=n, score=score, drop=self.drop(score), kept_float=kept, added=added,
            weights_bytes=total(memory).weights_bytes, run_name=run_name(n, score),
            kept_activations=list(self.activations), kept_weights=list(self.weights),
            weight_bits=dict(self.bits.weight_bits), activation_bits=dict(self.bits.activation_bits),
            n_bits=_n_bits(self.bits), equalized=list(self.bits.equalized_pairs) if self.bits.equalize else [],
        )  # fmt: skip
        LOG.info("tuning trial %d: score %.4f, drop %.4f, %d layers kept float", n, score, rec.drop, len(kept))
        self.records.append(rec)
        if self.best is None or rank(rec) > rank(self.best[0]):
            self.best = (rec, trial)
        self.observer.trial_finished(
            TrialReport(rec, trial.graph, memory, trial.similarity, self.float_graph, self.baseline)
        )
        self.observer.progress(Progress("tuning", n, self.config.max_trials, "trials"))
        return rec

    def tune(self, first: Quantization) -> tuple[Quantization, TuningResult]:
        """Trials from ``first`` (the plain PTQ, its similarity computed) until the drop is met."""
        trial = first
        rec = self.record(1, trial, [])
        while not self.met(rec.drop) and rec.n < self.config.max_trials:
            bits = self.bits
            tried = {(n, "activation") for n in [*self.activations, *bits.activation_bits]}
            tried |= {(n, "weights") for n in [*self.weights, *bits.weight_bits]}
            tried |= {("*", kind) for kind, n in (("activation", bits.activation_n_bits), ("weights", bits.weights_n_bits)) if n}
            tried |= {("*", EQUALIZE)} if bits.equalize else set()
            tried |= {("*", COMPENSATED)} if bits.compensated_rounding else set()
            change = next_changes(trial.similarity.report, self.config.layers_per_trial, tried)
            if not change:
                LOG.info("tuning: no quantizer left to change after trial %d", rec.n)
                break
            self.activations += change.activations
            self.weights += change.weights
            bits.weight_bits.update(change.weight_bits)
            bits.activation_bits.update(change.activation_bits)
            bits.activation_n_bits = change.activation_n_bits or bits.activation_n_bits
            bits.weights_n_bits = change.weights_n_bits or bits.weights_n_bits
            if change.equalize:
                bits.equalize, bits.equalized_pairs = True, list(change.equalized_pairs)
            bits.compensated_rounding = bits.compensated_rounding or change.compensated_rounding
            trial = self.quantize([*self.rules, *keep_float_rules(self.activations, self.weights)], bits)
            added = [f"{n} (activation)" for n in change.activations] + [f"{n} (weights)" for n in change.weights]
            added += [f"{n} (weights, {b} bits)" for n, b in change.weight_bits.items()]
            added += [f"{n} (activation, {b} bits)" for n, b in change.activation_bits.items()]
            added += [f"{k}={v}" for k, v in _n_bits(change).items()]
            added += [f"channels equalized ({p})" for p in change.equalized_pairs] if change.equalize else []
            rec = self.record(rec.n + 1, trial, added)
        return self.finish()

    def finish(self) -> tuple[Quantization, TuningResult]:
        assert self.best is not None
        best, trial = self.best
        result = TuningResult(
            baseline_score=self.baseline,
            baseline_weights_bytes=model_memory(self.float_graph, quantized=False).weights_bytes,
            max_drop=float(self.config.max_drop),
            relative=self.config.relative,
            target_met=self.met(best.drop),
            trials=self.records,
            best_trial=best.n,
        )
        self.observer.tuning_finished(result)
        LOG.info(result.summary())
        return trial, result
