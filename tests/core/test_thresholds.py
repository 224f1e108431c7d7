"""Threshold selection: never worse than no clipping, exact zeros, powers of two, per channel."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from model_compression_toolkit.core.calibration.quantizers import (
    MIN_THRESHOLD,
    channel_view,
    fake_quant,
    symmetric_grid,
)
from model_compression_toolkit.core.calibration.statistics import StatisticsCollector
from model_compression_toolkit.core.calibration.thresholds import (
    fill_activation_config,
    fill_weights_config,
    histogram_error,
    quantization_error,
)
from model_compression_toolkit.core.config import QuantizationErrorMethod as QE
from model_compression_toolkit.core.config import QuantizationMethod as QM
from model_compression_toolkit.core.quant_config import ActivationQuantConfig, WeightsQuantConfig

FAST = settings(max_examples=30, deadline=None)
CLIPPING = [QE.MSE, QE.MAE, QE.LP]

magnitudes = st.one_of(st.just(0.0), st.floats(2.0**-20, 1e3, width=32))
values = st.builds(lambda m, neg: -m if neg else m, magnitudes, st.booleans())
weights = hnp.arrays(np.float32, st.tuples(st.integers(1, 5), st.integers(1, 3), st.integers(1, 4)), elements=values)
methods = st.sampled_from(list(QM))
bits = st.sampled_from([2, 4, 8])
p_values = st.sampled_from([0.5, 1.0, 2.0, 3.0])


def weights_cfg(method, error_method, n_bits=8, per_channel=True, axes=(0,)):
    return WeightsQuantConfig(n_bits, method, error_method, per_channel, axes)


def fill_w(w, method, error_method, n_bits=8, per_channel=True, axes=(0,), p=2.0):
    cfg = weights_cfg(method, error_method, n_bits, per_channel, axes)
    fill_weights_config(cfg, w, p)
    return cfg


def channel_errors(w, cfg, p):
    """Mean |fake_quant(w) - w|**p per channel, through the public fake quantizer."""
    axes = cfg.channel_axes if cfg.per_channel else ()
    diff = np.abs(fake_quant(w, cfg.grid, axes).astype(np.float64) - w)
    d = channel_view(diff, axes) if axes else diff.reshape(1, -1)
    return (d**p).mean(axis=1)


def stats_of(x, n_bins=256):
    c = StatisticsCollector(n_bins, None)
    c.update(np.asarray(x, np.float32))
    return c.result()


def hist_error(stats, cfg, p):
    lo = np.clip(stats.edges[:-1], stats.min, stats.max)
    hi = np.clip(stats.edges[1:], stats.min, stats.max)
    return float(histogram_error(lo, hi, stats.counts.astype(np.float64), cfg.grid, p))


def check_threshold_values(cfg):
    for v in (cfg.threshold, cfg.range_min, cfg.range_max):
        if v is not None:
            assert np.all(np.isfinite(v))
    if cfg.threshold is not None:
        assert np.all(np.asarray(cfg.threshold) >= MIN_THRESHOLD)
    if cfg.range_min is not None:
        assert np.all(np.asarray(cfg.range_min) <= 0) and np.all(np.asarray(cfg.range_max) >= 0)


# ------------------------------------------------------------------- weights


@FAST
@given(weights, methods, st.sampled_from(CLIPPING), bits, p_values, st.booleans())
def test_weights_error_never_above_no_clipping(w, method, error_method, n_bits, p, per_channel):
    p = {QE.MSE: 2.0, QE.MAE: 1.0}.get(error_method, p)
    cfg = fill_w(w, method, error_method, n_bits, per_channel, p=p)
    ref = fill_w(w, method, QE.NOCLIPPING, n_bits, per_channel)
    check_threshold_values(cfg)
    chosen, nocl = channel_errors(w, cfg, p), channel_errors(w, ref, p)
    assert np.all(chosen <= nocl * (1 + 1e-5) + 1e-30)


@FAST
@given(weights, methods, st.sampled_from(list(QE)), bits)
def test_weights_fake_quant_idempotent_and_zero_exact(w, method, error_method, n_bits):
    w = w.copy()
    w.reshape(-1)[::3] = 0.0
    cfg = fill_w(w, method, error_method, n_bits)
    q = fake_quant(w, cfg.grid, cfg.channel_axes)
    np.testing.assert_array_equal(fake_quant(q, cfg.grid, cfg.channel_axes), q)
    assert np.all(q[w == 0] == 0)


@FAST
@given(weights, st.sampled_from(list(QE)), bits)
def test_power_of_two_weight_thresholds(w, error_method, n_bits):
    t = fill_w(w, QM.POWER_OF_TWO, error_method, n_bits).threshold
    assert np.all(np.log2(t) == np.round(np.log2(t)))


@pytest.mark.parametrize("method", list(QM))
@pytest.mark.parametrize("error_method", list(QE))
def test_all_zero_weights_quantize_to_zero(method, error_method):
    w = np.zeros((4, 3, 3, 3), np.float32)
    cfg = fill_w(w, method, error_method)
    check_threshold_values(cfg)
    np.testing.assert_array_equal(fake_quant(w, cfg.grid, cfg.channel_axes), w)


@pytest.mark.parametrize("method", list(QM))
@pytest.mark.parametrize("error_method", [QE.MSE, QE.NOCLIPPING])
def test_outlier_channel_leaves_other_channels_alone(method, error_method):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * np.logspace(-3, 1, 16, dtype=np.float32)[:, None, None, None]
    outlier = w.copy()
    outlier[5, 0, 1, 1] *= 1000.0
    a, b = fill_w(w, method, error_method), fill_w(outlier, method, error_method)
    others = np.arange(16) != 5
    for name in ("threshold", "range_min", "range_max"):
        if getattr(a, name) is not None:
            np.testing.assert_array_equal(getattr(a, name)[others], getattr(b, name)[others])
    assert np.any(a.grid.scale[5] != b.grid.scale[5])


def test_keras_layout_channels_last_and_per_tensor():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((3, 3, 4, 6)).astype(np.float32) * np.arange(1, 7, dtype=np.float32)
    cfg = fill_w(w, QM.SYMMETRIC, QE.NOCLIPPING, axes=(-1,))
    np.testing.assert_allclose(cfg.threshold, np.abs(w).max(axis=(0, 1, 2)))
    per_tensor = fill_w(w, QM.SYMMETRIC, QE.MSE, per_channel=False, axes=(-1,))
    assert np.ndim(per_tensor.threshold) == 0
    assert fake_quant(w, per_tensor.grid, (-1,)).shape == w.shape


@pytest.mark.parametrize(
    "shape, axes",
    [((300, 64, 3, 3), (0,)), ((3, 3, 256, 160), (-1,)), ((5, 5, 96, 200), (2, 3)), ((70000,), ())],
)
def test_large_weights_quantize_like_the_direct_formula(shape, axes):
    """Big tensors are quantized block by block; the result is the formula's, bit for bit."""
    from model_compression_toolkit.core.calibration.quantizers import uniform_grid

    rng = np.random.default_rng(4)
    w = (rng.standard_normal(shape) * 0.1).astype(np.float32)
    n = int(np.prod([shape[a] for a in axes])) if axes else 1
    target = [1] * w.ndim
    for a in axes:
        target[a] = shape[a]
    for grid in (symmetric_grid(rng.uniform(0.05, 0.3, n), 8, True), uniform_grid(-rng.uniform(0.1, 0.2, n), rng.uniform(0.2, 0.3, n), 4)):
        scale, zp = grid.scale.reshape(target), grid.zero_point.reshape(target)
        expected = ((np.clip(np.round(w / scale) + zp, grid.qmin, grid.qmax) - zp) * scale).astype(np.float32)
        got = fake_quant(w, grid, axes)
        assert got.dtype == np.float32 and w.size > 65536
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("error_method", CLIPPING)
def test_mse_clips_heavy_tailed_weights(error_method):
    w = np.random.default_rng(2).standard_t(2, (8, 2000)).astype(np.float32)
    cfg = fill_w(w, QM.SYMMETRIC, error_method, n_bits=4)
    assert np.all(cfg.threshold < np.abs(w).max(axis=1))


def test_uniform_weights_range_contains_zero():
    w = np.random.default_rng(3).uniform(0.5, 2.0, (4, 50)).astype(np.float32)
    w[1] *= -1
    cfg = fill_w(w, QM.UNIFORM, QE.MSE)
    check_threshold_values(cfg)
    assert cfg.range_min.shape == (4,)


# --------------------------------------------------------------- activations

activations = hnp.arrays(np.float32, st.integers(1, 400), elements=values)


@FAST
@given(activations, methods, st.sampled_from(CLIPPING), bits, p_values)
def test_activation_error_never_above_no_clipping(x, method, error_method, n_bits, p):
    p = {QE.MSE: 2.0, QE.MAE: 1.0}.get(error_method, p)
    s = stats_of(x)
    cfg = ActivationQuantConfig(n_bits, method, error_method)
    ref = ActivationQuantConfig(n_bits, method, QE.NOCLIPPING)
    fill_activation_config(cfg, s, p)
    fill_activation_config(ref, s, p)
    check_threshold_values(cfg)
    assert cfg.signed == ref.signed == bool(x.min() < 0)
    assert hist_error(s, cfg, p) <= hist_error(s, ref, p) * (1 + 1e-9) + 1e-300
    q = fake_quant(x, cfg.grid)
    np.testing.assert_array_equal(fake_quant(q, cfg.grid), q)
    assert np.all(q[x == 0] == 0)
    if method == QM.POWER_OF_TWO:
        assert np.log2(cfg.threshold) == np.round(np.log2(cfg.threshold))


def test_no_clipping_activation_values():
    x = np.array([-3.0, 0.5, 5.0])
    for method, expected in ((QM.SYMMETRIC, 5.0), (QM.POWER_OF_TWO, 8.0)):
        cfg = ActivationQuantConfig(8, method, QE.NOCLIPPING)
        fill_activation_config(cfg, stats_of(x))
        assert cfg.threshold == expected and cfg.signed
    cfg = ActivationQuantConfig(8, QM.UNIFORM, QE.NOCLIPPING)
    fill_activation_config(cfg, stats_of(x))
    assert (cfg.range_min, cfg.range_max) == (-3.0, 5.0)


def test_signedness():
    relu = np.maximum(np.random.default_rng(4).standard_normal(1000), 0)
    cfg = ActivationQuantConfig(8, QM.SYMMETRIC, QE.MSE)
    fill_activation_config(cfg, stats_of(relu))
    assert cfg.signed is False and cfg.grid.qmin == 0
    fill_activation_config(cfg, stats_of(relu - 0.01))
    assert cfg.signed is True and cfg.grid.qmin < 0


def test_mse_clips_heavy_tailed_activations():
    x = np.random.default_rng(5).standard_t(4, 100_000).astype(np.float32)
    s = stats_of(x, 2048)
    mse = ActivationQuantConfig(8, QM.SYMMETRIC, QE.MSE)
    nocl = ActivationQuantConfig(8, QM.SYMMETRIC, QE.NOCLIPPING)
    fill_activation_config(mse, s)
    fill_activation_config(nocl, s)
    max_abs = float(np.abs(x).max())
    assert nocl.threshold == max_abs
    assert mse.threshold < 0.9 * max_abs
    # chosen on the histogram, better on the values themselves, and near the best threshold
    raw = quantization_error(x, None, mse.grid, 2)
    assert raw < 0.8 * quantization_error(x, None, nocl.grid, 2)
    grid = [quantization_error(x, None, symmetric_grid(t, 8, True), 2) for t in np.linspace(1, max_abs, 400)]
    assert raw <= 1.01 * min(grid)


@pytest.mark.parametrize("method", list(QM))
@pytest.mark.parametrize("error_method", list(QE))
def test_constant_and_empty_activations(method, error_method):
    for s in (stats_of(np.zeros(10)), StatisticsCollector(64).result()):
        cfg = ActivationQuantConfig(8, method, error_method)
        fill_activation_config(cfg, s)
        check_threshold_values(cfg)
        assert fake_quant(np.zeros(3, np.float32), cfg.grid).tolist() == [0.0, 0.0, 0.0]


def test_histogram_error_matches_sampling():
    """The closed form equals the error of many values spread evenly over each bin."""
    lo, hi = np.array([-3.0, -0.3, 2.5, 1.0]), np.array([-2.0, 0.2, 6.0, 1.0])
    counts = np.array([1.0, 2.0, 1.0, 2.0])
    cfg = ActivationQuantConfig(3, QM.SYMMETRIC, QE.MSE)
    fill_activation_config(cfg, stats_of([-2.0, 1.5]))
    for p in (0.5, 1.0, 2.0, 3.0):
        closed = histogram_error(lo, hi, counts, cfg.grid, p)
        pts = [np.linspace(a, b, 100_001) if b > a else np.array([a]) for a, b in zip(lo, hi)]
        sampled = sum(c * quantization_error(x, None, cfg.grid, p) for x, c in zip(pts, counts)) / counts.sum()
        assert closed == pytest.approx(sampled, rel=1e-4)


def test_uniform_activation_range_contains_zero():
    cfg = ActivationQuantConfig(8, QM.UNIFORM, QE.MSE)
    fill_activation_config(cfg, stats_of(np.linspace(2.0, 3.0, 100)))
    assert cfg.range_min == 0.0 and cfg.range_max > 2.0
    fill_activation_config(cfg, stats_of(np.linspace(-3.0, -2.0, 100)))
    assert cfg.range_max == 0.0 and cfg.range_min < -2.0
