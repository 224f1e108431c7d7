"""The similarity report names the quantizer that causes an accuracy drop, not the layer
where the drop shows, and its suggested fix, applied as it says, gives the accuracy back.

Each case is a trained digits CNN (shipped weights) damaged the way real models fail
(`tests.fixtures.damage`); the margins asserted are tens of points, or one point of float
accuracy where the fix is judged, so they hold on any CPU.
"""

from __future__ import annotations

import pytest

import model_compression_toolkit as mct
from tests.fixtures.damage import outlier_before_pool, outlier_channel
from tests.fixtures.trained import load_trained
from tutorials.digits import accuracy, representative_dataset

ANALYZE = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=True))


def quantize_and_fix(fw, model, x_train, x_test, y_test) -> tuple[float, float, float, mct.core.SimilarityReport]:
    """(float accuracy, quantized accuracy, accuracy with the suggested fix, the report)."""
    gen = representative_dataset(x_train)
    q_model, info = fw.ptq(model, gen, ANALYZE)
    fixed, _ = fw.ptq(model, gen, mct.core.CoreConfig(keep_float=info.similarity.suggested_fix()))
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
    assert names["activation"] in fix.activations, fix.code()
    assert fix.output_sqnr_db_after > fix.output_sqnr_db_before + 20
    assert fixed >= float_acc - 1.0, (float_acc, fixed, fix.code())


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
    assert set(fix.activations) == {names["activation"], names["pool"]} and names["consumer"] in fix.weights
    assert fixed >= float_acc - 1.0, (float_acc, fixed, fix.code())


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
