"""StatisticsCollector: exact merged histograms, per-channel statistics, non-finite values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from model_compression_toolkit.core.calibration.statistics import NodeStatistics, StatisticsCollector

FAST = settings(max_examples=40, deadline=None)

# magnitudes far from float32 subnormals, even once scaled by 1e-3
magnitudes = st.one_of(st.just(0.0), st.floats(2.0**-20, 1e4, width=32))
values = st.builds(lambda m, neg: -m if neg else m, magnitudes, st.booleans())
scales = st.sampled_from([1e-3, 1.0, 7.0, 1e3])


def batches_of(width: int):
    return hnp.arrays(np.float32, st.tuples(st.integers(1, 3), st.just(3), st.just(width)), elements=values)


batch = st.integers(1, 6).flatmap(batches_of)
scaled_batches = st.integers(1, 6).flatmap(
    lambda k: st.lists(st.tuples(batches_of(k), scales), min_size=1, max_size=5)
)


def feed(batches, n_bins=64, channel_axis=1) -> NodeStatistics:
    c = StatisticsCollector(n_bins, channel_axis)
    for b in batches:
        c.update(b)
    return c.result()


def assert_histogram_exact(s: NodeStatistics, data: np.ndarray) -> None:
    """Every value lies in [edges[i], edges[i+1]) of the bin it is counted in."""
    assert len(s.edges) == len(s.counts) + 1
    assert np.all(np.diff(s.edges) > 0)
    idx = np.searchsorted(s.edges, data.astype(np.float64), side="right") - 1
    assert idx.min() >= 0 and idx.max() < len(s.counts)
    np.testing.assert_array_equal(np.bincount(idx, minlength=len(s.counts)), s.counts)


@FAST
@given(scaled_batches, st.randoms())
def test_batches_in_any_order_match_one_batch(parts, rnd):
    batches = [b * np.float32(k) for b, k in parts]
    data = np.concatenate([b.reshape(-1) for b in batches])
    whole = feed([np.concatenate(batches, axis=0)])
    shuffled = list(batches)
    rnd.shuffle(shuffled)
    for s in (feed(batches), feed(shuffled), whole):
        assert s.count == data.size == s.counts.sum()
        assert s.min == data.min() and s.max == data.max()
        assert s.sum == pytest.approx(data.astype(np.float64).sum(), abs=1e-9 * float(np.abs(data).sum()))
        assert s.sum_squares == pytest.approx(np.square(data.astype(np.float64)).sum(), rel=1e-6)
        np.testing.assert_array_equal(s.min_per_channel, np.concatenate(batches).min(axis=(0, 2)))
        np.testing.assert_array_equal(s.max_per_channel, np.concatenate(batches).max(axis=(0, 2)))
        np.testing.assert_allclose(
            s.mean_per_channel, np.concatenate(batches).astype(np.float64).mean(axis=(0, 2)), rtol=1e-5, atol=1e-3
        )
        assert_histogram_exact(s, data)
        assert s.nonfinite == 0


@FAST
@given(batch, st.lists(st.tuples(st.integers(0, 200), st.sampled_from([np.nan, np.inf, -np.inf])), max_size=6))
def test_nonfinite_values_are_skipped_and_counted(b, bad):
    dirty = b.copy().reshape(-1)
    mask = np.ones(dirty.size, bool)
    for pos, value in bad:
        dirty[pos % dirty.size] = value
        mask[pos % dirty.size] = False
    dirty = dirty.reshape(b.shape)
    s = feed([dirty])
    clean = dirty.reshape(-1)[mask]
    assert s.nonfinite == (~mask).sum()
    assert s.count == clean.size == s.counts.sum()
    if clean.size:
        assert s.min == clean.min() and s.max == clean.max()
        assert np.isfinite(s.sum) and np.isfinite(s.sum_squares)
        assert_histogram_exact(s, clean)


def test_growing_range_keeps_bins_and_counts():
    rng = np.random.default_rng(0)
    c = StatisticsCollector(128, 1)
    data = []
    for k in range(12):
        b = (rng.standard_normal((2, 4, 50)) * 3.0**k + k).astype(np.float32)
        c.update(b)
        data.append(b.reshape(-1))
    s = c.result()
    assert len(s.counts) == 128
    assert_histogram_exact(s, np.concatenate(data))


def test_per_channel_statistics_nchw_and_nhwc():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 5, 6, 7)).astype(np.float32) + np.arange(5, dtype=np.float32)[None, :, None, None]
    for arr, axis, reduce in ((x, 1, (0, 2, 3)), (np.moveaxis(x, 1, -1), -1, (0, 1, 2))):
        s = feed([arr[:2], arr[2:]], channel_axis=axis)
        np.testing.assert_array_equal(s.min_per_channel, arr.min(axis=reduce))
        np.testing.assert_array_equal(s.max_per_channel, arr.max(axis=reduce))
        np.testing.assert_allclose(s.mean_per_channel, arr.astype(np.float64).mean(axis=reduce), rtol=1e-6)


def test_one_channel_for_none_and_flat_outputs():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for axis in (None, 1):
        s = feed([x], channel_axis=axis)
        assert s.min_per_channel.shape == (1,)
        assert s.mean_per_channel[0] == pytest.approx(5.5)
    s = feed([np.float32(3.0), np.float32(-1.0)], channel_axis=None)
    assert (s.min, s.max, s.count) == (-1.0, 3.0, 2)


@pytest.mark.parametrize("value", [0.0, 5.0, -2.5e-3])
def test_constant_tensor(value):
    x = np.full((2, 3, 4), value, np.float32)
    s = feed([x])
    assert s.min == s.max == np.float32(value) and s.count == 24
    assert np.all(np.isfinite(s.edges))
    assert_histogram_exact(s, x.reshape(-1))
    s = feed([x, x + 1])  # then grows
    assert_histogram_exact(s, np.concatenate([x.reshape(-1), x.reshape(-1) + 1]))


def test_float64_and_int_inputs():
    s = feed([np.array([[1.0, -2.0]]), np.array([[3, 4]], dtype=np.int32)], channel_axis=None)
    assert (s.min, s.max, s.count) == (-2.0, 4.0, 4)


def test_nothing_fed_gives_empty_statistics():
    s = StatisticsCollector(32).result()
    assert s.count == 0 and s.counts.sum() == 0 and len(s.edges) == 33
    assert (s.min, s.max) == (0.0, 0.0)


def test_all_nonfinite_batch():
    s = feed([np.full((1, 2, 3), np.nan, np.float32)])
    assert s.nonfinite == 6 and s.count == 0
    assert np.isnan(s.mean_per_channel).all()


def test_channel_count_change_raises():
    c = StatisticsCollector(16, 1)
    c.update(np.zeros((1, 3, 2), np.float32))
    with pytest.raises(ValueError, match="channels"):
        c.update(np.zeros((1, 4, 2), np.float32))
