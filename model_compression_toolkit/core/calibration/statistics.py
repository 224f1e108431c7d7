"""Activation statistics collected in one pass over the representative data.

Per node: a histogram with a fixed number of bins over a range that grows as data
arrives (bins merge when it grows, so counts stay exact), the count, sum and sum of
squares of all values, and min, max and mean per channel. Nothing per sample is kept:
memory is O(nodes x bins) whatever the size of the data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class NodeStatistics:
    """Statistics of one node's output activation.

    Attributes:
        counts: histogram counts, one per bin.
        edges: bin edges, ``len(counts) + 1`` of them (left edge first).
        count: number of finite values seen (== counts.sum()).
        sum / sum_squares: of all finite values.
        min / max: of all finite values.
        min_per_channel / max_per_channel / mean_per_channel: along the channel axis.
        nonfinite: number of NaN/inf values skipped.
        mean_per_feature: for a (batch, features) output, which counts as one channel above,
            the mean of each feature (what bias correction needs of a dense layer's input);
            None for other outputs.
        mean_square_per_channel / mean_square_per_feature: ``E[x^2]`` likewise, when the
            collector was asked for second moments (what ``HMSE`` weighs weights by); None
            otherwise.
    """

    counts: np.ndarray
    edges: np.ndarray
    count: int
    sum: float
    sum_squares: float
    min: float
    max: float
    min_per_channel: np.ndarray
    max_per_channel: np.ndarray
    mean_per_channel: np.ndarray
    nonfinite: int = 0
    mean_per_feature: np.ndarray | None = None
    mean_square_per_channel: np.ndarray | None = None
    mean_square_per_feature: np.ndarray | None = None


_CHUNK = 1 << 16  # values per histogram step: the float64 buffers stay in cache
OUTLIER_RANGE_RATIO = 10.0  # a channel whose range is over this many median ranges is an outlier


def range_spread(low: np.ndarray, high: np.ndarray) -> float | None:
    """The largest channel range (max - min) over the median channel range; None when the
    median channel has no range. An outlier channel shows as a spread of hundreds."""
    ranges = np.asarray(high, dtype=np.float64) - np.asarray(low, dtype=np.float64)
    ranges = ranges[np.isfinite(ranges)]
    if ranges.size == 0:
        return None
    median = float(np.median(ranges))
    return float(ranges.max() / median) if median > 0 and math.isfinite(median) else None


def outlier_channels(low: np.ndarray, high: np.ndarray, ratio: float = OUTLIER_RANGE_RATIO) -> np.ndarray:
    """Indices of the channels whose range is over ``ratio`` times the median channel's,
    widest first: on a per-tensor grid each takes the levels the other channels need."""
    ranges = np.asarray(high, dtype=np.float64) - np.asarray(low, dtype=np.float64)
    finite = np.isfinite(ranges)
    if not finite.any():
        return np.zeros(0, dtype=np.int64)
    median = float(np.median(ranges[finite]))
    if not median > 0:
        return np.zeros(0, dtype=np.int64)
    wide = np.flatnonzero(finite & (ranges > ratio * median))
    return wide[np.argsort(-ranges[wide], kind="stable")]


class StatisticsCollector:
    """Reduces a stream of activation batches to a :class:`NodeStatistics`.

    ``batch -> update() -> (histogram, sums, per-channel min/max/sum) -> result()``

    The histogram has ``n_bins`` bins of width ``2**e`` whose edges are integer
    multiples of the width, so the grid is anchored at zero. When a batch falls outside
    the range, the width is multiplied by ``2**k`` and every old bin lands whole in one
    new bin: counts stay exact. Bin indices are ``floor(x * 2**-e) - L`` in float64,
    which is exact (scaling by a power of two, then integer arithmetic), so each value
    lies in ``[edges[i], edges[i + 1])`` of the bin it is counted in.

    Args:
        n_bins: number of histogram bins (fixed).
        channel_axis: axis of the per-channel statistics; None, or an output with at
            most two dimensions (batch, features), is treated as one channel.
        second_moments: also keep ``E[x^2]`` per channel (and per feature).
    """

    def __init__(self, n_bins: int = 2048, channel_axis: int | None = 1, second_moments: bool = False):
        if n_bins < 1:
            raise ValueError(f"n_bins must be >= 1; got {n_bins}")
        self.n_bins = int(n_bins)
        self.channel_axis = channel_axis
        self._counts = np.zeros(self.n_bins, dtype=np.int64)
        self._e: int | None = None  # bin width is 2**e; None until the first finite value
        self._lo = 0  # index of the first bin's left edge, in units of the width
        self._count = 0
        self._sum = 0.0
        self._sum_squares = 0.0
        self._nonfinite = 0
        self._ch_min: np.ndarray | None = None
        self._ch_max: np.ndarray | None = None
        self._ch_sum: np.ndarray | None = None
        self._ch_count: np.ndarray | None = None
        self._feature_sum: np.ndarray | None = None  # (batch, features) outputs only
        self._feature_count: np.ndarray | None = None
        self.second_moments = second_moments
        self._ch_squares: np.ndarray | None = None  # second moments: sums of squares
        self._feature_squares: np.ndarray | None = None

    # ----------------------------------------------------------------- public
    def update(self, x: np.ndarray) -> None:
        """Add one batch of activations (any float or int dtype, any shape)."""
        x = _floating(np.asarray(x))
        if x.size == 0:
            return
        if x.ndim == 2:
            self._add_features(x)
        xc = self._channel_view(x)
        if self.second_moments:
            self._add_squares(xc)
        rows = xc.reshape(xc.shape[0], xc.shape[1]) if xc.shape[2] == 1 else None
        with np.errstate(invalid="ignore", over="ignore"):  # non-finite sums are handled below
            if rows is not None:  # channels last: reduce over rows
                ch_sum = rows.sum(axis=0, dtype=np.float64)
            else:
                ch_sum = xc.sum(axis=(0, 2), dtype=np.float64)
        if np.isfinite(ch_sum).all():
            if rows is not None:
                ch_min = rows.min(axis=0).astype(np.float64)
                ch_max = rows.max(axis=0).astype(np.float64)
            else:
                ch_min = xc.min(axis=2).min(axis=0).astype(np.float64)
                ch_max = xc.max(axis=2).max(axis=0).astype(np.float64)
            ch_count = np.full(xc.shape[1], xc.shape[0] * xc.shape[2], dtype=np.int64)
            flat = xc.reshape(-1)
        else:  # rare: mask NaN / inf out of every statistic
            finite = np.isfinite(xc)
            ch_count = finite.sum(axis=(0, 2), dtype=np.int64)
            self._nonfinite += int(x.size - ch_count.sum())
            ch_min = np.where(finite, xc, np.inf).min(axis=(0, 2)).astype(np.float64)
            ch_max = np.where(finite, xc, -np.inf).max(axis=(0, 2)).astype(np.float64)
            ch_sum = np.where(finite, xc, 0).sum(axis=(0, 2), dtype=np.float64)
            flat = xc[finite]
            if flat.size == 0:
                self._merge_channels(ch_min, ch_max, ch_sum, ch_count)
                return
        self._merge_channels(ch_min, ch_max, ch_sum, ch_count)
        seen = ch_count > 0
        self._cover(float(ch_min[seen].min()), float(ch_max[seen].max()))
        counts, sum_squares = self._bin(flat)
        self._counts += counts
        self._sum_squares += sum_squares
        self._count += int(flat.size)
        self._sum += float(ch_sum.sum())

    def histogram_without(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(counts, edges) of everything fed so far but the values ``x``, fed already.

        The statistics pass feeds a batch whole (the bins must not depend on where the
        data is cut) and takes the histogram of its first samples by leaving out the rest.
        """
        flat = _floating(np.ravel(x))
        if not np.isfinite(flat).all():
            flat = flat[np.isfinite(flat)]
        counts = self._counts.copy()
        if flat.size and self._e is not None:
            counts -= self._bin(flat)[0]
        return counts, self._edges()

    def _edges(self) -> np.ndarray:
        if self._e is None:
            return np.linspace(0.0, 1.0, self.n_bins + 1)
        return (self._lo + np.arange(self.n_bins + 1, dtype=np.float64)) * 2.0**self._e

    def result(self) -> NodeStatistics:
        """The statistics of everything fed so far (zeros when nothing finite was fed)."""
        edges = self._edges()
        if self._e is None or self._ch_min is None or self._ch_max is None:
            lo = hi = 0.0
        else:
            lo, hi = float(self._ch_min.min()), float(self._ch_max.max())
        if self._ch_count is None or self._ch_min is None or self._ch_max is None or self._ch_sum is None:
            empty = np.zeros(0)
            ch_min = ch_max = ch_mean = empty
        else:
            seen = self._ch_count > 0
            with np.errstate(invalid="ignore", divide="ignore"):
                ch_mean = np.where(seen, self._ch_sum / self._ch_count, np.nan)
            ch_min = np.where(seen, self._ch_min, np.nan)
            ch_max = np.where(seen, self._ch_max, np.nan)
        features = squares = feature_squares = None
        with np.errstate(invalid="ignore", divide="ignore"):
            if self._feature_sum is not None and self._feature_count is not None:
                features = np.where(self._feature_count > 0, self._feature_sum / self._feature_count, np.nan)
            if self._ch_squares is not None and self._ch_count is not None:
                squares = np.where(self._ch_count > 0, self._ch_squares / self._ch_count, np.nan)
            if self._feature_squares is not None and self._feature_count is not None:
                feature_squares = np.where(self._feature_count > 0, self._feature_squares / self._feature_count, np.nan)
        return NodeStatistics(
            counts=self._counts.copy(),
            edges=edges,
            count=self._count,
            sum=self._sum,
            sum_squares=self._sum_squares,
            min=lo,
            max=hi,
            min_per_channel=ch_min,
            max_per_channel=ch_max,
            mean_per_channel=ch_mean,
            nonfinite=self._nonfinite,
            mean_per_feature=features,
            mean_square_per_channel=squares,
            mean_square_per_feature=feature_squares,
        )

    def _add_features(self, x: np.ndarray) -> None:
        finite = np.isfinite(x)
        clean = np.where(finite, x, 0)
        total = clean.sum(axis=0, dtype=np.float64)
        count = finite.sum(axis=0)
        if self._feature_sum is None:
            self._feature_sum, self._feature_count = np.zeros_like(total), np.zeros(total.shape, np.int64)
        self._feature_sum += total
        self._feature_count += count
        if self.second_moments:
            squares = np.einsum("ij,ij->j", clean, clean, dtype=np.float64)
            self._feature_squares = squares if self._feature_squares is None else self._feature_squares + squares

    def _add_squares(self, xc: np.ndarray) -> None:
        """Sums of squares per channel of (before, channels, after), non-finite values as 0."""
        clean = np.where(np.isfinite(xc), xc, 0) if not np.isfinite(xc).all() else xc
        squares = np.einsum("ijk,ijk->j", clean, clean, dtype=np.float64)
        self._ch_squares = squares if self._ch_squares is None else self._ch_squares + squares

    # ---------------------------------------------------------------- helpers
    def _channel_view(self, x: np.ndarray) -> np.ndarray:
        """``x`` as (before, channels, after), a view when x is C-contiguous."""
        x = np.ascontiguousarray(x)
        if self.channel_axis is None or x.ndim <= 2:
            return x.reshape(1, 1, -1)
        axis = self.channel_axis % x.ndim
        before = int(np.prod(x.shape[:axis], dtype=np.int64))
        return x.reshape(before, x.shape[axis], -1)

    def _merge_channels(self, ch_min, ch_max, ch_sum, ch_count) -> None:
        if self._ch_count is None or self._ch_min is None or self._ch_max is None or self._ch_sum is None:
            self._ch_min, self._ch_max, self._ch_sum, self._ch_count = ch_min, ch_max, ch_sum, ch_count
            return
        if ch_count.shape != self._ch_count.shape:
            raise ValueError(
                f"expected {self._ch_count.size} channels along axis {self.channel_axis} as in earlier "
                f"batches; got {ch_count.size}. Every batch of one node must have the same channel count"
            )
        np.minimum(self._ch_min, ch_min, out=self._ch_min)
        np.maximum(self._ch_max, ch_max, out=self._ch_max)
        self._ch_sum += ch_sum
        self._ch_count += ch_count

    def _cover(self, lo: float, hi: float) -> None:
        """Grow the range (merging bins by a power of two) until it holds [lo, hi]."""
        n = self.n_bins
        if self._e is None:
            # the first batch sets the width: its span over n bins, but no finer than
            # 2**-40 of its magnitude (so bin indices stay far below 2**53) and 2**-60
            # for an all-zero batch
            magnitude = max(abs(lo), abs(hi))
            e = math.frexp(hi / n - lo / n)[1] - 1 if hi > lo else -60
            if magnitude > 0.0:
                e = max(e, math.frexp(magnitude)[1] - 41)
            self._e = e
            self._lo = math.floor(math.ldexp(lo, -e))
        first = min(math.floor(math.ldexp(lo, -self._e)), self._lo)
        last = max(math.floor(math.ldexp(hi, -self._e)), self._lo + n - 1)
        k = max(0, (last - first + 1).bit_length() - n.bit_length() - 1)
        while (last >> k) - (first >> k) > n - 1:
            k += 1
        if k == 0 and first == self._lo:
            return
        new_lo = first >> k
        if k < 62:
            old = (self._lo + np.arange(n, dtype=np.int64)) >> k
        else:
            old = np.array([(self._lo + i) >> k for i in range(n)], dtype=np.int64)
        merged = np.zeros(n, dtype=np.int64)
        np.add.at(merged, old - new_lo, self._counts)
        self._counts, self._e, self._lo = merged, self._e + k, new_lo

    def _bin(self, flat: np.ndarray) -> tuple[np.ndarray, float]:
        """(bin counts, sum of squares) of finite values already inside the range."""
        n, e = self.n_bins, self._e
        assert e is not None, "_bin runs after _cover has set the bin width"
        inv_width = 2.0**-e if -1000 < e < 1000 else None
        step = min(_CHUNK, flat.size)
        buf = np.empty(step, dtype=np.float64)
        ibuf = np.empty(step, dtype=np.intp)
        sum_squares = 0.0
        counts = np.zeros(n, dtype=np.int64)
        for start in range(0, flat.size, step):
            chunk = flat[start : start + step]
            t, idx = buf[: chunk.size], ibuf[: chunk.size]
            t[...] = chunk
            sum_squares += float(np.einsum("i,i->", t, t))  # not BLAS: its threads stall under load
            if inv_width is not None:
                t *= inv_width  # exact: a power of two
            else:
                np.ldexp(t, -e, out=t)
            np.floor(t, out=t)
            t -= self._lo  # integers below 2**53: exact
            idx[...] = t
            counts += np.bincount(idx, minlength=n)
        return counts, sum_squares


def _floating(x: np.ndarray) -> np.ndarray:
    """``x`` as float32 or float64 (integers and half floats widened; no copy when it is already)."""
    if x.dtype == np.float32 or x.dtype == np.float64:
        return x
    return x.astype(np.float64 if x.dtype.itemsize > 4 else np.float32)
