"""Error measures one channel cannot hide.

Cosine similarity and SQNR over a whole tensor are dominated by its largest channel: an
activation with one outlier channel 300x the others keeps a high SQNR while a per-tensor
grid rounds every other channel to zero. Measured per channel instead:

- per-channel SQNR (dB): each channel's signal power over its own noise power; the
  report gives the median channel, the worst channel, and the share of channels under
  the "high error" bound (15 dB);
- zero-rounded share: of the values that are not zero in float, those quantized to zero;
- channel range spread: the largest channel's range (max - min) over the median
  channel's; an outlier channel shows as a spread of hundreds.

``float output, quantized output -> ChannelSums.add (chunk by chunk, block by block) -> ChannelMeasures``
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from model_compression_toolkit.core.calibration.statistics import range_spread
from model_compression_toolkit.core.similarity.metrics import SQNR_CEILING_DB

HIGH_ERROR_DB = 15.0  # a channel under this SQNR is a high-error channel (the report's bound)


@dataclass
class ChannelMeasures:
    """Per-channel measures of one error.

    Attributes:
        whole_db: the SQNR over all channels together (dB).
        sqnr_db: one SQNR per channel (dB, clamped like `metrics`; identical channels get
            the ceiling).
        zero_rounded: share of the float values that are not zero and became zero, or None
            when the float values are all zero.
        range_spread: largest channel range over the median channel range, or None when
            the median channel has no range.
    """

    whole_db: float
    sqnr_db: np.ndarray
    zero_rounded: float | None
    range_spread: float | None

    @property
    def median_db(self) -> float | None:
        return float(np.median(self.sqnr_db)) if self.sqnr_db.size else None

    @property
    def worst_db(self) -> float | None:
        return float(self.sqnr_db.min()) if self.sqnr_db.size else None

    @property
    def high_error_share(self) -> float | None:
        return float(np.mean(self.sqnr_db < HIGH_ERROR_DB)) if self.sqnr_db.size else None


def sqnr_db(signal: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """10 log10(signal / noise) per entry, clamped to +-SQNR_CEILING_DB (no noise: the ceiling)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(noise > 0, signal / np.where(noise > 0, noise, 1.0), np.inf)
        out = np.where(noise > 0, 10 * np.log10(np.maximum(ratio, 1e-300)), SQNR_CEILING_DB)
    return np.clip(np.nan_to_num(out, nan=-SQNR_CEILING_DB), -SQNR_CEILING_DB, SQNR_CEILING_DB)


BLOCK_VALUES = 1 << 16  # values reduced at a time: a block and its temporaries stay in cache


def _around_channel(x: np.ndarray, axis: int | None) -> np.ndarray:
    """``x`` as (before, channels, after): the axes before the channel axis (samples
    included) and those after it each flattened; a copy only when ``x`` is not
    contiguous. A tensor without a channel axis is one channel."""
    x = np.asarray(x)
    if axis is None or x.ndim < 2:
        return x.reshape(1, 1, x.size)
    axis %= x.ndim
    return x.reshape(math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1 :]))


def _blocks(shape: tuple[int, ...]) -> Iterator[tuple[slice, tuple[slice, slice, slice]]]:
    """(channel slice, block) covering a (before, channels, after) view, about
    `BLOCK_VALUES` values a block: a stretch of one channel's row (long rows), a few
    channels' rows of one sample, or every channel of a few samples (short rows: channels
    last)."""
    before, channels, after = shape
    if not before * channels * after:
        return
    if after >= BLOCK_VALUES:
        for b in range(before):
            for c in range(channels):
                for v in range(0, after, BLOCK_VALUES):
                    yield slice(c, c + 1), (slice(b, b + 1), slice(c, c + 1), slice(v, v + BLOCK_VALUES))
    elif channels * after >= BLOCK_VALUES:
        step = BLOCK_VALUES // after
        for b in range(before):
            for c in range(0, channels, step):
                yield slice(c, c + step), (slice(b, b + 1), slice(c, c + step), slice(None))
    else:
        step = BLOCK_VALUES // (channels * after)
        for b in range(0, before, step):
            yield slice(None), (slice(b, b + step), slice(None), slice(None))


def _as_rows(block: np.ndarray) -> np.ndarray:
    """A (before, channels, after) block as (channels, values): a view for one sample, a
    copy (of the block only) for several."""
    return np.moveaxis(block, 1, 0).reshape(block.shape[1], -1)


class ChannelSums:
    """Running per-channel sums of a float tensor and its quantized version, chunk by chunk.

    The sums are taken in float64, block by block (about `BLOCK_VALUES` values: a few
    channels of one sample at a time), so that a block and its temporaries stay in cache
    and no whole tensor is copied.

    Args:
        channel_axis: the channel axis of the tensors (1 NCHW, -1 NHWC, None: one channel).
    """

    def __init__(self, channel_axis: int | None) -> None:
        self.axis = channel_axis
        self.signal: np.ndarray | None = None
        self.noise: np.ndarray | None = None
        self.low: np.ndarray | None = None
        self.high: np.ndarray | None = None
        self.nonzero = 0
        self.zeroed = 0

    def add(self, reference: np.ndarray, quantized: np.ndarray) -> None:
        """Add one chunk of samples (non-finite values count as zero)."""
        self._add(self._rows(reference, quantized))

    def add_quantized(self, reference: np.ndarray, quantize: Callable[[np.ndarray], np.ndarray]) -> None:
        """`add` of ``reference`` and its quantized version, ``quantize`` applied block by
        block so that the quantized tensor is never held whole.

        Args:
            reference: one chunk of samples.
            quantize: maps a float64 copy of a block of ``reference`` (which it must not
                write into) to the quantized values, value by value (as a per-tensor fake
                quantizer does), in ``reference``'s dtype.
        """
        self._add(self._rows(reference, quantize=quantize))

    def _add(self, rows: tuple[np.ndarray, ...]) -> None:
        signal, noise, low, high = rows
        if self.signal is None or self.noise is None or self.low is None or self.high is None:
            self.signal, self.noise, self.low, self.high = signal, noise, low, high
        else:
            self.signal += signal
            self.noise += noise
            self.low, self.high = np.minimum(self.low, low), np.maximum(self.high, high)

    def extend(self, reference: np.ndarray, quantized: np.ndarray) -> None:
        """Add the channels of another tensor as channels of their own (a layer's second
        weight tensor, whose channel count may differ from the first's)."""
        if self.signal is None:
            self.add(reference, quantized)
            return
        signal, noise, low, high = self._rows(reference, quantized)
        self.signal, self.noise = np.concatenate([self.signal, signal]), np.concatenate([self.noise, noise])
        self.low, self.high = np.concatenate([self.low, low]), np.concatenate([self.high, high])

    def _rows(
        self,
        reference: np.ndarray,
        quantized: np.ndarray | None = None,
        quantize: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> tuple[np.ndarray, ...]:
        """The per-channel sums of one tensor pair (``quantized``, or ``quantize`` of each
        block of ``reference``); counts its zero-rounded values."""
        if quantized is not None and np.shape(quantized) != np.shape(reference):
            raise ValueError(
                f"cannot compare tensors of shapes {np.shape(reference)} and {np.shape(quantized)}"
            )
        ref3 = _around_channel(reference, self.axis)
        q3 = None if quantized is None else _around_channel(quantized, self.axis)
        channels = ref3.shape[1]
        signal, noise = np.zeros(channels), np.zeros(channels)
        low = np.full(channels, np.inf, dtype=np.result_type(ref3.dtype, np.float16))
        high = np.full(channels, -np.inf, dtype=low.dtype)
        for rows, index in _blocks(ref3.shape):
            ref = _as_rows(ref3[index])
            ref64 = None
            if q3 is not None:
                q = _as_rows(q3[index])
            else:
                assert quantize is not None
                ref64 = ref.astype(np.float64)
                q = quantize(ref64)
            sums = _block_sums(ref, q, ref64)
            signal[rows] += sums[0]
            noise[rows] += sums[1]
            low[rows], high[rows] = np.minimum(low[rows], sums[2]), np.maximum(high[rows], sums[3])
            self.nonzero += sums[4]
            self.zeroed += sums[5]
        return signal, noise, low.astype(ref3.dtype, copy=False), high.astype(ref3.dtype, copy=False)

    def result(self) -> ChannelMeasures:
        if self.signal is None or self.noise is None or self.low is None or self.high is None:
            return ChannelMeasures(SQNR_CEILING_DB, np.zeros(0), None, None)
        spread = range_spread(self.low, self.high)
        zero_rounded = self.zeroed / self.nonzero if self.nonzero else None
        whole = float(sqnr_db(np.array([self.signal.sum()]), np.array([self.noise.sum()]))[0])
        return ChannelMeasures(whole, sqnr_db(self.signal, self.noise), zero_rounded, spread)


def _block_sums(
    ref: np.ndarray, q: np.ndarray, ref64: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int]:
    """(signal, noise, low, high) per row and (nonzero, zeroed) counts of one block
    (non-finite values count as zero); ``ref64``: ``ref`` in float64, when made already."""
    signal, noise = _signal_noise(ref, q, ref64)
    if not (np.isfinite(signal).all() and np.isfinite(noise).all()):
        if not (np.isfinite(ref).all() and np.isfinite(q).all()):
            ref, q = np.nan_to_num(ref, posinf=0.0, neginf=0.0), np.nan_to_num(q, posinf=0.0, neginf=0.0)
            signal, noise = _signal_noise(ref, q)
    zero, q_zero = ref == 0, q == 0  # counted as booleans: a float count_nonzero is slower
    nonzero = zero.size - int(np.count_nonzero(zero))
    zeroed = int(np.count_nonzero(q_zero)) - int(np.count_nonzero(zero & q_zero))
    return signal, noise, ref.min(axis=1), ref.max(axis=1), nonzero, zeroed


def _signal_noise(
    ref: np.ndarray, q: np.ndarray, ref64: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per row: ref.ref and (ref - q).(ref - q), in float64."""
    ref64 = ref.astype(np.float64) if ref64 is None else ref64
    diff = q.astype(np.float64)  # a copy, in ref64's dtype: a mixed subtraction is slower
    with np.errstate(over="ignore", invalid="ignore"):  # float64 extremes: `sqnr_db` keeps it finite
        np.subtract(ref64, diff, out=diff)
        return np.einsum("ij,ij->i", ref64, ref64), np.einsum("ij,ij->i", diff, diff)
