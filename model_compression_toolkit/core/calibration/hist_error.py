"""Mean ``|q(x) - x|**p`` of a histogram on many candidate grids at once, in closed form.

``(lo, hi, counts) -> HistogramEdges (once per histogram) -> .error(grid, p) -> (J,)``
(in a search, ``.least_errors(grid, p, tolerance)``: +inf where a grid cannot be chosen)

Bin i holds ``counts[i]`` values spread uniformly over ``[lo[i], hi[i]]`` (a zero-width
bin: all at one point). In grid units ``t = x / s`` the error's antiderivative is
``s**(p+1) * (k t + P(t))``, ``k = 1 / ((p+1) 2**p)`` the mean of ``|u|**p`` over a step
and ``P`` bounded inside the grid's rounding range ``[a, b]``::

    P(t) = sign(u) |u|**(p+1) / (p+1) - k u + T(d) - k d
    u = c - round(c),  c = clip(t, a, b),  d = t - c (the clipped part)
    T(d) = sign(d) ((|d| + 1/2)**(p+1) - (1/2)**(p+1)) / (p+1)

The linear part integrates to ``k`` times each bin's count. ``P`` is evaluated once per
distinct edge (neighbouring bins share one) and the per-bin differences are summed by
parts: ``sum_i w_i (P(hi_i) - P(lo_i)) = P . v``, ``w_i = counts_i / width_i`` and
``v`` the ``w`` of the bins an edge ends minus those it starts: one matrix-vector product.
The work runs in blocks of candidates small enough for the buffers to stay in cache, and
each candidate's error is computed alike whatever the other candidates are.

A search wants the least error, or the widest range within a tolerance of it:
``least_errors`` skips the candidates whose clipping alone provably costs more.
"""

from __future__ import annotations

import numpy as np

from model_compression_toolkit.core.quant_config import QuantGrid

_BLOCK = 1 << 14  # (candidates x edges) elements per block: its four buffers stay in cache
_BATCH = 32  # candidates evaluated between two looks at the bounds (`HistogramEdges.least_errors`)


class HistogramEdges:
    """A histogram's distinct bin edges and the weights that sum a function's per-bin
    differences over them; what does not depend on the candidate grid, computed once.

    Args:
        lo / hi: each bin's ends (any order of bins; bins may leave gaps or touch).
        counts: each bin's count.
    """

    def __init__(self, lo: np.ndarray, hi: np.ndarray, counts: np.ndarray):
        lo = np.asarray(lo, dtype=np.float64).ravel()
        hi = np.asarray(hi, dtype=np.float64).ravel()
        counts = np.asarray(counts, dtype=np.float64).ravel()
        n = lo.size
        width = hi - lo
        spread = width > 0
        self.total = float(counts.sum())
        self.spread_count = float(counts[spread].sum())
        self.points, self.point_counts = lo[~spread], counts[~spread]  # zero-width bins
        ends = np.empty(2 * n)
        ends[0::2], ends[1::2] = lo, hi
        new = np.ones(2 * n, dtype=bool)
        new[1:] = ends[1:] != ends[:-1]  # a bin's end that is the next bin's start: one edge
        index = np.cumsum(new) - 1
        self.edges = ends[new]
        w = np.where(spread, counts / np.where(spread, width, 1.0), 0.0)
        m = self.edges.size
        self.v = np.bincount(index[1::2], w, minlength=m) - np.bincount(index[0::2], w, minlength=m)
        self._lo, self._hi, self._counts = lo, hi, counts
        self._sums: tuple | None = None  # for `_clip_bound`, made on first use

    def error(self, grid: QuantGrid, p: float) -> np.ndarray:
        """The mean ``|q(x) - x|**p`` on each grid: shape of ``grid.scale`` ((J,) or 0-d)."""
        scale = np.asarray(grid.scale, dtype=np.float64)
        shape = scale.shape
        s = scale.ravel()
        zp = np.broadcast_to(np.asarray(grid.zero_point, dtype=np.float64), shape).ravel()
        k = 1.0 / ((p + 1) * 2.0**p)
        out = np.zeros(s.size)
        if self.edges.size:
            inv = 1.0 / s
            a = (grid.qmin - zp) - 0.5  # the rounding range in grid units
            b = (grid.qmax - zp) + 0.5
            out = s**p * (k * self.spread_count + s * self._sum_p(inv, a, b, p, k))
        if self.points.size:  # as fake_quant rounds: all values at one point
            sc, z = s[:, None], zp[:, None]
            q = np.clip(np.round(self.points / sc) + z, grid.qmin, grid.qmax)
            out = out + (np.abs((q - z) * sc - self.points) ** p) @ self.point_counts
        total = self.total if self.total > 0 else 1.0
        # the spread bins' closed form sums terms that cancel: values of 1e-27 leave a hair
        # under 0, which no error is (a search for the least would find no candidate within it)
        return (np.maximum(out, 0.0) / total).reshape(shape)[()]

    def least_errors(self, grid: QuantGrid, p: float, tolerance: float) -> np.ndarray:
        """As `error` for the candidates whose error may be the least or within
        ``1 + tolerance`` times it; +inf for the others, whose error provably exceeds that.

        Candidates are evaluated in batches in order of a lower bound of their error
        (`_clip_bound`: what the values beyond the grid's range cost at least) until the next
        bound is over ``1 + tolerance`` times the least error found: every candidate left
        has a larger error. A search that takes the least error, or the widest range
        within ``tolerance`` of it, chooses from these what it chooses from `error`'s.
        """
        bound = self._clip_bound(grid, p)
        if bound is None:
            return self.error(grid, p)
        scale = np.asarray(grid.scale, dtype=np.float64)
        zp = np.broadcast_to(np.asarray(grid.zero_point, dtype=np.float64), scale.shape)
        out = np.full(scale.shape, np.inf)
        order = np.argsort(bound, kind="stable")
        best = np.inf
        for start in range(0, order.size, _BATCH):
            limit = (1.0 + tolerance) * best * (1.0 + 1e-6)  # far above the error's rounding
            batch = order[start : start + _BATCH]
            batch = batch[bound[batch] <= limit]
            if not batch.size:
                break
            out[batch] = self.error(QuantGrid(scale[batch], zp[batch], grid.qmin, grid.qmax), p)
            best = min(best, float(out[batch].min()))
        return out

    def _clip_bound(self, grid: QuantGrid, p: float) -> np.ndarray | None:
        """A lower bound of each candidate's error (p >= 1; None otherwise, or for 0-d grids).

        A value x above the rounding range's top ``up`` costs ``|q(x) - x|**p >= (x - up)**p``,
        and ``x >= lo`` in its bin; over the bins whose ``lo >= up`` (count C, overshoots
        summing to D) Jensen's inequality bounds their sum by ``C (D / C)**p``; likewise below.
        D comes from suffix sums, less a margin far above their rounding (a sum of n terms
        rounds by at most n 2**-53 of its magnitude: under 1e-11 for 65536 bins).
        """
        scale = np.asarray(grid.scale, dtype=np.float64)
        if p < 1.0 or scale.ndim != 1 or not self._lo.size:
            return None
        if self._sums is None:
            self._sums = (
                _cumulative(self._lo, self._counts, True),
                _cumulative(self._hi, self._counts, False),
            )
        (lo, c0, c1, a1), (hi, d0, d1, b1) = self._sums
        zp = np.broadcast_to(np.asarray(grid.zero_point, dtype=np.float64), scale.shape)
        up, low = (grid.qmax - zp + 0.5) * scale, (grid.qmin - zp - 0.5) * scale
        i = np.searchsorted(lo, up, side="left")  # bins i.. start at or above up
        over = c1[i] - up * c0[i] - 1e-10 * (a1[i] + np.abs(up) * c0[i])
        j = np.searchsorted(hi, low, side="right")  # bins ..j-1 end at or below low
        under = low * d0[j] - d1[j] - 1e-10 * (b1[j] + np.abs(low) * d0[j])
        bound = _jensen(c0[i], over, p) + _jensen(d0[j], under, p)
        bound = np.where(np.isnan(bound), 0.0, bound)  # no bound (a grid beyond float64's range)
        return bound * (1.0 - 1e-9) / (self.total if self.total > 0 else 1.0)

    def _sum_p(self, inv: np.ndarray, a: np.ndarray, b: np.ndarray, p: float, k: float) -> np.ndarray:
        """``P(edges / s_j) . v`` per candidate j."""
        e, v = self.edges, self.v
        rows = max(1, _BLOCK // e.size)
        t, c, x, y = (np.empty((min(rows, inv.size), e.size)) for _ in range(4))
        out = np.empty(inv.size)
        for start in range(0, inv.size, rows):
            j = slice(start, start + rows)
            r = inv[j].size
            tb, cb, xb, yb = t[:r], c[:r], x[:r], y[:r]
            np.multiply(inv[j, None], e, out=tb)
            np.maximum(tb, a[j, None], out=cb)
            np.minimum(cb, b[j, None], out=cb)
            np.subtract(tb, cb, out=tb)  # d: the clipped part
            np.rint(cb, out=xb)
            np.subtract(cb, xb, out=cb)  # u
            _saw(cb, xb, p, k)
            _tail(tb, yb, p, k)
            xb += yb
            out[j] = np.einsum("ij,j->i", xb, v)  # per row alike whatever the block (not BLAS)
        return out


def _cumulative(x: np.ndarray, counts: np.ndarray, from_top: bool) -> tuple[np.ndarray, ...]:
    """``x`` sorted, and sums of ``counts``, ``counts * x`` and ``counts * |x|`` over the
    bins from index i to the top (``from_top``) or below index i, for i = 0..n."""
    order = np.argsort(x, kind="stable")
    xs, cs = x[order], counts[order]
    sums = []
    for terms in (cs, cs * xs, cs * np.abs(xs)):
        total = np.zeros(xs.size + 1)
        if from_top:
            total[:-1] = np.cumsum(terms[::-1])[::-1]  # summed from the top: no cancellation
        else:
            total[1:] = np.cumsum(terms)
        sums.append(total)
    return (xs, *sums)


def _jensen(count: np.ndarray, overshoot: np.ndarray, p: float) -> np.ndarray:
    """``count (overshoot / count)**p``, 0 where either is not positive."""
    ok = (count > 0) & (overshoot > 0)
    safe = np.where(ok, count, 1.0)
    return np.where(ok, safe * (np.where(ok, overshoot, 0.0) / safe) ** p, 0.0)


def _saw(u: np.ndarray, out: np.ndarray, p: float, k: float) -> None:
    """``out = sign(u) |u|**(p+1) / (p+1) - k u``."""
    if p == 2.0:  # u (u**2 / 3 - 1/12)
        np.multiply(u, u, out=out)
        out *= 1.0 / 3.0
        out -= k
        out *= u
        return
    np.abs(u, out=out)
    _power(out, p, out)  # |u|**p
    out *= 1.0 / (p + 1)
    out -= k
    out *= u


def _tail(d: np.ndarray, out: np.ndarray, p: float, k: float) -> None:
    """``out = T(d) - k d`` (zero where nothing is clipped); overwrites ``d``."""
    if p == 2.0:  # d (d**2 / 3 + |d| / 2 + 1/6)
        np.abs(d, out=out)
        out *= 1.0 / 3.0
        out += 0.5
        out *= d
        np.abs(out, out=out)  # d**2 / 3 + |d| / 2
        out += 0.25 - k
        out *= d
        return
    np.abs(d, out=out)
    out += 0.5
    _power(out, p + 1.0, out)
    out -= 0.5 ** (p + 1.0)
    out *= 1.0 / (p + 1)
    np.copysign(out, d, out=out)
    d *= k
    out -= d


def _power(x: np.ndarray, e: float, out: np.ndarray) -> None:
    """``out = x**e`` for ``x >= 0``: by multiplication for small integer exponents."""
    if e == 1.0:
        np.copyto(out, x)
    elif e == 2.0:
        np.multiply(x, x, out=out)
    elif e == round(e) and 3 <= e <= 6:
        base = x.copy() if out is x else x
        np.multiply(base, base, out=out)
        for _ in range(int(e) - 2):
            out *= base
    else:
        np.power(x, e, out=out)


def histogram_error(
    lo: np.ndarray, hi: np.ndarray, counts: np.ndarray, grid: QuantGrid, p: float
) -> np.ndarray:
    """Mean ``|q(x) - x|**p`` of a histogram whose bin i holds ``counts[i]`` values spread
    uniformly over ``[lo[i], hi[i]]``, in closed form (no alignment artefacts between the
    bins and the grid). Grid parameters of shape (J,) give one error per grid."""
    return HistogramEdges(lo, hi, counts).error(grid, p)
