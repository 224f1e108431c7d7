"""Histogram bins of a power-of-two width anchored at zero.

Bin ``j`` of `AnchoredBins(e, first, count)` holds ``[(first + j) * 2**e, (first + j + 1) * 2**e)``.
Two such grids nest: every bin of width ``2**e`` lies whole inside one bin of width
``2**(e + k)``, so a histogram kept on a fine grid (the statistics collector's) is summed
onto a coarser one exactly, with no value seen again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAX_BINS = 128  # TensorBoard draws 30; at most 256 (bin indices are counted as uint8)
_FLOAT32_EXACT = 1 << 22  # bin numbers below this are exact in float32


@dataclass(frozen=True)
class AnchoredBins:
    """``count`` bins of width ``2**e``, the first one starting at ``first * 2**e``."""

    e: int
    first: int
    count: int

    @classmethod
    def covering(cls, lo: float, hi: float, finest: int | None = None) -> AnchoredBins:
        """The finest bins (no finer than ``2**finest``) holding ``[lo, hi]`` in at most `MAX_BINS`."""
        if not (math.isfinite(lo) and math.isfinite(hi)):
            lo, hi = 0.0, 1.0
        lo, hi = min(lo, hi), max(lo, hi)
        span = hi - lo if hi - lo < math.inf else math.ldexp(1.0, 1023)  # a span over float64's range
        e = math.frexp(span / MAX_BINS)[1] - 1 if span > 0 else math.frexp(abs(lo) or 1.0)[1] - 8
        if finest is not None:
            e = max(e, finest)
        while math.floor(math.ldexp(hi, -e)) - math.floor(math.ldexp(lo, -e)) >= MAX_BINS:
            e += 1
        first = math.floor(math.ldexp(lo, -e))
        return cls(e, first, math.floor(math.ldexp(hi, -e)) - first + 1)

    @classmethod
    def of_edges(cls, edges: np.ndarray) -> AnchoredBins:
        """The bins whose edges ``edges`` are (the statistics collector's bins are anchored bins)."""
        e = math.frexp(float(edges[1] - edges[0]))[1] - 1
        return cls(e, round(math.ldexp(float(edges[0]), -e)), len(edges) - 1)

    def edges(self) -> np.ndarray:
        return np.ldexp(np.arange(self.first, self.first + self.count + 1, dtype=np.float64), self.e)

    def counts(self, values: np.ndarray) -> np.ndarray:
        """How many of ``values`` (all finite) fall in each bin; values outside count in the end bins."""
        if values.dtype != np.float32 and values.dtype != np.float64:
            values = values.astype(np.float64)
        # float32 when exact: bin numbers small, and scaling by 2**-e >= 1 cannot underflow
        exact32 = abs(self.first) + self.count < _FLOAT32_EXACT and -127 <= self.e <= 0
        dtype = values.dtype if exact32 else np.dtype(np.float64)
        with np.errstate(over="ignore", under="ignore"):  # far outside: clipped into an end bin
            t = np.multiply(values, dtype.type(math.ldexp(1.0, -self.e)), dtype=dtype)  # exact: a power of two
        np.floor(t, out=t)
        t -= dtype.type(self.first)  # integers: exact inside the range
        np.clip(t, 0, self.count - 1, out=t)
        return np.bincount(t.astype(np.uint8), minlength=self.count)

    def sum_from(self, counts: np.ndarray, fine: AnchoredBins) -> np.ndarray:
        """``counts`` kept on the nested grid ``fine`` (no coarser than these bins), summed onto these."""
        shift = self.e - fine.e
        if shift < 0:
            raise ValueError(f"expected bins no coarser than 2**{self.e}; got bins of width 2**{fine.e}")
        if shift < 62:  # numpy's shift of int64 floors like Python's
            index = ((fine.first + np.arange(fine.count, dtype=np.int64)) >> shift) - self.first
        else:
            index = np.array([((fine.first + i) >> shift) - self.first for i in range(fine.count)])
        out = np.zeros(self.count, dtype=np.int64)
        np.add.at(out, np.clip(index, 0, self.count - 1), np.asarray(counts, dtype=np.int64))
        return out
