"""Compensated rounding is on the suggested fix's menu: where the kernels' rounding damages
the output, rounding them with their errors compensated keeps every grid (no byte, no float
layer, integer), and the search suggests it over more bits when it restores.

The model reads smooth signals (`tests.fixtures.smooth`: a 17-tap convolution, a dense
layer past a flatten) with 4-bit weights: each layer's weights alone leave the output under
the cause bound (about 18 dB), nearest rounding's errors adding up along correlated inputs;
compensated rounding gives about 28 dB, as the 8-bit weights the menu also tries do, at
their cost in bytes. Compensated rounding is the default: the calls here turn it off
(``weights_compensated_rounding=False``, MCT's nearest rounding), as a user comparing with
MCT would, and the fix turns it back on.
"""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.core.similarity.causes import CAUSE_DB, WEIGHTS
from model_compression_toolkit.core.similarity.suggested import RESTORE_DB
from tests.fixtures.smooth import layout, signals, smooth_model

CAP = 40.0  # dB: the tuning test's metric, the held-out output SQNR, is capped here


def _data(fw):
    calibration, held_out = layout(fw.name, signals(64, seed=1)), layout(fw.name, signals(64, seed=2))
    return (lambda: iter([[calibration[:32]], [calibration[32:]]])), held_out


def _sqnr(fw, model, q_model, x: np.ndarray) -> float:
    f, q = fw.predict(model)(x), fw.predict(q_model)(x)
    return float(10 * np.log10(np.sum(np.square(f)) / np.sum(np.square(q - f))))


def _config(rounding: bool = False, **core) -> mct.core.CoreConfig:
    """4-bit weights rounded to nearest (``rounding``: the call's ``weights_compensated_rounding``)."""
    return mct.core.CoreConfig(
        quantization_config=mct.core.QuantizationConfig(weights_n_bits=4, weights_compensated_rounding=rounding),
        debug_config=mct.core.DebugConfig(analyze_similarity=True),
        **core,
    )


@pytest.mark.parametrize("integer_only", [False, True], ids=["any target", "integer-only"])
def test_the_kernels_rounding_is_fixed_by_compensated_rounding_at_no_byte(fw, integer_only):
    model = smooth_model(fw.name)
    gen, held_out = _data(fw)
    config = _config(integer_only=integer_only)
    q_model, info = fw.ptq(model, gen, core_config=config)
    report = info.similarity
    weights_causes = [e for e in report.quantizers if e.cause and e.kind == WEIGHTS]
    assert weights_causes, report.summary()  # nearest rounding damages the output
    fix = report.suggested_fix()
    # the suggestion: the same grids, rounded with compensation; nothing float, no bits more
    assert fix.compensated_rounding and fix.restores, fix.summary()
    assert not (fix.activations or fix.weights or fix.weight_bits or fix.activation_bits), fix.summary()
    assert fix.weights_n_bits is None and fix.activation_n_bits is None, fix.summary()
    assert fix.weights_bytes_after == fix.weights_bytes_before, fix.summary()
    assert fix.activation_bytes_after == fix.activation_bytes_before, fix.summary()
    assert fix.output_sqnr_db_after >= RESTORE_DB and fix.output_sqnr_db_before < CAUSE_DB, fix.summary()
    # it was chosen over a candidate of more weight bits that restores too, at a cost
    costlier = [a for a in fix.alternatives if a.restores and not a.chosen and a.weights_bytes > 0]
    assert costlier, fix.summary()
    chosen = [a for a in fix.alternatives if a.chosen]
    assert [a.name for a in chosen] == ["compensated rounding"], fix.summary()
    assert "weights_compensated_rounding=True" in fix.code()
    assert "rounds the kernels with their errors compensated" in fix.summary()
    assert fix.to_dict()["compensated_rounding"] is True
    # applied as the report says, it gives the output back on signals calibration never saw
    fixed, _ = fw.ptq(model, gen, core_config=fix.apply(config))
    before, after = _sqnr(fw, model, q_model, held_out), _sqnr(fw, model, fixed, held_out)
    assert after >= before + 6 and after >= RESTORE_DB, (before, after)


def test_tuning_rounds_the_kernels_with_compensation_in_trial_2(fw):
    model = smooth_model(fw.name)
    gen, held_out = _data(fw)
    reference = fw.predict(model)(held_out)

    def evaluate(m) -> float:  # the output's SQNR on held-out signals, capped: float scores CAP
        noise = float(np.sum(np.square(fw.predict(m)(held_out) - reference)))
        return CAP if noise == 0 else min(CAP, 10 * np.log10(float(np.sum(np.square(reference))) / noise))

    tuned = getattr(mct.ptq, f"{fw.name}_tuned_post_training_quantization")
    allowed = CAP - RESTORE_DB  # the output kept at 20 dB or more
    config = _config(integer_only=True)  # trial 1 rounds every kernel to nearest
    _, info = tuned(model, gen, evaluate, mct.core.TuningConfig(max_drop=allowed), config)
    tuning = info.tuning
    first, best = tuning.trials[0], tuning.best
    assert first.drop > allowed, tuning.summary()  # nearest rounding loses it
    assert tuning.target_met and best.n == 2, tuning.summary()
    assert best.n_bits == {"weights_compensated_rounding": True}, tuning.summary()
    assert not best.kept_float and not best.weight_bits and not best.activation_bits, tuning.summary()
    assert "weights_compensated_rounding=True" in tuning.summary()


def test_the_input_moments_are_collected_only_when_a_candidate_rounds_with_compensation(fw, capfd):
    """The pass that collects them is a float pass over the calibration data: a healthy model
    (8-bit weights) pays nothing for the candidate, a damaged one (4-bit) one pass, shown as
    its own step."""
    model = smooth_model(fw.name)
    gen, _ = _data(fw)
    healthy = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=True))
    _, info = fw.ptq(model, gen, core_config=healthy)
    assert not info.similarity.causes(), info.similarity.summary()
    assert "input moments" not in capfd.readouterr().err
    _, info = fw.ptq(model, gen, core_config=_config())
    assert info.similarity.suggested_fix().compensated_rounding
    assert "input moments" in capfd.readouterr().err
