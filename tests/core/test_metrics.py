"""Similarity metrics: the conventions the report promises, and never a NaN or inf."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from model_compression_toolkit.core.similarity.metrics import SQNR_CEILING_DB, compare


def test_identical_tensors_give_cosine_one_and_the_sqnr_ceiling():
    x = np.random.default_rng(0).normal(size=(3, 4, 5))
    m = compare(x, x.copy())
    np.testing.assert_allclose(m.cosine, 1.0)
    np.testing.assert_array_equal(m.sqnr_db, SQNR_CEILING_DB)
    np.testing.assert_array_equal(m.mse, 0.0)
    np.testing.assert_array_equal(m.max_abs, 0.0)


def test_zero_tensors_follow_the_documented_conventions():
    zero, x = np.zeros((1, 8)), np.ones((1, 8))
    assert compare(zero, zero).cosine[0] == 1.0  # both all-zero: identical, not the worst
    assert compare(zero, x).cosine[0] == 0.0
    assert compare(x, zero).cosine[0] == 0.0
    assert compare(zero, x).sqnr_db[0] == -SQNR_CEILING_DB


def test_known_values():
    a = np.array([[1.0, 0.0], [3.0, 4.0]])
    b = np.array([[0.0, 1.0], [3.0, 3.0]])
    m = compare(a, b)
    np.testing.assert_allclose(m.cosine, [0.0, 21 / (5 * np.sqrt(18))])
    np.testing.assert_allclose(m.mse, [1.0, 0.5])
    np.testing.assert_allclose(m.sqnr_db, [10 * np.log10(1 / 2), 10 * np.log10(25 / 1)])
    np.testing.assert_allclose(m.max_abs, [1.0, 1.0])
    np.testing.assert_allclose(compare(a, -a).cosine, -1.0)


@settings(max_examples=60, deadline=None)
@given(
    arrays(np.float32, (4, 6), elements=st.floats(width=32, allow_nan=True, allow_infinity=True)),
    arrays(np.float32, (4, 6), elements=st.floats(width=32, allow_nan=True, allow_infinity=True)),
)
def test_metrics_are_always_finite(a, b):
    m = compare(a, b)
    for values in (m.cosine, m.mse, m.sqnr_db, m.max_abs):
        assert values.shape == (4,)
        assert np.isfinite(values).all()
    assert (np.abs(m.cosine) <= 1).all()


def _float64_metrics(a, b):
    a, b = (np.nan_to_num(x.reshape(len(x), -1).astype(np.float64), nan=0, posinf=0, neginf=0) for x in (a, b))
    d = a - b
    aa, bb, ab, dd = (np.einsum("ij,ij->i", x, y) for x, y in ((a, a), (b, b), (a, b), (d, d)))
    return ab / np.sqrt(aa * bb), 10 * np.log10(aa / dd), dd / a.shape[1], np.abs(d).max(axis=1)


@pytest.mark.parametrize("magnitude", [1.0, 1e-22, 1e21])
def test_long_float32_rows_match_float64_sums(magnitude):
    """Layer-sized rows (blocks summed in float32, extremes redone in float64) match a float64 reference."""
    rng = np.random.default_rng(7)
    a = (np.maximum(rng.standard_normal((3, 64, 56, 56)), 0) * magnitude).astype(np.float32)
    step = np.float32(magnitude / 40)
    b = (np.round(a / step) * step).astype(np.float32)
    b[2, :, :8] = np.float32(np.inf)  # a non-finite stretch counts as zero
    b[1, :24] = 0  # a quantizer's zeros over a whole block of 64K values
    b[1, 24:48] = np.float32(magnitude * 1e-20)  # values whose float32 squares underflow
    m = compare(a, b)
    cosine, sqnr, mse, max_abs = _float64_metrics(a, b)
    np.testing.assert_allclose(m.cosine, cosine, rtol=0, atol=2e-7)
    np.testing.assert_allclose(m.sqnr_db, sqnr, rtol=0, atol=1e-4)
    np.testing.assert_allclose(m.mse, mse, rtol=1e-5)
    np.testing.assert_allclose(m.max_abs, max_abs, rtol=1e-6)
    assert 0.9 < m.cosine[0] < 0.99999 and m.cosine[2] < m.cosine[0]
