"""Mean ``|q(x) - x|**p`` of a histogram on many candidate grids at once, in closed form.

``(lo, hi, counts) -> HistogramEdges (once per histogram) -> .error(grid, p) -> (J,)``

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
The work runs in blocks of candidates small enough for the buffers to stay in cache.
"""

from __future__ import annotations

import numpy as np

from model_compression_toolkit.core.quant_config import QuantGrid

_BLOCK = 1 << 14  # (candidates x edges) elements per block: its four buffers stay in cache


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
        return (out / total).reshape(shape)[()]

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
            out[j] = xb @ v
        return out


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
