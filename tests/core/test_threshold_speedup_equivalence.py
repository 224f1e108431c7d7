"""The histogram error's fast form (`calibration.hist_error`) against the form it replaced.

The activation threshold search evaluates ``histogram_error`` on hundreds of candidate grids
per activation; its faster form evaluates the antiderivative once per distinct bin edge, in
grid units, with polynomial fast paths, and a search skips the candidates whose clipping
alone provably costs too much (``least_errors``). Here it is checked against a verbatim copy
of the former closed form (``reference_histogram_error``, two antiderivatives per bin, in
the units of the values): the errors agree within 1e-9 relative on random histograms
(signed and unsigned, gaps, empty and zero-width bins, unsorted bins), the skipped
candidates could not have been chosen, and the threshold search picks the same grid, bit
for bit, with either."""

from __future__ import annotations

import numpy as np
import pytest

from model_compression_toolkit.core.calibration import thresholds
from model_compression_toolkit.core.calibration.hist_error import HistogramEdges, histogram_error
from model_compression_toolkit.core.calibration.quantizers import symmetric_grid, uniform_grid
from model_compression_toolkit.core.calibration.statistics import StatisticsCollector
from model_compression_toolkit.core.config import QuantizationErrorMethod as QE
from model_compression_toolkit.core.config import QuantizationMethod as QM
from model_compression_toolkit.core.quant_config import ActivationQuantConfig, QuantGrid

# ----------------------------------------------------------- the former closed form, verbatim


def _ref_signed_power(y: np.ndarray, e: float) -> np.ndarray:
    """``sign(y) * |y|**e``; by multiplication for MSE's and MAE's exponents (3 and 2), as
    numpy's general power is several times slower."""
    if e == 3.0:
        return y * y * y
    if e == 2.0:
        return y * np.abs(y)
    return np.sign(y) * np.abs(y) ** e


def reference_histogram_error(
    lo: np.ndarray, hi: np.ndarray, counts: np.ndarray, grid: QuantGrid, p: float
) -> np.ndarray:
    """Mean ``|q(x) - x|**p`` of a histogram whose bin i holds ``counts[i]`` values spread
    uniformly over ``[lo[i], hi[i]]``, in closed form (no alignment artefacts between
    the bins and the grid). Grid parameters of shape (J,) give one error per grid.

    On ``[L, U)`` = the grid's rounding range the error is the sawtooth ``s * u``
    (``u = x/s - round(x/s)``), whose antiderivative of ``|.|**p`` is
    ``s**p x / ((p+1) 2**p) + s**(p+1) (sign(u) |u|**(p+1) - u / 2**p) / (p+1)``;
    outside it is the clipping error ``x - c`` with antiderivative ``sign |.|**(p+1)/(p+1)``.
    """
    scale = np.asarray(grid.scale, dtype=np.float64)
    zp = np.asarray(grid.zero_point, dtype=np.float64)
    if scale.ndim:
        scale, zp = scale[:, None], zp[:, None]
    lo_q, hi_q = (grid.qmin - zp) * scale, (grid.qmax - zp) * scale
    low, up = lo_q - scale / 2, hi_q + scale / 2
    k = 1.0 / ((p + 1) * 2.0**p)

    def tail(y):
        return _ref_signed_power(y, p + 1) / (p + 1)

    def saw(x):
        r = x / scale
        u = r - np.round(r)
        return scale**p * x * k + scale ** (p + 1) * (_ref_signed_power(u, p + 1) / (p + 1) - u * k)

    def antiderivative(x):
        inside = saw(np.clip(x, low, up))
        below = tail(x - lo_q) - tail(-scale / 2) + saw(low)
        above = tail(x - hi_q) - tail(scale / 2) + saw(up)
        return np.where(x < low, below, np.where(x > up, above, inside))

    width = hi - lo
    spread = (antiderivative(hi) - antiderivative(lo)) / np.where(width > 0, width, 1.0)
    q = np.clip(np.round(lo / scale) + zp, grid.qmin, grid.qmax)
    point = np.abs((q - zp) * scale - lo) ** p  # zero-width bins: all values at one point
    err = np.where(width > 0, spread, point)
    total = counts.sum()
    return (err * counts).sum(axis=-1) / (total if total > 0 else 1.0)


# ------------------------------------------------------------------------- the cases
P_VALUES = [1.0, 2.0, 2.5, 4.0]
BITS = [2, 4, 8, 16]


def _random_bins(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bins as `_histogram_values` makes them (sorted, touching or with gaps, the end bins
    clipped to [min, max], maybe zero-width), sometimes with empty bins left in or the
    bins out of order."""
    n = int(rng.integers(1, 400))
    scale = float(rng.choice([1e-3, 1.0, 50.0]))
    centre = float(rng.choice([0.0, 0.0, 1.0, -1.0])) * scale * rng.random()
    edges = centre + scale * np.linspace(-rng.random(), rng.random() + 1e-3, n + 1)
    if rng.random() < 0.5:  # positive only (a ReLU's)
        edges = edges - edges[0]
    counts = rng.poisson(rng.random() * 20, n).astype(np.float64)
    counts[rng.integers(0, n)] += 1  # never all empty
    lo, hi = edges[:-1].copy(), edges[1:].copy()
    low, high = lo[0] + rng.random() * (hi[0] - lo[0]), hi[-1] - rng.random() * (hi[-1] - lo[-1])
    if rng.random() < 0.2:
        high = lo[-1]  # the maximum on an edge: the last bin clipped to one point
    lo, hi = np.clip(lo, low, high), np.clip(hi, low, high)
    if rng.random() < 0.7:  # the non-empty bins only: gaps between them
        keep = counts > 0
        lo, hi, counts = lo[keep], hi[keep], counts[keep]
    if rng.random() < 0.2:
        order = rng.permutation(lo.size)
        lo, hi, counts = lo[order], hi[order], counts[order]
    return lo, hi, counts


def _random_grids(rng: np.random.Generator, lo: np.ndarray, hi: np.ndarray, j: int) -> QuantGrid:
    n_bits = int(rng.choice(BITS))
    low, high = float(min(lo.min(), 0.0)), float(max(hi.max(), 0.0))
    shrink = 2.0 ** -rng.uniform(0.0, 9.0, j)
    kind = rng.integers(0, 3)
    if kind == 0:  # symmetric, signed or not
        ref = max(abs(low), abs(high), 1e-6)
        return symmetric_grid(ref * shrink, n_bits, signed=bool(rng.random() < 0.5))
    if kind == 1:  # powers of two
        ref = max(abs(low), abs(high), 1e-6)
        return symmetric_grid(2.0 ** np.round(np.log2(ref * shrink)), n_bits, signed=bool(rng.random() < 0.5))
    return uniform_grid(low * 2.0 ** -rng.uniform(0.0, 9.0, j), high * shrink, n_bits)


@pytest.mark.parametrize("p", P_VALUES)
@pytest.mark.parametrize("seed", range(60))
def test_histogram_error_equals_the_former_closed_form(seed, p):
    rng = np.random.default_rng(seed)
    lo, hi, counts = _random_bins(rng)
    grid = _random_grids(rng, lo, hi, int(rng.integers(1, 80)))
    new = histogram_error(lo, hi, counts, grid, p)
    ref = reference_histogram_error(lo, hi, counts, grid, p)
    assert new.shape == ref.shape
    np.testing.assert_allclose(new, ref, rtol=1e-9, atol=0)


@pytest.mark.parametrize("p", P_VALUES)
def test_edge_cases_equal_the_former_closed_form(p):
    one = symmetric_grid(np.array([1.0, 0.5, 2.0**-10]), 8, signed=True)
    cases = [
        (np.array([0.3]), np.array([0.3]), np.array([5.0])),  # one point (a constant activation)
        (np.array([-1.0, 0.0, 0.0]), np.array([0.0, 0.0, 2.0]), np.array([1.0, 3.0, 2.0])),  # a point between
        (np.array([-1.0, 0.5]), np.array([-0.5, 3.0]), np.array([0.0, 0.0])),  # all empty
        (np.array([-3.0, -0.3, 2.5, 1.0]), np.array([-2.0, 0.2, 6.0, 1.0]), np.array([1.0, 2.0, 1.0, 2.0])),
        (np.array([1e6]), np.array([1e6 + 1.0]), np.array([1.0])),  # far beyond every grid
    ]
    for lo, hi, counts in cases:
        np.testing.assert_allclose(
            histogram_error(lo, hi, counts, one, p),
            reference_histogram_error(lo, hi, counts, one, p),
            rtol=1e-9,
        )
    scalar = symmetric_grid(1.0, 4, signed=False)  # 0-d parameters: one error, 0-d
    lo, hi, counts = cases[3]
    new, ref = (
        histogram_error(lo, hi, counts, scalar, p),
        reference_histogram_error(lo, hi, counts, scalar, p),
    )
    assert np.ndim(new) == np.ndim(ref) == 0
    assert float(new) == pytest.approx(float(ref), rel=1e-9)
    empty = (np.zeros(0), np.zeros(0), np.zeros(0))  # no bins at all: zeros
    assert histogram_error(*empty, one, p).tolist() == reference_histogram_error(*empty, one, p).tolist()


def test_prepared_edges_serve_many_grids():
    """One `HistogramEdges` gives each grid's error as a fresh computation does."""
    rng = np.random.default_rng(3)
    lo, hi, counts = _random_bins(rng)
    edges = HistogramEdges(lo, hi, counts)
    for seed in range(5):
        grid = _random_grids(np.random.default_rng(seed), lo, hi, 30)
        np.testing.assert_array_equal(edges.error(grid, 2.0), histogram_error(lo, hi, counts, grid, 2.0))


@pytest.mark.parametrize("p", [*P_VALUES, 0.5])
@pytest.mark.parametrize("seed", range(40))
def test_least_errors_skip_only_candidates_that_cannot_be_chosen(seed, p):
    """The clipping bound is below every error; `least_errors` gives the very errors of
    `error` where it evaluates, and skips (+inf) only errors over 1 + tolerance times the least."""
    rng = np.random.default_rng(100 + seed)
    lo, hi, counts = _random_bins(rng)
    grid = _random_grids(rng, lo, hi, int(rng.integers(1, 200)))
    edges = HistogramEdges(lo, hi, counts)
    full = edges.error(grid, p)
    bound = edges._clip_bound(grid, p)
    if p < 1.0 or np.ndim(grid.scale) == 0:
        assert bound is None
    else:
        assert bound is not None and np.all(bound <= full)
    for tolerance in (0.0, 0.2):
        least = edges.least_errors(grid, p, tolerance)
        seen = np.isfinite(least)
        np.testing.assert_array_equal(least[seen], full[seen])
        assert np.all(full[~seen] > (1 + tolerance) * full.min())
        assert least.min() == full.min()


def test_least_errors_skip_most_clipping_candidates():
    """On a Gaussian's histogram at 8 bits most of a uniform search's 625 candidates clip
    far too much to be chosen: they are not evaluated."""
    x = np.random.default_rng(0).standard_normal(200_000)
    stats = _stats(x)
    bins = thresholds._histogram_values(stats)[0]
    steps = -np.arange(25) / 3.0
    a, b = (g.ravel() for g in np.meshgrid(steps, steps, indexing="ij"))
    grid = uniform_grid(stats.min * 2.0**a, stats.max * 2.0**b, 8)
    least = HistogramEdges(*bins).least_errors(grid, 2.0, thresholds.CLIP_TOLERANCE)
    assert np.isfinite(least).sum() < 0.25 * least.size


# ---------------------------------------------------------------- the chosen grids
def _stats(x: np.ndarray, n_bins: int = 2048):
    collector = StatisticsCollector(n_bins, None)
    collector.update(x.astype(np.float32))
    return collector.result()


def _activations(seed: int) -> np.ndarray:
    """Realistic activations: ReLU, shifted ReLU (batch norm after it), hard-swish,
    Gaussian, heavy-tailed, bimodal, a few outliers."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal(20_000) * rng.uniform(0.01, 10.0)
    kind = seed % 7
    if kind == 0:
        return np.maximum(g, 0)
    if kind == 1:
        return np.maximum(g, 0) - rng.uniform(0.01, 0.5) * g.std()
    if kind == 2:
        return g * np.clip(g + 3, 0, 6) / 6
    if kind == 3:
        return g
    if kind == 4:
        return rng.standard_t(3, 20_000) * g.std()
    if kind == 5:
        return np.concatenate([g[:10_000] - 3 * g.std(), g[10_000:] + g.std()])
    out = g.copy()
    out[:5] *= 40.0
    return out


def _fill(x_stats, method, error_method, n_bits, choose, p, shift=None):
    cfg = ActivationQuantConfig(n_bits, method, error_method, choose_grid=choose, shift_negative_ratio=shift)
    thresholds.fill_activation_config(cfg, x_stats, p)
    return cfg.method, cfg.signed, cfg.threshold, cfg.range_min, cfg.range_max


def _with_reference(monkeypatch):
    def judge(p):
        def errors(bins, grid, tolerance=None):  # every candidate evaluated
            return reference_histogram_error(bins[0], bins[1], bins[2], grid, p)

        return errors

    monkeypatch.setattr(thresholds, "_judge", judge)


CHOICES = [  # (method, error method, bits, choose_grid, p, shift negative ratio)
    (QM.SYMMETRIC, QE.MSE, 8, True, 2.0, None),  # the default
    (QM.SYMMETRIC, QE.MSE, 16, True, 2.0, None),  # "every activation at 16 bits"
    (QM.SYMMETRIC, QE.MAE, 4, True, 1.0, None),
    (QM.UNIFORM, QE.LP, 8, False, 2.5, None),
    (QM.POWER_OF_TWO, QE.LP, 8, False, 4.0, None),
    (QM.SYMMETRIC, QE.MSE, 8, False, 2.0, 0.25),
]


@pytest.mark.parametrize("choice", CHOICES, ids=lambda c: f"{c[0].name}-{c[1].name}-{c[2]}b-p{c[4]}-{c[3]}")
def test_the_search_chooses_the_same_grid_as_with_the_former_closed_form(choice, monkeypatch):
    method, error_method, n_bits, choose, p, shift = choice
    stats = [_stats(_activations(seed)) for seed in range(7 if n_bits == 8 else 4)]
    new = [_fill(s, method, error_method, n_bits, choose, p, shift) for s in stats]
    _with_reference(monkeypatch)
    ref = [_fill(s, method, error_method, n_bits, choose, p, shift) for s in stats]
    assert new == ref
