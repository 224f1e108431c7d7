"""The suggested fix gives the task back, judged where the harm lands and by the user's
metric when there is one: the search does not stop at the first candidate that lifts the
output over the cause bound (20 dB) when the task is still lost with it; it goes on through
the menu to the cheapest that restores, or says plainly that none does and what each gave.

The model is the trained digits CNN with an outlier channel (`tests.fixtures.damage`, case
a): equalizing the channels lifts its output from under 1 dB to 28-35 dB at no byte, and
the output SQNR alone calls that restored. The user here needs the logits themselves (a
teacher for distillation, a score read by a threshold): their metric is the logits' SQNR,
capped at `CAP` dB, and they allow a drop of `MAX_DROP` below the cap: 40 dB, which no
per-layer fix reaches and every activation and weight at 16 bits does (44 dB and more).
"""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.core.similarity.causes import CAUSE_DB, ImpactProbe
from model_compression_toolkit.core.similarity.fix import FixMenu, FixMetric, suggest_fix
from model_compression_toolkit.pipeline.backends import get_backend
from model_compression_toolkit.pipeline.session import produced_graph
from tests.fixtures.damage import outlier_channel
from tests.fixtures.digits import representative_dataset

ANALYZE = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=True))
CAP = 60.0  # dB: the user's metric, the logits' SQNR, is capped here (float scores CAP)
MAX_DROP = 20.0  # dB below the cap: the logits must keep 40 dB


def _logits_sqnr(fw, reference: np.ndarray, x: np.ndarray):
    """The user's metric: the SQNR (dB) of a model's logits on ``x`` against float's, capped."""

    def evaluate(model) -> float:
        predict = fw.predict(model)
        logits = np.concatenate([np.asarray(predict(x[i : i + 128])) for i in range(0, len(x), 128)])
        noise = float(np.mean(np.square(logits - reference)))
        return CAP if noise == 0 else min(CAP, 10 * np.log10(float(np.mean(np.square(reference))) / noise))

    return evaluate


@pytest.fixture
def damaged(fw, trained_digits):
    """The damaged model quantized with its report: what a fix search needs (the report's
    ranked quantizers, the quantized graph, a probe on the first 8 samples) and the user's
    metric."""
    model, x_train, x_test, _ = trained_digits
    bad, _ = outlier_channel(fw.name, model, x_train[:256])
    gen = representative_dataset(x_train)
    q_model, info = fw.ptq(bad, gen, core_config=ANALYZE)
    x = x_test
    reference = np.concatenate([np.asarray(fw.predict(bad)(x[i : i + 128])) for i in range(0, len(x), 128)])
    graph = produced_graph(q_model)
    assert graph is not None
    probe = ImpactProbe(get_backend(bad), graph, [[x_train[:8]]])
    return bad, gen, _logits_sqnr(fw, reference, x), info.similarity.quantizers, graph, probe


def test_judged_by_the_metric_the_search_goes_past_a_fix_over_20_db_that_loses_it(fw, damaged):
    bad, gen, evaluate, entries, graph, probe = damaged
    by_sqnr = suggest_fix(entries, graph, probe, menu=FixMenu())
    by_metric = suggest_fix(entries, graph, probe, menu=FixMenu(metric=FixMetric(evaluate, CAP, MAX_DROP)))
    # the first candidate (equalization: no byte) lifts the output over the cause bound, and
    # by the output SQNR alone it is the fix ...
    assert by_sqnr.equalize and by_sqnr.output_sqnr_db_after > CAUSE_DB, by_sqnr.summary()
    first = by_metric.alternatives[0]
    assert first.name == "equalize channels" and first.output_sqnr_db > CAUSE_DB, by_metric.summary()
    # ... yet the user's metric is still lost with it: listed, with what it gave, not suggested
    assert first.metric < CAP - MAX_DROP and first.restores is False and not first.chosen, by_metric.summary()
    # the search went on and suggests the cheapest candidate the metric calls restored
    assert by_metric.restores and by_metric.metric_after >= CAP - MAX_DROP, by_metric.summary()
    assert not by_metric.equalize and by_metric.note is None, by_metric.summary()
    measured = [a for a in by_metric.alternatives if a.allowed]
    assert len(measured) >= 2 and [a.chosen for a in measured].count(True) == 1, by_metric.summary()
    assert f"metric {by_metric.metric_after:.4g}" in by_metric.summary()
    # applied as the report says, in a PTQ call of its own, it keeps more of the logits than
    # the candidate it went past
    fixed, _ = fw.ptq(bad, gen, core_config=by_metric.apply(mct.core.CoreConfig()))
    assert evaluate(fixed) > first.metric + 3.0, by_metric.summary()


def test_when_no_candidate_gives_the_metric_back_the_fix_says_so_and_what_each_gave(fw, damaged):
    """A bar no quantized model reaches (over the cap): the suggestion is the
    candidate that gives the most, and its words say plainly that no fix tried restores,
    with what each gave."""
    _, _, evaluate, entries, graph, probe = damaged
    fix = suggest_fix(entries, graph, probe, menu=FixMenu(metric=FixMetric(evaluate, CAP + 1.0, 0.0)))
    measured = [a for a in fix.alternatives if a.allowed]
    assert len(measured) >= 3 and not any(a.restores for a in measured), fix.summary()
    assert fix.restores is False and fix.metric_after == max(a.metric for a in measured), fix.summary()
    assert fix.note is not None and fix.note.startswith("No fix tried restores"), fix.summary()
    for a in measured:  # each candidate, with the metric and the output SQNR it gave
        assert f"{a.change} gave metric {a.metric:.4g}, output SQNR {a.output_sqnr_db:.1f} dB" in fix.note
    assert fix.note in fix.summary() and fix.note in fix.effects()


def test_a_spread_loss_with_no_cause_is_also_tried_with_every_activation_and_weight_wider(fw, damaged):
    """With no causes' fix to combine with, the menu still holds every activation and every
    weight at 16 bits together: a loss spread over both kinds that neither setting alone
    restores (held-out PicoDet: 93.4 % and 44.8 % of its float detections, both 99.4 %)."""
    from types import SimpleNamespace

    from model_compression_toolkit.core.similarity.fix import _wider

    _, _, _, entries, graph, _ = damaged
    search = SimpleNamespace(graph=graph, menu=FixMenu(), before=10.0)
    spread, combined = _wider(search, entries, None)
    assert [f.activation_n_bits for f in spread[0]] == [16] and [f.weights_n_bits for f in spread[1]] == [16]
    (both,) = combined
    assert (both.activation_n_bits, both.weights_n_bits) == (16, 16) and not both.weights and not both.activations
    assert both.spread and "no quantizer alone damages it" in both.spread
    # an integer target without 16-bit activations gets no such candidate
    narrow = SimpleNamespace(graph=graph, menu=FixMenu(activation_bits=8), before=10.0)
    assert not _wider(narrow, entries, None)[1]
