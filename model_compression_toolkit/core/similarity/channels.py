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

``float output, quantized output -> ChannelSums.add (chunk by chunk) -> ChannelMeasures``
"""

from __future__ import annotations

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


def channel_rows(x: np.ndarray, axis: int | None) -> np.ndarray:
    """``x`` as (channels, values): the channel axis first, every other axis (samples
    included) flattened. A tensor without a channel axis is one channel."""
    x = np.asarray(x)
    if axis is None or x.ndim < 2:
        return x.reshape(1, -1)
    return np.moveaxis(x, axis % x.ndim, 0).reshape(x.shape[axis % x.ndim], -1)


def sqnr_db(signal: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """10 log10(signal / noise) per entry, clamped to +-SQNR_CEILING_DB (no noise: the ceiling)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(noise > 0, signal / np.where(noise > 0, noise, 1.0), np.inf)
        out = np.where(noise > 0, 10 * np.log10(np.maximum(ratio, 1e-300)), SQNR_CEILING_DB)
    return np.clip(np.nan_to_num(out, nan=-SQNR_CEILING_DB), -SQNR_CEILING_DB, SQNR_CEILING_DB)


class ChannelSums:
    """Running per-channel sums of a float tensor and its quantized version, chunk by chunk.

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
        signal, noise, low, high = self._rows(reference, quantized)
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

    def _rows(self, reference: np.ndarray, quantized: np.ndarray) -> tuple[np.ndarray, ...]:
        """The per-channel sums of one tensor pair; counts its zero-rounded values."""
        ref, q = channel_rows(reference, self.axis), channel_rows(quantized, self.axis)
        if not (np.isfinite(ref).all() and np.isfinite(q).all()):
            ref, q = np.nan_to_num(ref, posinf=0.0, neginf=0.0), np.nan_to_num(q, posinf=0.0, neginf=0.0)
        ref64 = ref.astype(np.float64)
        diff = ref64 - q
        signal = np.einsum("ij,ij->i", ref64, ref64)
        noise = np.einsum("ij,ij->i", diff, diff)
        low, high = ref.min(axis=1), ref.max(axis=1)
        nonzero = ref != 0
        self.nonzero += int(np.count_nonzero(nonzero))
        self.zeroed += int(np.count_nonzero(nonzero & (q == 0)))
        return signal, noise, low, high

    def result(self) -> ChannelMeasures:
        if self.signal is None or self.noise is None or self.low is None or self.high is None:
            return ChannelMeasures(SQNR_CEILING_DB, np.zeros(0), None, None)
        spread = range_spread(self.low, self.high)
        zero_rounded = self.zeroed / self.nonzero if self.nonzero else None
        whole = float(sqnr_db(np.array([self.signal.sum()]), np.array([self.noise.sum()]))[0])
        return ChannelMeasures(whole, sqnr_db(self.signal, self.noise), zero_rounded, spread)
