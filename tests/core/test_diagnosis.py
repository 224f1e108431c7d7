"""The similarity report names the quantizer that causes an accuracy drop, not the layer
where the drop shows, and its suggested fix, applied as it says, gives the accuracy back.

Each case is a trained digits CNN (shipped weights) damaged the way real models fail
(`tests.fixtures.damage`); the margins asserted are tens of points, or one point of float
accuracy where the fix is judged, so they hold on any CPU.
"""

from __future__ import annotations

import dataclasses

import pytest

import model_compression_toolkit as mct
from tests.fixtures.damage import outlier_before_pool, outlier_channel
from tests.fixtures.digits import accuracy, representative_dataset
from tests.fixtures.trained import load_trained

ANALYZE = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=True))


def quantize_and_fix(
    fw, model, x_train, x_test, y_test, config: mct.core.CoreConfig = ANALYZE
) -> tuple[float, float, float, mct.core.SimilarityReport]:
    """(float accuracy, quantized accuracy, accuracy with the suggested fix, the report).

    The fix is applied as the report says: ``keep_float=info.similarity.suggested_fix()``
    in the same configuration."""
    gen = representative_dataset(x_train)
    q_model, info = fw.ptq(model, gen, core_config=config)
    fixed, _ = fw.ptq(model, gen, core_config=dataclasses.replace(config, keep_float=info.similarity.suggested_fix()))
    return (
        accuracy(fw.predict(model), x_test, y_test),
        accuracy(fw.predict(q_model), x_test, y_test),
        accuracy(fw.predict(fixed), x_test, y_test),
        info.similarity,
    )


def test_case_a_an_outlier_channel_is_named_as_the_cause_and_the_fix_works(fw, trained_digits):
    model, x_train, x_test, y_test = trained_digits
    bad, names = outlier_channel(fw.name, model, x_train[:256])
    float_acc, quantized, fixed, report = quantize_and_fix(fw, bad, x_train, x_test, y_test)
    assert quantized < float_acc - 30, (float_acc, quantized)  # the failure is real
    first = report.quantizers[0]
    assert (first.name, first.kind, first.cause) == (names["activation"], "activation", True), report.summary()
    # over the whole tensor the damage hides behind the outlier channel; per channel it shows
    assert first.sqnr_db > 30 and first.channel_sqnr_median_db < 15
    assert first.zero_rounded_percent > 50 and first.channel_range_spread > 50
    assert report.ranked()[0].name == names["activation"] and report.ranked()[0].role == "cause"
    fix = report.suggested_fix()
    # the cheapest fix that restores: the outlier channel's scale moved into the next conv's
    # weights (exact in float, no byte more, every layer integer at 8 bits) ...
    assert fix.equalize and not fix.activations and not fix.weights and not fix.activation_bits, fix.code()
    assert fix.output_sqnr_db_after > fix.output_sqnr_db_before + 20
    assert fixed >= float_acc - 1.0, (float_acc, fixed, fix.code())
    # ... listed beside the per-layer fix it was measured against: the outlier at 16 bits
    tried = {a.name: a for a in fix.alternatives}
    assert tried["equalize channels"].chosen and "more bits" in tried, [a.line() for a in fix.alternatives]
    assert tried["more bits"].activation_bytes > 0 == tried["equalize channels"].activation_bytes


def test_case_b_an_outlier_through_a_pooling_makes_both_quantizers_causes(fw):
    """The max pooling after the outlier activation quantizes the same values again: both
    are causes, and so are the next conv's weights, whose input channel for the outlier
    (scaled down to match it) rounds to zero whole."""
    x_train, _, x_test, y_test = fw.data()
    bad, names = outlier_before_pool(fw.name, load_trained(fw.name, "pool_cnn"), x_train[:256])
    float_acc, quantized, fixed, report = quantize_and_fix(fw, bad, x_train, x_test, y_test)
    assert quantized < float_acc - 30, (float_acc, quantized)
    top = {(q.name, q.kind) for q in report.quantizers[:2]}
    assert top == {(names["activation"], "activation"), (names["pool"], "activation")}, report.summary()
    assert all(q.cause for q in report.quantizers[:2])
    consumer = report.quantizer(names["consumer"], "weights")
    assert consumer.cause and consumer.lost_input_channels_percent > 0
    fix = report.suggested_fix()
    # equalization passes the max pooling (it commutes with a positive per-channel scale)
    assert fix.equalize and not fix.activations and not fix.weights, fix.code()
    assert any(names["pool"] in pair for pair in fix.equalized_pairs), fix.equalized_pairs
    assert fixed >= float_acc - 1.0, (float_acc, fixed, fix.code())


def test_case_c_a_layer_given_too_few_bits_is_the_cause_and_gets_more(fw, trained_digits):
    """The second conv's weights at 2 bits (the user's `BitWidthConfig`), rounded to nearest
    as MCT's PTQ does: they are the first cause, and the fix gives them the fewest bits that
    make them harmless. (Compensated rounding keeps these 2-bit weights within a few points:
    no damage to diagnose.)"""
    model, x_train, x_test, y_test = trained_digits
    # Keras names the layer after the convs made before it in the process
    conv = "3" if fw.name == "pytorch" else [layer.name for layer in model.layers if type(layer).__name__ == "Conv2D"][1]
    bits = mct.core.BitWidthConfig()
    bits.set_manual_weights_bit_width(mct.core.common.network_editors.NodeNameFilter(conv), 2)
    nearest = dataclasses.replace(ANALYZE.quantization_config, weights_compensated_rounding=False)
    config = dataclasses.replace(ANALYZE, bit_width_config=bits, quantization_config=nearest)
    float_acc, quantized, fixed, report = quantize_and_fix(fw, model, x_train, x_test, y_test, config)
    assert quantized < float_acc - 5, (float_acc, quantized)
    first = report.quantizers[0]
    assert (first.name, first.kind, first.bits, first.cause) == (conv, "weights", 2, True), report.summary()
    fix = report.suggested_fix()
    assert fix.weight_bits.get(conv, 0) > 2 and not fix.weights and not fix.activations, fix.code()
    assert fixed >= float_acc - 1.0, (float_acc, fixed, fix.code())


def test_case_d_an_activation_whose_threshold_clips_is_the_cause(fw, trained_digits):
    """The first ReLU's threshold search leaves out values beyond 2 standard deviations
    (MCT's ``z_threshold``, set for that layer with the network editor): its grid clips
    the rare large values the next layers rely on."""
    model, x_train, x_test, y_test = trained_digits
    # Keras names the layer after the ReLUs made before it in the process
    relu = "2" if fw.name == "pytorch" else next(layer.name for layer in model.layers if type(layer).__name__ == "ReLU")
    editor = mct.core.network_editor
    rule = editor.EditRule(
        filter=mct.core.common.network_editors.NodeNameFilter(relu),
        action=editor.ChangeCandidatesActivationQuantConfigAttr(z_threshold=2),
    )
    config = dataclasses.replace(ANALYZE, debug_config=dataclasses.replace(ANALYZE.debug_config, network_editor=[rule]))
    float_acc, quantized, fixed, report = quantize_and_fix(fw, model, x_train, x_test, y_test, config)
    assert quantized < float_acc - 5, (float_acc, quantized)
    first = report.quantizers[0]
    assert (first.name, first.kind, first.cause) == (relu, "activation", True), report.summary()
    assert first.clipped_percent > 1 and first.zero_rounded_percent < 5  # clipped, not rounded away
    assert report.suggested_fix().activations == [relu]
    assert fixed >= float_acc - 1.0, (float_acc, fixed)


def test_case_e_a_model_with_nothing_wrong_has_no_cause(fw, trained_digits):
    model, x_train, x_test, y_test = trained_digits
    float_acc, quantized, _, report = quantize_and_fix(fw, model, x_train, x_test, y_test)
    assert quantized >= float_acc - 1.0
    assert report.causes() == [] and len(report.suggested_fix()) == 0, report.summary()
    assert all(layer.role is None for layer in report.layers)
    # nothing needed its impact measured: every quantizer's own error is low
    assert all(q.output_sqnr_db is None and q.own_db > 30 for q in report.quantizers)


@pytest.mark.parametrize("bad_value", ["x", -1, True])
def test_impact_settings_are_checked(bad_value):
    with pytest.raises(mct.errors.ConfigurationError, match="impact_samples must be an integer >= 0"):
        mct.core.CoreConfig(debug_config=mct.core.DebugConfig(impact_samples=bad_value)).validate()


def test_case_a_tuned_ptq_applies_the_fix_and_keeps_the_compression(fw, trained_digits):
    """Tuning uses the same ranking: trial 2 is the first trial's suggested fix (the channels
    equalized: nothing float, no bits added), which meets a 1-point drop and keeps the whole
    weight compression; the summary says so."""
    model, x_train, x_test, y_test = trained_digits
    bad, names = outlier_channel(fw.name, model, x_train[:256])
    tuned = mct.ptq.pytorch_tuned_post_training_quantization if fw.name == "pytorch" else (
        mct.ptq.keras_tuned_post_training_quantization
    )

    def evaluate(m):
        return accuracy(fw.predict(m), x_test, y_test)

    config = mct.core.TuningConfig(max_drop=1.0, max_trials=2)
    _, info = tuned(bad, representative_dataset(x_train), evaluate, config)
    tuning = info.tuning
    assert tuning.target_met and len(tuning.trials) == 2, tuning.summary()
    best = tuning.best
    assert best.equalized and not best.activation_bits and not best.kept_float, tuning.summary()
    assert "channels equalized" in tuning.summary()
    saved = tuning.baseline_weights_bytes - best.weights_bytes
    full = tuning.baseline_weights_bytes - tuning.trials[0].weights_bytes
    assert saved >= 0.7 * full, (saved / full, tuning.summary())
