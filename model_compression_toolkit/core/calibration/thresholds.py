"""Threshold selection: fill a node's quantization configs from statistics or weights.

``NodeStatistics -> fill_activation_config -> cfg.threshold / range, cfg.grid``
``weights -> fill_weights_config -> cfg.threshold (one per channel) / range, cfg.grid``

Clipping error methods (MSE, MAE, LP) pick the range that minimises the mean
``|q(x) - x|**p``: for activations over the histogram (each bin's values spread
uniformly over the bin, clipped to [min, max]; ``histogram_error``, in closed form in
`calibration.hist_error`), for weights over the weights themselves. Candidates are
evaluated many at once: all candidates x all bins for a histogram (but those whose
clipping alone provably costs more than the search's tolerance allows), all channels at
once per candidate for weights, coarse to fine. The no-clipping range is always a
candidate, so the chosen range is never worse than it on the data it was chosen on.

``KL`` minimises a divergence between histograms instead (`calibration.kl`); ``HMSE``
weighs each weight's squared error by its Hessian diagonal (``cfg.importance``,
`calibration.hessian`). Before an activation's search, ``z_threshold`` leaves out values
beyond that many standard deviations; a ``shift_negative_ratio`` moves a small negative
tail onto an unsigned grid (shift negative correction); a ``fixed_range`` needs no search.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from model_compression_toolkit.core.calibration.hist_error import HistogramEdges
from model_compression_toolkit.core.calibration.hist_error import histogram_error as histogram_error
from model_compression_toolkit.core.calibration.kl import (
    histogram_kl,
    symmetric_rows_threshold,
    uniform_rows_range,
)
from model_compression_toolkit.core.calibration.outputs import unseen_range
from model_compression_toolkit.core.calibration.quantizers import (
    MIN_THRESHOLD,
    channel_view,
    power_of_two_ceil,
    symmetric_grid,
    uniform_grid,
)
from model_compression_toolkit.core.calibration.statistics import NodeStatistics
from model_compression_toolkit.core.config import QuantizationErrorMethod, QuantizationMethod
from model_compression_toolkit.core.quant_config import ActivationQuantConfig, QuantGrid, WeightsQuantConfig

_MIN_EXP = int(np.log2(MIN_THRESHOLD))  # smallest power-of-two threshold
# fine search levels of the weights' symmetric threshold: (step in octaves, steps tried)
_FINE = ((1 / 15, (-2, -1, 1, 2)), (1 / 75, (-2, -1, 1, 2)), (1 / 375, (-2, -1, 1, 2)))
_CHUNK = 1 << 15  # weight values per search block: the block and its buffers stay in cache


def error_power(error_method: QuantizationErrorMethod, l_p_value: float = 2.0) -> float | None:
    """The exponent p of the error |q(x) - x|**p, or None for NOCLIPPING (and KL, which
    is no power of the error)."""
    return {
        QuantizationErrorMethod.NOCLIPPING: None,
        QuantizationErrorMethod.MSE: 2.0,
        QuantizationErrorMethod.MAE: 1.0,
        QuantizationErrorMethod.LP: float(l_p_value),
        QuantizationErrorMethod.KL: None,
        QuantizationErrorMethod.HMSE: 2.0,
    }[error_method]


# a histogram's non-empty bins: their low and high ends and their counts
Bins = tuple[np.ndarray, np.ndarray, np.ndarray]
# errors(bins, grid, tolerance): one per candidate grid; with a tolerance, errors that cannot
# be the least nor within that fraction of it may read +inf
BinErrors = Callable[[Bins, QuantGrid, float | None], np.ndarray]


def _judge(p: float) -> BinErrors:
    """``errors(bins, grid, tolerance=None)``: the mean ``|q(x) - x|**p`` of each candidate
    grid on a histogram; with a tolerance, +inf for the candidates whose error provably
    exceeds ``1 + tolerance`` times the least (not evaluated: `HistogramEdges.least_errors`)."""

    prepared: list = [None, None]  # the last histogram and its edges: a search asks many times

    def errors(bins: Bins, grid: QuantGrid, tolerance: float | None = None) -> np.ndarray:
        if prepared[0] is not bins:
            prepared[:] = bins, HistogramEdges(*bins)
        edges = prepared[1]
        return edges.error(grid, p) if tolerance is None else edges.least_errors(grid, p, tolerance)

    return errors


def _kl(bins: Bins, grid: QuantGrid, tolerance: float | None = None) -> np.ndarray:
    return histogram_kl(bins[0], bins[1], bins[2], grid)


def _histogram_errors(error_method: QuantizationErrorMethod, l_p_value: float) -> BinErrors | None:
    """``errors(bins, grid)`` of candidate grids on a histogram for ``error_method``, or None
    (NOCLIPPING: no search)."""
    if error_method == QuantizationErrorMethod.KL:
        return _kl
    p = error_power(error_method, l_p_value)
    return None if p is None else _judge(p)


def quantization_error(
    values: np.ndarray, counts: np.ndarray | None, grid: QuantGrid, p: float
) -> np.ndarray:
    """Mean ``|q(v) - v|**p`` of ``values`` weighted by ``counts``, in float64.

    Grid parameters broadcast against ``values`` with one trailing axis: scalars give one
    error; parameters of shape (C,) with values (C, K) give one error per row; parameters
    of shape (J,) with values (K,) give one error per candidate grid.

    Args:
        values: the values (histogram bin centres, or weights).
        counts: weights of the values (histogram counts), or None for all ones.
        grid: the quantization grid, as used by ``fake_quant``.
        p: the error exponent.
    """
    v = np.asarray(values, dtype=np.float64)
    scale = np.asarray(grid.scale, dtype=np.float64)
    zp = np.asarray(grid.zero_point, dtype=np.float64)
    if scale.ndim:
        scale, zp = scale[..., None], zp[..., None]
    q = np.clip(np.round(v / scale) + zp, grid.qmin, grid.qmax)
    err = _power(np.abs((q - zp) * scale - v), p)
    if counts is None:
        return err.mean(axis=-1) if v.shape[-1] else np.zeros(err.shape[:-1])
    c = np.asarray(counts, dtype=np.float64)
    total = c.sum(axis=-1)
    return (err * c).sum(axis=-1) / np.where(total > 0, total, 1.0)


def _power(a: np.ndarray, p: float) -> np.ndarray:
    if p == 2.0:
        return np.square(a, out=a)
    if p == 1.0:
        return a
    return np.power(a, p, out=a)


# ----------------------------------------------------------------- activations


def fill_activation_config(cfg: ActivationQuantConfig, stats: NodeStatistics, l_p_value: float = 2.0) -> None:
    """Set ``cfg.signed``, the threshold (or range) and ``cfg.grid`` from ``stats``.

    Signed iff the collected minimum is negative. SYMMETRIC / POWER_OF_TWO set
    ``cfg.threshold``; UNIFORM sets ``cfg.range_min`` <= 0 <= ``cfg.range_max``. With
    ``cfg.choose_grid`` the method is chosen here (`choose_activation_grid`).
    """
    cfg.signed = not stats.min >= 0
    if cfg.fixed_range is not None:
        lo, hi = cfg.fixed_range
        cfg.signed, cfg.threshold, cfg.range_min, cfg.range_max = lo < 0, None, float(lo), float(hi)
        cfg.grid = uniform_grid(lo, hi, cfg.n_bits)
        return
    errors = _histogram_errors(cfg.error_method, l_p_value)
    values, low, high = _histogram_values(stats, cfg.z_threshold)
    if cfg.choose_grid:
        judge = _judge(error_power(cfg.error_method, l_p_value) or 2.0)
        tolerance = 0.0 if error_power(cfg.error_method, l_p_value) is None else CLIP_TOLERANCE
        if cfg.model_output:  # no search: the range of unseen samples (`calibration.outputs`)
            errors, tolerance = None, 0.0
            low, high = unseen_range(values, low, high, stats.count, cfg.values_per_sample, cfg.bounds)
        choose_activation_grid(cfg, values, low, high, errors, judge, tolerance)
    else:
        _fill_activation_grid(cfg, values, low, high, errors)


# a zero point costs integer hardware a correction term per output: the uniform grid must
# buy at least 1 dB (0.8 times the symmetric grid's error) to be chosen
UNIFORM_GAIN = 0.8
# The default grid takes the widest range whose histogram error is within this fraction of
# the least (0.8 dB of the layer's own SQNR at most). The histogram holds the calibration
# samples only: unseen samples reach past a range clipped to the error's minimum, and a
# clipped large value (the one a max pooling selects, the one a dot product weighs most)
# costs the model's output more than the rounding error of a slightly wider grid
# (bench/results/peers.md: ONet 26.5 -> 27.8 dB on held-out faces).
CLIP_TOLERANCE = 0.2


def choose_activation_grid(
    cfg: ActivationQuantConfig, values: tuple, low: float, high: float, errors, judge, tolerance: float = 0.0
) -> None:
    """Choose the activation's method by the error of each grid on its histogram.

    ``min >= 0``: unsigned symmetric (a uniform range starts at 0 too: the same grid).
    ``min < 0``: the best signed symmetric grid and the best uniform one are searched
    with ``errors`` (the error method's; None: no search), then compared by
    ``judge(bins, grid)``, the mean ``|q(x) - x|**p`` of the error method (MSE for
    NOCLIPPING and KL: a divergence between histograms hardly sees levels left unused).
    Uniform is kept when its error is below ``UNIFORM_GAIN`` times the symmetric
    one's, as for ``relu -> batch norm`` with a negative shift (values in [-0.3, 6]),
    where a signed grid leaves most of its negative half unused. Each search takes the
    widest range whose error is within ``tolerance`` times the least (`CLIP_TOLERANCE`).
    """
    cfg.method = QuantizationMethod.SYMMETRIC
    _fill_activation_grid(cfg, values, low, high, errors, tolerance)
    if low >= 0 or not values[0].size or high <= low:
        return
    symmetric = (cfg.signed, cfg.threshold, cfg.range_min, cfg.range_max, cfg.grid)
    cfg.method = QuantizationMethod.UNIFORM
    _fill_activation_grid(cfg, values, low, high, errors, tolerance)
    e_sym, e_uni = (float(np.max(judge(values, grid))) for grid in (symmetric[-1], cfg.grid))
    if not e_uni < UNIFORM_GAIN * e_sym:  # a tie (both exact) keeps the symmetric grid
        cfg.method = QuantizationMethod.SYMMETRIC
        cfg.signed, cfg.threshold, cfg.range_min, cfg.range_max, cfg.grid = symmetric


def _fill_activation_grid(
    cfg: ActivationQuantConfig, values: tuple, low: float, high: float, errors, tolerance: float = 0.0
) -> None:
    """The range and grid of ``cfg.method`` searched on the histogram ``values``."""
    if cfg.method == QuantizationMethod.UNIFORM:
        lo, hi = min(low, 0.0), max(high, 0.0)
        if errors is not None and values[0].size and hi > lo:
            lo, hi = _search_uniform_hist(values, lo, hi, cfg.n_bits, errors, tolerance)
        cfg.range_min, cfg.range_max = lo, hi
        cfg.threshold = None
        cfg.grid = uniform_grid(lo, hi, cfg.n_bits)
        return
    pow2 = cfg.method == QuantizationMethod.POWER_OF_TWO
    threshold = _symmetric_threshold(values, low, high, cfg.n_bits, bool(cfg.signed), errors, pow2, tolerance)
    cfg.threshold = threshold
    cfg.range_min = cfg.range_max = None
    cfg.grid = symmetric_grid(threshold, cfg.n_bits, bool(cfg.signed))
    ratio = cfg.shift_negative_ratio
    if ratio is not None and low < 0 and -low <= ratio * threshold:
        _shift_negative(cfg, values, low, high, errors, pow2)


def _symmetric_threshold(
    values, low: float, high: float, n_bits: int, signed: bool, errors, pow2: bool, tolerance: float = 0.0
) -> float:
    ref = max(abs(low), abs(high)) if signed else max(high, 0.0)
    threshold = float(power_of_two_ceil(ref)) if pow2 else max(ref, MIN_THRESHOLD)
    if errors is not None and values[0].size and ref > 0:
        threshold = _search_symmetric_hist(values, ref, n_bits, signed, errors, pow2, tolerance)
    return threshold


def _shift_negative(cfg: ActivationQuantConfig, values, low: float, high: float, errors, pow2: bool) -> None:
    """Shift negative correction: quantize ``x`` as ``Q_unsigned(x + s) - s``, ``s`` the
    smallest grid step at or above ``-min``, the unsigned threshold searched on the
    shifted values. ``-s`` is the grid's lowest level (zero point ``s / scale``)."""
    lo, hi, counts = values
    shifted = (lo - low, hi - low, counts)
    threshold = _symmetric_threshold(shifted, 0.0, high - low, cfg.n_bits, False, errors, pow2)
    grid = symmetric_grid(threshold, cfg.n_bits, signed=False)
    zero_point = min(float(np.ceil(-low / float(grid.scale) - 1e-9)), float(grid.qmax))
    grid.zero_point = np.asarray(zero_point)
    cfg.signed, cfg.threshold, cfg.grid = False, threshold, grid
    cfg.range_min, cfg.range_max = (
        -zero_point * float(grid.scale),
        (grid.qmax - zero_point) * float(grid.scale),
    )


def _histogram_values(stats: NodeStatistics, z_threshold: float = np.inf) -> tuple[tuple, float, float]:
    """The non-empty bins as intervals clipped to [min, max], their counts, and (min, max);
    with a finite ``z_threshold``, without the values further than that many standard
    deviations from the mean (and min, max within that range)."""
    low, high = float(stats.min), float(stats.max)
    counts = np.asarray(stats.counts)
    if stats.count == 0 or counts.sum() == 0:
        return (np.zeros(0), np.zeros(0), np.zeros(0)), low, high
    if np.isfinite(z_threshold):
        mean = stats.sum / stats.count
        std = float(np.sqrt(max(stats.sum_squares / stats.count - mean * mean, 0.0)))
        low, high = max(low, mean - z_threshold * std), min(high, mean + z_threshold * std)
    edges = np.asarray(stats.edges, dtype=np.float64)
    keep = (counts > 0) & (edges[1:] >= low) & (edges[:-1] <= high)
    lo = np.clip(edges[:-1][keep], low, high)
    hi = np.clip(edges[1:][keep], low, high)
    return (lo, hi, counts[keep].astype(np.float64)), low, high


def _widest(errors: np.ndarray, tolerance: float) -> np.ndarray:
    """Which candidates' errors are within ``tolerance`` times the least (the least only, at 0)."""
    return errors <= np.min(errors) * (1.0 + tolerance)


def _search_symmetric_hist(bins, ref, n_bits, signed, errors_of, pow2, tolerance: float = 0.0) -> float:
    """Threshold minimising the histogram error (the largest within ``tolerance`` of the
    least); candidate 0 is the no-clipping one."""

    def errors(thresholds: np.ndarray) -> np.ndarray:
        return errors_of(bins, symmetric_grid(thresholds, n_bits, signed), tolerance)

    if pow2:
        top = int(np.log2(power_of_two_ceil(ref)))
        cands = 2.0 ** np.arange(top, max(top - 40, _MIN_EXP - 1), -1)
        return float(cands[_widest(errors(cands), tolerance)].max())
    # coarse: 8 per octave over 12 octaves below the maximum; fine: 32 per coarse step
    offsets = -np.arange(97) / 8.0
    errs = errors(np.maximum(ref * 2.0**offsets, MIN_THRESHOLD))
    best = offsets[int(np.argmin(errs))]
    fine = np.minimum(best + np.linspace(-1 / 8, 1 / 8, 33), 0.0)
    fine_errs = errors(np.maximum(ref * 2.0**fine, MIN_THRESHOLD))
    all_offsets = np.concatenate([offsets, fine])
    all_errs = np.concatenate([errs, fine_errs])
    return float(max(ref * 2.0 ** all_offsets[_widest(all_errs, tolerance)].max(), MIN_THRESHOLD))


def _search_uniform_hist(bins, lo, hi, n_bits, errors_of, tolerance: float = 0.0) -> tuple[float, float]:
    """(min, max) minimising the histogram error over shrink factors of both ends (the
    widest within ``tolerance`` of the least)."""

    def search(lo_off: np.ndarray, hi_off: np.ndarray):
        a, b = np.meshgrid(lo_off, hi_off, indexing="ij")
        a, b = a.ravel(), b.ravel()
        return a, b, errors_of(bins, uniform_grid(lo * 2.0**a, hi * 2.0**b, n_bits), tolerance)

    coarse = -np.arange(25) / 3.0  # down to 1/256 of each end, 3 per octave
    a, b, errs = search(coarse, coarse)
    i = int(np.argmin(errs))
    step = np.linspace(-1 / 3, 1 / 3, 9)
    fa, fb, ferrs = search(np.minimum(a[i] + step, 0.0), np.minimum(b[i] + step, 0.0))
    a, b, errs = np.concatenate([a, fa]), np.concatenate([b, fb]), np.concatenate([errs, ferrs])
    ok = _widest(errs, tolerance)
    width = np.where(ok, hi * 2.0**b - lo * 2.0**a, -np.inf)
    i = int(np.argmax(width))
    return float(lo * 2.0 ** a[i]), float(hi * 2.0 ** b[i])


# --------------------------------------------------------------------- weights


def fill_weights_config(cfg: WeightsQuantConfig, w: np.ndarray, l_p_value: float = 2.0) -> None:
    """Set the threshold (or range) and ``cfg.grid`` of one weight tensor.

    Per output channel along ``cfg.channel_axes`` when ``cfg.per_channel`` (parameters
    of shape (C,), C in C order of those axes), else per tensor (0-d parameters).
    SYMMETRIC / POWER_OF_TWO are signed symmetric; UNIFORM sets per-channel
    ``range_min`` <= 0 <= ``range_max``. With ``HMSE`` and ``cfg.importance`` (the
    Hessian diagonal, broadcastable to ``w``) each squared error is weighted by it.
    """
    w = np.asarray(w)
    dtype = np.float64 if w.dtype == np.float64 else np.float32
    w = w.astype(dtype, copy=False)
    per_channel = bool(cfg.per_channel and cfg.channel_axes)

    def as_rows(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(channel_view(a, cfg.channel_axes) if per_channel else a.reshape(1, -1))

    rows = as_rows(w)
    if not np.isfinite(rows.sum(dtype=np.float64)):
        rows = np.where(np.isfinite(rows), rows, 0).astype(dtype)
    p = error_power(cfg.error_method, l_p_value)
    kl = cfg.error_method == QuantizationErrorMethod.KL
    importance = None
    if cfg.error_method == QuantizationErrorMethod.HMSE and cfg.importance is not None and w.size:
        importance = as_rows(np.broadcast_to(np.asarray(cfg.importance, dtype), w.shape))
    if rows.shape[1] == 0:
        rows = np.zeros((rows.shape[0], 1), dtype=dtype)
        importance = None
    if cfg.method == QuantizationMethod.UNIFORM:
        lo = np.minimum(rows.min(axis=1), 0).astype(np.float64)
        hi = np.maximum(rows.max(axis=1), 0).astype(np.float64)
        if kl:
            lo, hi = uniform_rows_range(rows, lo, hi, cfg.n_bits)
        elif p is not None:
            lo, hi = _blocks(
                rows,
                lambda blk, sl: _search_uniform_rows(
                    blk, lo[sl], hi[sl], cfg.n_bits, p, _sliced(importance, sl)
                ),
            )
        if not per_channel:
            lo, hi = lo.reshape(()), hi.reshape(())
        cfg.range_min, cfg.range_max, cfg.threshold = lo, hi, None
        cfg.grid = uniform_grid(lo, hi, cfg.n_bits)
        return
    ref = np.abs(rows).max(axis=1).astype(np.float64)
    pow2 = cfg.method == QuantizationMethod.POWER_OF_TWO
    if kl:
        threshold = symmetric_rows_threshold(rows, ref, cfg.n_bits, pow2)
    elif p is None:
        threshold = power_of_two_ceil(ref) if pow2 else np.maximum(ref, MIN_THRESHOLD)
    else:
        (threshold,) = _blocks(
            rows,
            lambda blk, sl: (
                _search_symmetric_rows(blk, ref[sl], cfg.n_bits, p, pow2, _sliced(importance, sl)),
            ),
        )
    if not per_channel:
        threshold = threshold.reshape(())
    cfg.threshold, cfg.range_min, cfg.range_max = threshold, None, None
    cfg.grid = symmetric_grid(threshold, cfg.n_bits, signed=True)


def _sliced(importance: np.ndarray | None, rows: slice) -> np.ndarray | None:
    return None if importance is None else importance[rows]


def _blocks(rows: np.ndarray, search) -> tuple[np.ndarray, ...]:
    """Run ``search(block, row_slice)`` over blocks of whole rows small enough for cache."""
    n_rows, k = rows.shape
    step = max(1, _CHUNK // k)
    parts = [search(rows[s : s + step], slice(s, s + step)) for s in range(0, n_rows, step)]
    return tuple(np.concatenate([part[i] for part in parts]) for i in range(len(parts[0])))


class _RowErrors:
    """Per row, the sum of ``|q(x) - x|**p`` in grid units (float32 work, in place).

    ``scaled(factor)`` quantizes ``block * factor`` on the integer grid (a scalar factor:
    the fast path); ``per_row(inv_scale, zero_point)`` uses one scale per row.
    """

    def __init__(self, block: np.ndarray, qmin: int, qmax: int, p: float, weights: np.ndarray | None = None):
        self.block, self.p, self.weights = block, p, weights
        self.qmin, self.qmax = block.dtype.type(qmin), block.dtype.type(qmax)
        self.v = np.empty_like(block)
        self.q = np.empty_like(block)

    def scaled(self, factor: float, block: np.ndarray | None = None) -> np.ndarray:
        np.multiply(self.block if block is None else block, self.v.dtype.type(factor), out=self.v)
        return self._finish()

    def per_row(self, inv_scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
        np.multiply(self.block, inv_scale[:, None].astype(self.v.dtype), out=self.v)
        self.v += zero_point[:, None].astype(self.v.dtype)
        return self._finish()

    def _finish(self) -> np.ndarray:
        v, q = self.v, self.q
        np.rint(v, out=q)
        np.clip(q, self.qmin, self.qmax, out=q)
        q -= v
        if self.weights is not None:  # HMSE: each squared error weighted by its Hessian diagonal
            return np.einsum("ij,ij,ij->i", q, q, self.weights).astype(np.float64)
        if self.p == 2.0:
            return np.einsum("ij,ij->i", q, q).astype(np.float64)
        return _power(np.abs(q, out=q), self.p).sum(axis=1, dtype=np.float64)


def _search_symmetric_rows(
    block: np.ndarray, ref: np.ndarray, n_bits: int, p: float, pow2: bool, weights: np.ndarray | None = None
) -> np.ndarray:
    """Per-row threshold of a signed symmetric quantizer, all rows at once.

    Rows are normalised by a per-row base threshold once, so every candidate is one
    scalar multiple of the normalised block. Coarse: thresholds ``base * 2**-j`` (j/3
    octaves, or whole octaves for powers of two) going down until a row has not improved
    twice; fine (symmetric only, ``_FINE``): +-1 and +-2 steps of 1/15, 1/75 then
    1/375 octave around each row's best, re-normalising between levels. Candidates stay in [MIN_THRESHOLD,
    max |w|] (powers of two: up to the power of two above it).
    """
    levels = 2.0 ** (n_bits - 1)
    errors = _RowErrors(block, -int(levels), int(levels) - 1, p, weights)
    base = power_of_two_ceil(ref) if pow2 else np.maximum(ref, MIN_THRESHOLD)
    top = base.copy()  # largest allowed threshold; no clipping at the top
    normed = block * (1.0 / base)[:, None].astype(block.dtype)

    def err(b: np.ndarray, t_base: np.ndarray, o: float) -> np.ndarray:
        t = t_base * 2.0**o
        e = errors.scaled(levels * 2.0**-o, b) * (t / levels) ** p
        return np.where((t >= MIN_THRESHOLD) & (t <= top * (1 + 1e-12)), e, np.inf)

    nocl_e = best_e = err(normed, base, 0.0)
    best_o = np.zeros_like(base)
    misses = np.zeros(base.shape, dtype=np.int64)
    step = 1.0 if pow2 else 1.0 / 3.0
    for j in range(1, 17 if pow2 else 25):  # 16 octaves, or 1/3 octave steps down to 1/256
        active = misses < 2
        if not active.any():
            break
        e = err(normed, base, -j * step)
        better = active & (e < best_e)
        best_o, best_e = np.where(better, -j * step, best_o), np.where(better, e, best_e)
        misses = np.where(better, 0, misses + 1)
    best_t = base * 2.0**best_o
    if not pow2:
        for fine, ds in _FINE:
            centre = best_t
            normed = block * (1.0 / centre)[:, None].astype(block.dtype)
            for d in ds:
                e = err(normed, centre, d * fine)
                better = e < best_e
                best_t, best_e = (
                    np.where(better, centre * 2.0 ** (d * fine), best_t),
                    np.where(better, e, best_e),
                )
    nocl_t = base
    # near ties are settled exactly, with fake_quant's arithmetic
    close = (best_t != nocl_t) & (best_e > nocl_e * (1 - 1e-4))
    if close.any():
        rows, w = block[close], None if weights is None else weights[close]
        exact_best = quantization_error(rows, w, symmetric_grid(best_t[close], n_bits, True), p)
        exact_nocl = quantization_error(rows, w, symmetric_grid(nocl_t[close], n_bits, True), p)
        best_t[close] = np.where(exact_nocl <= exact_best, nocl_t[close], best_t[close])
    return np.maximum(best_t, MIN_THRESHOLD)


def _search_uniform_rows(
    block: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    n_bits: int,
    p: float,
    weights: np.ndarray | None = None,
):
    """Per-row (min, max): both ends shrunk together (coarse), then each end alone (fine)."""
    errors = _RowErrors(block, 0, 2**n_bits - 1, p, weights)

    def err(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        g = uniform_grid(lo * 2.0**a, hi * 2.0**b, n_bits)
        return errors.per_row(1.0 / g.scale, g.zero_point) * g.scale**p

    best_a = np.zeros_like(lo)
    best_b = np.zeros_like(hi)
    nocl_e = best_e = err(best_a, best_b)
    misses = np.zeros(lo.shape, dtype=np.int64)
    for j in range(1, 25):  # 1/3 octave steps down to 1/256, until a row misses twice
        active = misses < 2
        if not active.any():
            break
        o = np.full_like(lo, -j / 3)
        e = err(o, o)
        better = active & (e < best_e)
        best_a, best_b, best_e = (
            np.where(better, o, best_a),
            np.where(better, o, best_b),
            np.where(better, e, best_e),
        )
        misses = np.where(better, 0, misses + 1)
    for fine in (1 / 9, 1 / 27, 1 / 81):
        for end in (0, 1):
            centre = best_a if end == 0 else best_b
            for d in (-1, 1):
                o = np.minimum(centre + d * fine, 0.0)
                e = err(o, best_b) if end == 0 else err(best_a, o)
                better = e < best_e
                if end == 0:
                    best_a = np.where(better, o, best_a)
                else:
                    best_b = np.where(better, o, best_b)
                best_e = np.where(better, e, best_e)
    b_lo, b_hi = lo * 2.0**best_a, hi * 2.0**best_b
    close = ((best_a != 0) | (best_b != 0)) & (best_e > nocl_e * (1 - 1e-4))
    if close.any():
        rows, w = block[close], None if weights is None else weights[close]
        exact_best = quantization_error(rows, w, uniform_grid(b_lo[close], b_hi[close], n_bits), p)
        exact_nocl = quantization_error(rows, w, uniform_grid(lo[close], hi[close], n_bits), p)
        keep = exact_nocl <= exact_best
        b_lo[close] = np.where(keep, lo[close], b_lo[close])
        b_hi[close] = np.where(keep, hi[close], b_hi[close])
    return b_lo, b_hi
