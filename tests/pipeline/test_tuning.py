"""Accuracy-driven tuning: the damaged layer is kept float, and every trial reads back inside the
call's own runs (a graph tag and a histogram step per trial)."""

from __future__ import annotations

import json
import re

import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.core.preparation import KEPT_FLOAT
from model_compression_toolkit.errors import ConfigurationError
from model_compression_toolkit.observers.stage_view import stage_run
from tests.fixtures import digits
from tests.fixtures.damage import outlier_weight
from tests.fixtures.digits import representative_dataset
from tests.fixtures.tb import load, run_folders, tagged_graphs

PER_TENSOR = mct.core.CoreConfig(
    quantization_config=mct.core.QuantizationConfig(
        weights_per_channel=False, weights_error_method=mct.core.QuantizationErrorMethod.NOCLIPPING
    )
)
BASELINE = re.compile(r"baseline_acc_\d+\.\d{4}")
TRIAL = re.compile(r"tune_(\d+)_acc_\d+\.\d{4}")


def tuned_ptq(fw):
    return (
        mct.ptq.pytorch_tuned_post_training_quantization
        if fw.name == "pytorch"
        else mct.ptq.keras_tuned_post_training_quantization
    )


def damaged(fw, trained_digits):
    """(damaged model, the conv whose weights are damaged, data gen, evaluate)."""
    model, x_train, x_test, y_test = trained_digits
    bad, culprit = outlier_weight(fw.name, model)

    def evaluate(m):
        return digits.accuracy(fw.predict(m), x_test, y_test)

    return bad, culprit, representative_dataset(x_train), evaluate


def test_tuning_fixes_the_damaged_layer_and_logs_every_trial(fw, trained_digits, tmp_path):
    bad, culprit, gen, evaluate = damaged(fw, trained_digits)
    mct.set_log_folder(tmp_path)
    # 4 points (16 of 397 test images): plain PTQ drops about 50 (PyTorch) and 68 (Keras),
    # keeping the culprit's weights float about 2.5 (the rest is per-tensor weights
    # everywhere), so a few images more or less on another CPU change no verdict
    config = mct.core.TuningConfig(max_drop=4.0, max_trials=3)
    q_model, info = tuned_ptq(fw)(bad, gen, evaluate, config, PER_TENSOR)

    tuning = info.tuning
    best = tuning.best
    assert tuning.target_met and 2 <= len(tuning.trials) <= 3, tuning.summary()
    assert tuning.trials[0].drop > 4.0 and best.drop <= 4.0
    assert evaluate(q_model) == pytest.approx(best.score)
    # trial 2 is the report's fix judged by evaluate: the cheapest that gives the score back.
    # Equalizing the culprit's channels or giving its weights more bits keeps nothing float;
    # where neither restores the score, the culprit's weights are kept float (the report's
    # cause), never anything else.
    second = tuning.trials[1]
    assert not second.kept_activations and set(second.kept_weights) <= {culprit}, tuning.summary()
    assert set(second.weight_bits) <= {culprit} and not second.activation_bits, tuning.summary()
    if second.kept_weights:
        assert second.added == [f"{culprit} (weights)"], tuning.summary()
        assert culprit in best.kept_weights and culprit not in best.kept_activations, tuning.summary()
        assert info.layers[culprit].weights_float_reason == KEPT_FLOAT and info.layers[culprit].weights == {}
        assert not info.similarity.causes()
    elif second.weight_bits:
        assert second.weight_bits[culprit] > 8 and second.added == [f"{culprit} (weights, {second.weight_bits[culprit]} bits)"]
        assert not best.kept_float and info.layers[culprit].weights, tuning.summary()
    else:
        assert second.equalized and any(culprit in pair.split(" -> ") for pair in second.equalized), tuning.summary()
        assert not best.kept_float and info.layers[culprit].weights, tuning.summary()
    json.dumps(info.to_dict(), allow_nan=False)

    (run,) = run_folders(tmp_path)
    names = sorted(p.name for p in run.iterdir() if p.is_dir())
    assert not [n for n in names if BASELINE.fullmatch(n) or TRIAL.fullmatch(n)]  # no run of their own
    assert run.name.split("_")[-2] == "tuned" and stage_run("quantized_graph") in names  # trial 1: the plain PTQ
    runs = {p.parent for p in run.rglob("events.out.tfevents.*")}
    assert len(runs) == 8  # a tuned call writes the runs a plain call writes: five calls stay under 40
    acc = load(run / stage_run("quantized_graph"))
    # each later trial's graph is a tag of the run, served by TensorBoard's own Graphs plugin
    graphs = tagged_graphs(run, stage_run("quantized_graph"))
    later = [t for t in tuning.trials if t.n > 1]
    assert later and set(graphs) == {t.run_name for t in later}, sorted(graphs)
    for t in later:
        assert all(f'name: "{n}"' in graphs[t.run_name] for n in acc_names(acc)), t.run_name
    # the compare points' histograms: float at step 0, trial n at step n
    compare = [t for t in acc.Tags()["histograms"] if t in {layer.name for layer in info.similarity.layers}]
    assert compare
    trials = [t.n for t in tuning.trials]
    assert all([e.step for e in acc.Histograms(t)] == [0, *trials] for t in compare)
    steps = [e.step for e in acc.Scalars("tuning/accuracy")]
    assert steps == list(range(len(tuning.trials) + 1))
    assert acc.Scalars("tuning/accuracy")[0].value == pytest.approx(tuning.baseline_score)
    assert "tuning/trials" in acc.Tags()["tensors"]


def acc_names(acc) -> set[str]:
    """The run graph's layer nodes (the colour legend's nodes left out): every trial's graph
    has the same layers, kept float or not."""
    return {node.name for node in acc.Graph().node if node.op != "legend"}


def test_target_not_met_warns_and_returns_the_best_trial(fw, trained_digits):
    bad, _, gen, evaluate = damaged(fw, trained_digits)
    config = mct.core.TuningConfig(max_drop=0.0, max_trials=1)
    with pytest.warns(UserWarning, match="did not meet the allowed drop"):
        q_model, info = tuned_ptq(fw)(bad, gen, evaluate, config, PER_TENSOR)
    assert not info.tuning.target_met and [t.n for t in info.tuning.trials] == [1]
    assert info.tuning.best_trial == 1 and info.tuning.best.kept_float == []
    assert any("did not meet" in w for w in info.warnings)
    assert q_model is not None and info.log_folder is None


def test_relative_drop_without_log_folder(fw, trained_digits, tmp_path):
    bad, culprit, gen, evaluate = damaged(fw, trained_digits)
    config = mct.core.TuningConfig(max_drop=0.06, relative=True, max_trials=3)
    q_model, info = tuned_ptq(fw)(bad, gen, evaluate, config, PER_TENSOR)
    tuning = info.tuning
    assert tuning.relative and tuning.target_met and not tuning.best.kept_activations, tuning.summary()
    best = tuning.best  # the culprit's fix: its weights float or on more bits, or its channels equalized
    assert best.kept_weights or best.weight_bits or best.equalized, tuning.summary()
    assert tuning.best.drop == pytest.approx(
        (tuning.baseline_score - tuning.best.score) / tuning.baseline_score
    )
    assert info.similarity is not None and info.log_folder is None
    json.dumps(info.to_dict(), allow_nan=False)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "evaluate, tuning_config, message",
    [
        ("accuracy", None, "evaluate must be a callable.*got str"),
        (lambda m: 1.0, {"max_drop": 1.0}, "tuning_config must be a mct.core.TuningConfig; got dict"),
        (lambda m: 1.0, mct.core.TuningConfig(max_drop=-1), "max_drop must be a finite number >= 0"),
        (lambda m: float("nan"), None, "evaluate must return a finite number.*float model.*nan"),
        (lambda m: "97%", None, "evaluate must return a finite number"),
    ],
)
def test_bad_evaluate_or_config_fails_before_any_file(fw, tmp_path, evaluate, tuning_config, message):
    x_train = fw.data()[0]
    mct.set_log_folder(tmp_path)
    with pytest.raises(ConfigurationError, match=message):
        tuned_ptq(fw)(fw.make_digits_cnn(), representative_dataset(x_train), evaluate, tuning_config)
    assert not list(tmp_path.iterdir())
