"""Kullback-Leibler threshold selection (``QuantizationErrorMethod.KL``).

A histogram ``P`` of the values (bins sorted by value) is compared with the histogram
``Q`` the quantized values would have: each quantization level's count spread evenly
over the non-empty bins that round to it (TensorRT's calibration, on our grids). Clipping
piles the tail onto the edge level, coarse steps flatten the shape within a level; the
chosen range minimises ``KL(P || Q) = sum p log(p / q)``::

    bins (sorted) --level of each bin--> segments --spread--> Q ; KL(P || Q) per candidate

Activations use the collected histogram, weights a histogram of each channel.
"""

from __future__ import annotations

import numpy as np

from model_compression_toolkit.core.calibration.quantizers import (
    MIN_THRESHOLD,
    power_of_two_ceil,
    uniform_grid,
)
from model_compression_toolkit.core.quant_config import QuantGrid

WEIGHT_BINS = 2048  # bins of each channel's histogram


def kl_divergence(counts: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """``KL(P || Q)`` per row.

    Args:
        counts: (R, K) non-negative counts of bins sorted by value (or (K,)).
        levels: the quantization level of each bin, (R, K) or (K,), non-decreasing
            along K (rounding keeps the bins' order).

    Returns:
        (R,) divergences (a scalar for 1-D input), 0 for an empty row.
    """
    one = np.ndim(counts) == 1
    counts = np.atleast_2d(np.asarray(counts, np.float64))
    levels = np.broadcast_to(np.atleast_2d(levels), counts.shape)
    rows, k = counts.shape
    segment = np.zeros(counts.shape, np.int64)
    segment[:, 1:] = np.cumsum(levels[:, 1:] != levels[:, :-1], axis=1)
    flat = (segment + np.arange(rows)[:, None] * k).ravel()
    total = np.bincount(flat, weights=counts.ravel(), minlength=rows * k)
    occupied = np.bincount(flat, weights=(counts > 0).ravel().astype(np.float64), minlength=rows * k)
    q = (total / np.maximum(occupied, 1.0))[flat].reshape(counts.shape)
    n = counts.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(counts > 0, counts * np.log(counts / np.where(q > 0, q, 1.0)), 0.0)
    out = terms.sum(axis=1) / np.where(n[:, 0] > 0, n[:, 0], 1.0)
    return out[0] if one else out


def grid_levels(values: np.ndarray, grid: QuantGrid) -> np.ndarray:
    """The integer level of each value on each candidate grid: (J, K) for parameters of
    shape (J,) (or (K,) for scalars)."""
    scale = np.asarray(grid.scale, np.float64)
    zp = np.asarray(grid.zero_point, np.float64)
    if scale.ndim:
        scale, zp = scale[:, None], zp[:, None]
    return np.clip(np.round(values / scale) + zp, grid.qmin, grid.qmax)


def histogram_kl(lo: np.ndarray, hi: np.ndarray, counts: np.ndarray, grid: QuantGrid) -> np.ndarray:
    """KL of a histogram (bins ``[lo, hi]``, sorted) on each candidate grid: (J,)."""
    levels = grid_levels((lo + hi) / 2, grid)
    return kl_divergence(np.broadcast_to(counts, levels.shape), levels)


def _row_histograms(normed: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """(R, WEIGHT_BINS) counts of each row's values over [lo, hi], and the bin centres."""
    rows = normed.shape[0]
    width = (hi - lo) / WEIGHT_BINS
    index = np.clip(np.floor((normed - lo) / width), 0, WEIGHT_BINS - 1).astype(np.int64)
    flat = (index + np.arange(rows)[:, None] * WEIGHT_BINS).ravel()
    counts = np.bincount(flat, minlength=rows * WEIGHT_BINS).reshape(rows, WEIGHT_BINS).astype(np.float64)
    return counts, lo + (np.arange(WEIGHT_BINS) + 0.5) * width


def symmetric_rows_threshold(rows: np.ndarray, ref: np.ndarray, n_bits: int, pow2: bool) -> np.ndarray:
    """Per-row threshold of a signed symmetric quantizer minimising KL, all rows at once.

    Rows are normalised by their no-clipping threshold, so every candidate (1/6 octave
    steps down to 1/256; whole octaves for powers of two) has the same levels for every row.
    """
    base = power_of_two_ceil(ref) if pow2 else np.maximum(ref, MIN_THRESHOLD)
    counts, centres = _row_histograms(np.asarray(rows, np.float64) / base[:, None], -1.0, 1.0)
    offsets = np.arange(17.0) if pow2 else np.arange(49) / 6.0
    half = 2.0 ** (n_bits - 1)
    errors = np.stack([
        kl_divergence(counts, np.clip(np.round(centres / (2.0**-o / half)), -half, half - 1)) for o in offsets
    ])  # fmt: skip
    best = offsets[np.argmin(errors, axis=0)]
    return np.maximum(base * 2.0**-best, MIN_THRESHOLD)


def uniform_rows_range(rows: np.ndarray, lo: np.ndarray, hi: np.ndarray, n_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-row (min, max) minimising KL over shrink factors of both ends (1/3 octave steps
    down to 1/8)."""
    span = np.maximum(hi - lo, MIN_THRESHOLD)
    counts, centres = _row_histograms((np.asarray(rows, np.float64) - lo[:, None]) / span[:, None], 0.0, 1.0)
    values = lo[:, None] + centres[None, :] * span[:, None]  # (R, K) bin centres in each row's units
    steps = -np.arange(10) / 3.0
    best_e = np.full(lo.shape, np.inf)
    best_lo, best_hi = lo.copy(), hi.copy()
    for a in steps:
        for b in steps:
            grid = uniform_grid(lo * 2.0**a, hi * 2.0**b, n_bits)
            levels = np.clip(np.round(values / grid.scale[:, None]) + grid.zero_point[:, None], grid.qmin, grid.qmax)
            e = kl_divergence(counts, levels)
            better = e < best_e
            best_e = np.where(better, e, best_e)
            best_lo, best_hi = np.where(better, lo * 2.0**a, best_lo), np.where(better, hi * 2.0**b, best_hi)
    return best_lo, best_hi
