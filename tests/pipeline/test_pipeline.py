"""The pipeline on the numpy backend (`tests.fixtures.numpy_backend`): the stages and trials it
reports, what each report carries, and that neither torch nor TensorFlow is needed.

    Session -> quantize_in_stages -> observer.stage_finished x 5   (events.STAGES)
            -> Tuner.tune         -> observer.trial_finished per trial, tuning_finished once
"""

from __future__ import annotations

import builtins
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from model_compression_toolkit.core.config import (
    CoreConfig,
    DebugConfig,
    QuantizationConfig,
    ResourceUtilization,
    TuningConfig,
)
from model_compression_toolkit.core.resolution import resolve_config
from model_compression_toolkit.pipeline.events import STAGES
from model_compression_toolkit.pipeline.session import Session
from model_compression_toolkit.pipeline.stages import quantize_in_stages
from tests.fixtures.numpy_backend import NumpyBackend, NumpyModel
from tests.fixtures.pipeline_session import (
    BATCHES,
    BUDGET,
    KERNELS,
    Recorder,
    RecordingNullObserver,
    calls_in_short,
    model,
    session,
    tune,
)

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------ the stages
def test_a_ptq_call_reports_every_stage_once_in_order_with_what_it_computed():
    s, observer = session(), Recorder()
    result, info = quantize_in_stages(s, observer)
    assert [kind for kind, _ in observer.calls] == ["stage"] * len(STAGES)
    reports = {r.name: r for r in observer.of("stage")}
    assert list(reports) == list(STAGES)
    assert reports["initial_graph"].graph is s.initial and reports["quantized_graph"].graph is result.graph
    for name, report in reports.items():
        has_stats = name in ("after_statistics_collection", "thresholds_selection")
        assert (report.statistics is not None) == has_stats, name
        if has_stats:
            quantized = {n.name for n in report.graph.nodes() if n.quant.activation is not None}
            assert quantized and set(report.statistics) == quantized
        assert (len(report.quantized_weights) > 0) == (name == "quantized_graph"), name
        assert report.similarity is None and report.mixed_precision is None  # off without a log folder
        assert set(report.memory) == {n.name for n in report.graph.nodes()}
    weights = reports["quantized_graph"].quantized_weights
    assert set(weights) == {"d1", "d2", "d3"}
    for name in weights:  # the arrays the returned model computes with, not copies
        assert result.model.layer_weights(name)["kernel"] is weights[name]["kernel"]
        assert not np.array_equal(weights[name]["kernel"], KERNELS[name])
    assert result.similarity is None and info.similarity is None and info.mixed_precision is None


@pytest.mark.parametrize(
    "analyze, logging_on, on",
    [(None, False, False), (None, True, True), (True, False, True), (False, True, False)],
)
def test_the_similarity_comes_with_quantized_graph_when_the_resolved_config_asks(analyze, logging_on, on):
    s, observer = (
        session(DebugConfig(analyze_similarity=analyze, similarity_samples=24), logging_on),
        Recorder(),
    )
    assert s.config.debug_config.analyze_similarity is on
    result, info = quantize_in_stages(s, observer)
    reports = observer.of("stage")
    assert [r.name for r in reports if r.similarity is not None] == (["quantized_graph"] if on else [])
    similarity = reports[-1].similarity
    assert result.similarity is similarity
    if on:
        assert info.similarity is similarity.report and similarity.report.samples == 24
        assert {"relu1", "d3"} <= {layer.name for layer in similarity.report.layers}
    else:
        assert info.similarity is None


def test_a_budget_gives_the_mixed_precision_result_at_quantized_graph():
    s, observer = session(target=ResourceUtilization(weights_memory=BUDGET)), Recorder()
    result, info = quantize_in_stages(s, observer)
    reports = observer.of("stage")
    assert [r.name for r in reports if r.mixed_precision is not None] == ["quantized_graph"]
    mixed = reports[-1].mixed_precision
    assert info.mixed_precision is mixed and mixed.budget == BUDGET
    assert mixed.weights_memory <= BUDGET < mixed.weights_memory_8bit
    assert set(mixed.bits) == {"d1", "d2", "d3"} and min(mixed.bits.values()) < 8
    assert {n: result.graph.node(n).quant.weights["kernel"].n_bits for n in mixed.bits} == mixed.bits


# ------------------------------------------------------------------------ tuning
def test_tuning_reports_every_trial_and_keeps_float_the_layer_evaluate_asks_for():
    s, observer = session(), Recorder()
    best, result = tune(s, observer)
    trials = observer.of("trial")
    assert calls_in_short(observer) == [*STAGES, *(f"trial {n}" for n in range(1, len(trials) + 1)), "tuning"]
    assert len(trials) >= 2 and observer.of("tuning") == [result]
    for before, trial in zip(trials, trials[1:]):  # each trial keeps float what the one before did, and more
        assert trial.trial.kept_float[: len(before.trial.kept_float)] == before.trial.kept_float
        assert trial.trial.added and len(trial.trial.kept_float) > len(before.trial.kept_float)
    assert all("d2" not in t.trial.kept_float and t.trial.score == 0.0 for t in trials[:-1])
    last = trials[-1]
    assert (
        "d2" in last.trial.kept_float
        and last.trial.score == 1.0
        and last.graph.node("d2").quant.weights == {}
    )
    for t in trials:
        assert t.similarity is not None and t.float_graph is s.initial and t.baseline_score == 1.0
    assert (
        result.trials == [t.trial for t in trials] and result.target_met and result.best_trial == last.trial.n
    )
    assert best.graph is last.graph


def test_tuning_that_misses_the_drop_returns_the_best_trial_with_the_fewest_float_layers():
    s, observer = session(), Recorder()
    best, result = tune(s, observer, evaluate=lambda m: 1.0 if isinstance(m, NumpyModel) else 0.5,
                        config=TuningConfig(max_drop=0.1, max_trials=2))  # fmt: skip
    assert [t.trial.n for t in observer.of("trial")] == [1, 2] and observer.of("tuning") == [result]
    assert not result.target_met and result.best_trial == 1 and best.graph is observer.of("trial")[0].graph


# ------------------------------------------------------------------------ progress
def test_progress_covers_statistics_thresholds_analysis_and_trials_with_totals_where_known():
    # 3-bit outputs: their own error is not negligible, so their output impact is measured
    qc = QuantizationConfig(activation_n_bits=3)
    config = resolve_config(
        CoreConfig(quantization_config=qc, debug_config=DebugConfig(analyze_similarity=True)), False
    )
    s, observer = Session(model(), lambda: iter([[b] for b in BATCHES]), config, NumpyBackend()), Recorder()
    tune(s, observer, config=TuningConfig(max_drop=0.1, max_trials=3))
    steps = list(dict.fromkeys(p.step for p in observer.progress_events))
    assert steps[:4] == ["statistics", "thresholds", "similarity", "output impact"] and steps[-1] == "tuning"
    last = {}
    for p in observer.progress_events:
        assert p.total is None or 0 < p.done <= p.total, p
        last[p.step] = p
    assert last["statistics"].done == len(BATCHES) and last["statistics"].unit == "batches"
    assert last["thresholds"].done == last["thresholds"].total > 0 and last["thresholds"].unit == "layers"
    assert last["similarity"].total == s.config.debug_config.similarity_samples
    assert last["tuning"].total == 3 and last["tuning"].unit == "trials"


# ------------------------------------------------------------------------ nobody listening
def test_a_null_observer_gets_the_same_calls_and_nothing_is_written(tmp_path, monkeypatch):
    recorder, null = Recorder(), RecordingNullObserver()
    tune(session(DebugConfig(analyze_similarity=True)), recorder)
    monkeypatch.chdir(tmp_path)
    real_open, real_os_open = builtins.open, os.open

    def read_only_open(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+"):
            raise AssertionError(f"the pipeline opened {file!r} to write ({mode!r})")
        return real_open(file, mode, *args, **kwargs)

    def read_only_os_open(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND):
            raise AssertionError(f"the pipeline opened {path!r} to write")
        return real_os_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", read_only_open)
    monkeypatch.setattr(os, "open", read_only_os_open)
    tune(session(DebugConfig(analyze_similarity=True)), null)
    monkeypatch.undo()
    assert calls_in_short(null) == calls_in_short(recorder)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------ no framework
_NO_FRAMEWORK = """
import json, sys
for name in ("torch", "tensorflow", "keras"):
    sys.modules[name] = None  # `import torch` now raises ImportError
from model_compression_toolkit.core.config import DebugConfig, ResourceUtilization
from tests.fixtures.pipeline_session import BUDGET, Recorder, calls_in_short, session, tune

observer = Recorder()
tune(session(DebugConfig(analyze_similarity=True), target=ResourceUtilization(weights_memory=BUDGET)), observer)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "tensorflow", "keras") and sys.modules[m])
print(json.dumps({"calls": calls_in_short(observer), "loaded": loaded}))
"""


def test_the_pipeline_runs_with_torch_tensorflow_and_keras_unimportable():
    out = subprocess.run([sys.executable, "-c", _NO_FRAMEWORK], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["loaded"] == []
    assert result["calls"][: len(STAGES)] == list(STAGES) and result["calls"][-1] == "tuning"
