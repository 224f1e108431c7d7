"""Per-sample error metrics between a float tensor and its quantized counterpart.

All metrics are finite, always:

- cosine similarity: +1 for identical directions; two all-zero samples count as
  identical (1.0), exactly one all-zero sample as unrelated (0.0).
- SQNR in dB: ``10 log10(signal power / noise power)``, clamped to
  [-SQNR_CEILING_DB, SQNR_CEILING_DB]; identical samples get the ceiling.
- NSR, the noise-to-signal ratio ``1 / SQNR`` (linear), clamped like the SQNR, and 0
  for identical samples: what adds up across layers (mixed precision sums it).
- MSE and max absolute error.

Non-finite values in either tensor are treated as zero (and counted by the caller).

Layer outputs are large, so the sums behind the metrics are taken block by block along
each sample (`MetricSums`): a block stays in cache while it is read, and float32 blocks
are summed in float32 by BLAS, each block's sums then added in float64. A block whose
float32 sums could have lost precision (a non-finite value, an overflow, or a sum so
small it may have underflowed, unless the block is all zeros) is summed again in float64.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, fields

import numpy as np

SQNR_CEILING_DB = 100.0
BLOCK_VALUES = 1 << 16  # values of one sample summed at a time (fewer, larger numpy calls)
_TINY = 1e-30  # float32 sums below this are redone in float64 (squares of values < 1e-19 underflow)


@dataclass
class SampleMetrics:
    """One value per sample for each metric."""

    cosine: np.ndarray
    mse: np.ndarray
    sqnr_db: np.ndarray
    max_abs: np.ndarray
    nsr: np.ndarray

    @classmethod
    def concat(cls, parts: list[SampleMetrics]) -> SampleMetrics:
        return cls(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)))


def sample_rows(x: np.ndarray) -> np.ndarray:
    """``x`` as (samples, values), without a copy when it is contiguous; axis 0 is the sample."""
    x = np.asarray(x)
    return x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(-1, 1)


def blocks(rows: np.ndarray) -> Iterator[tuple[int, slice]]:
    """(sample, value slice) covering every value of every sample, in blocks."""
    for i in range(rows.shape[0]):
        for start in range(0, rows.shape[1], BLOCK_VALUES):
            yield i, slice(start, start + BLOCK_VALUES)


def _finite64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x if np.isfinite(x).all() else np.where(np.isfinite(x), x, 0.0)


def _block_sums(x: np.ndarray, y: np.ndarray) -> tuple[tuple[float, float, float, float], float, bool]:
    """((x.x, y.y, x.y, d.d), max |d|, finite) with d = x - y, for two 1-D blocks.

    ``finite`` is True when the float32 sums were finite, which proves every value of
    both blocks finite; False says nothing either way.
    """
    if x.dtype == np.float32 and y.dtype == np.float32:
        with np.errstate(all="ignore"):  # an overflow or a NaN sends the block to float64 below
            d = x - y
            high, low = float(d.max()), float(d.min())  # no |d| temporary
            sums = (float(x @ x), float(y @ y), float(x @ y), float(d @ d))
        max_abs = abs(max(high, -low))  # not -0.0
        xx, yy, _, dd = sums
        # one block all zeros (a quantizer rounded it down) is exact too: its sums are 0
        both = min(xx, yy) > _TINY or (max(xx, yy) > _TINY and not (y if yy == 0.0 else x).any())
        if math.isfinite(high) and math.isfinite(low) and all(map(math.isfinite, sums)) and both:
            if dd > _TINY or max_abs == 0.0:
                return sums, max_abs, True
    x64, y64 = _finite64(x), _finite64(y)
    with np.errstate(over="ignore", invalid="ignore"):  # float64 extremes: result() keeps it finite
        d = x64 - y64
        sums = float(x64 @ x64), float(y64 @ y64), float(x64 @ y64), float(d @ d)
        return sums, float(np.max(np.abs(d))), False


class MetricSums:
    """Running per-sample sums for comparing a reference with another tensor, block by block."""

    def __init__(self, samples: int, values: int) -> None:
        self.sums = np.zeros((4, samples))  # x.x, y.y, x.y, d.d
        self.max_abs = np.zeros(samples)
        self.values = values

    def add(self, sample: int, reference: np.ndarray, actual: np.ndarray) -> bool:
        """Add one block of one sample; True when both blocks are known to be all finite."""
        if reference.size == 0:
            return True
        sums, max_abs, finite = _block_sums(reference, actual)
        self.sums[:, sample] += sums
        self.max_abs[sample] = max(self.max_abs[sample], max_abs)
        return finite

    def result(self) -> SampleMetrics:
        signal, norm_b, dot, noise = self.sums
        denom = np.sqrt(signal * norm_b)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            cosine = np.where(denom > 0, dot / np.where(denom > 0, denom, 1.0), 0.0)
            both_zero = (signal == 0) & (norm_b == 0)
            cosine = np.where(both_zero, 1.0, np.clip(np.nan_to_num(cosine, nan=0.0), -1.0, 1.0))
            ratio = np.where(noise > 0, signal / np.where(noise > 0, noise, 1.0), np.inf)
            sqnr = np.where(noise > 0, 10 * np.log10(np.maximum(ratio, 1e-300)), SQNR_CEILING_DB)
            floor = 10.0 ** (-SQNR_CEILING_DB / 10)
            nsr = np.where(noise > 0, np.clip(np.nan_to_num(1 / ratio, nan=1 / floor), floor, 1 / floor), 0.0)
        sqnr = np.clip(np.nan_to_num(sqnr, nan=-SQNR_CEILING_DB), -SQNR_CEILING_DB, SQNR_CEILING_DB)
        mse = np.nan_to_num(noise / max(self.values, 1), nan=0.0, posinf=np.finfo(np.float64).max)
        max_abs = np.nan_to_num(self.max_abs, nan=0.0, posinf=np.finfo(np.float64).max)
        return SampleMetrics(cosine=cosine, mse=mse, sqnr_db=sqnr, max_abs=max_abs, nsr=nsr)


def compare(reference: np.ndarray, actual: np.ndarray) -> SampleMetrics:
    """Metrics of ``actual`` against ``reference``, per sample (axis 0 is the sample)."""
    a, b = sample_rows(reference), sample_rows(actual)
    if a.shape != b.shape:
        raise ValueError(f"cannot compare tensors of shapes {np.shape(reference)} and {np.shape(actual)}")
    sums = MetricSums(*a.shape)
    for i, cols in blocks(a):
        sums.add(i, a[i, cols], b[i, cols])
    return sums.result()
