"""AnchoredBins: power-of-two bins anchored at zero, and a collector's histogram summed onto them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from model_compression_toolkit.core.calibration.bins import MAX_BINS, AnchoredBins
from model_compression_toolkit.core.calibration.statistics import StatisticsCollector

FAST = settings(max_examples=60, deadline=None)
finite = st.floats(-1e6, 1e6, allow_nan=False, width=32)
arrays = hnp.arrays(np.float32, st.integers(1, 300), elements=finite)


@FAST
@given(finite, finite, st.one_of(st.none(), st.integers(-30, 5)))
def test_covering_holds_the_range_in_at_most_max_bins(a, b, finest):
    lo, hi = min(a, b), max(a, b)
    bins = AnchoredBins.covering(lo, hi, finest)
    edges = bins.edges()
    assert 1 <= bins.count <= MAX_BINS and edges.size == bins.count + 1
    assert edges[0] <= lo and hi < edges[-1]
    assert np.all(np.diff(edges) == math.ldexp(1.0, bins.e))
    if finest is not None:
        assert bins.e >= finest
    if hi > lo and finest is None:  # the finest such bins: half the width would not do
        assert math.floor(math.ldexp(hi, 1 - bins.e)) - math.floor(math.ldexp(lo, 1 - bins.e)) >= MAX_BINS


@FAST
@given(arrays, finite, finite)
def test_counts_match_numpy_on_the_same_edges_with_outliers_in_the_end_bins(values, a, b):
    bins = AnchoredBins.covering(min(a, b), max(a, b))
    edges = bins.edges()
    counts = bins.counts(values)
    inside = values[(values >= edges[0]) & (values < edges[-1])]
    expected, _ = np.histogram(inside.astype(np.float64), bins=edges)
    expected[0] += np.count_nonzero(values < edges[0])
    expected[-1] += np.count_nonzero(values >= edges[-1])
    assert counts.sum() == values.size
    np.testing.assert_array_equal(counts, expected)


@FAST
@given(st.lists(arrays, min_size=1, max_size=4), st.integers(0, 3))
def test_a_collector_histogram_sums_onto_coarser_bins_exactly(batches, coarser):
    """The float side of the comparison's histograms: no value is binned twice."""
    collector = StatisticsCollector(64, channel_axis=None)
    for batch in batches:
        collector.update(batch)
    stats = collector.result()
    fine = AnchoredBins.of_edges(stats.edges)
    np.testing.assert_array_equal(fine.edges(), stats.edges)
    bins = AnchoredBins.covering(stats.min, stats.max, finest=fine.e + coarser)
    values = np.concatenate(batches)
    np.testing.assert_array_equal(bins.sum_from(stats.counts, fine), bins.counts(values))


def test_finer_bins_than_the_collector_kept_are_refused():
    fine = AnchoredBins(e=-2, first=0, count=8)
    with pytest.raises(ValueError, match="no coarser than"):
        AnchoredBins(e=-3, first=0, count=16).sum_from(np.ones(8), fine)


@FAST
@given(st.lists(arrays, min_size=2, max_size=4))
def test_histogram_without_the_last_values_is_the_histogram_of_the_rest(batches):
    """How the statistics pass takes the histogram of exactly the first samples."""
    collector = StatisticsCollector(64, channel_axis=None)
    for batch in batches:
        collector.update(batch)
    last = batches[-1]
    cut = len(last) // 2
    counts, edges = collector.histogram_without(last[cut:])
    kept = np.concatenate([*batches[:-1], last[:cut]])
    assert counts.sum() == kept.size
    width = edges[1] - edges[0]  # a power of two: the division is exact
    index = np.floor(kept.astype(np.float64) / width).astype(np.int64) - round(edges[0] / width)
    np.testing.assert_array_equal(counts, np.bincount(index, minlength=counts.size))
