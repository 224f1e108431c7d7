"""The threshold features MCT users set: z-score outlier removal, KL, HMSE, shift negative
correction, fixed grids, shared grids. Synthetic data, exact or wide margins."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from model_compression_toolkit.core.calibration.kl import kl_divergence
from model_compression_toolkit.core.calibration.quantizers import fake_quant
from model_compression_toolkit.core.calibration.statistics import StatisticsCollector
from model_compression_toolkit.core.calibration.thresholds import fill_activation_config, fill_weights_config
from model_compression_toolkit.core.config import QuantizationErrorMethod as QE
from model_compression_toolkit.core.config import QuantizationMethod as QM
from model_compression_toolkit.core.quant_config import ActivationQuantConfig, WeightsQuantConfig

FAST = settings(max_examples=25, deadline=None)


def stats_of(x, n_bins=2048, second_moments=False):
    c = StatisticsCollector(n_bins, None, second_moments)
    c.update(np.asarray(x, np.float32))
    return c.result()


def act(method=QM.SYMMETRIC, error=QE.MSE, n_bits=8, **fields):
    return ActivationQuantConfig(n_bits, method, error, **fields)


def mse_of(x, cfg):
    return float(np.mean((fake_quant(np.asarray(x, np.float64), cfg.grid) - x) ** 2))


# ------------------------------------------------------------------ z-score
def test_z_threshold_removes_outliers_before_the_search():
    rng = np.random.default_rng(0)
    x = np.concatenate([np.abs(rng.normal(0, 1, 20000)), [200.0, 300.0]])
    plain, filtered = act(error=QE.NOCLIPPING), act(error=QE.NOCLIPPING, z_threshold=5.0)
    s = stats_of(x)
    fill_activation_config(plain, s)
    fill_activation_config(filtered, s)
    mean, std = x.mean(), x.std()
    assert plain.threshold >= 300.0 * 0.999
    assert filtered.threshold <= mean + 5 * std + 1e-6  # the no-clipping range of what is left
    assert mse_of(x[:-2], filtered) < mse_of(x[:-2], plain) / 100


@FAST
@given(z=st.floats(1.0, 8.0), seed=st.integers(0, 100))
def test_z_threshold_never_widens_the_range(z, seed):
    x = np.random.default_rng(seed).standard_t(3, 2000)
    wide, narrow = act(), act(z_threshold=z)
    s = stats_of(x)
    fill_activation_config(wide, s)
    fill_activation_config(narrow, s)
    mean, std = x.mean(dtype=np.float64), x.std(dtype=np.float64)
    assert narrow.threshold <= max(abs(mean - z * std), abs(mean + z * std)) * (1 + 1e-4)


# ---------------------------------------------------------------------- KL
def test_kl_divergence_is_zero_when_quantization_keeps_the_shape():
    counts = np.array([3.0, 5.0, 7.0, 2.0])
    assert kl_divergence(counts, np.arange(4)) == pytest.approx(0.0)  # one bin per level
    assert kl_divergence(counts, np.zeros(4)) > 0  # every bin on one level: the shape is lost
    assert kl_divergence(np.zeros(4), np.zeros(4)) == 0.0


def test_kl_activation_threshold_clips_a_long_tail_but_keeps_the_body():
    rng = np.random.default_rng(1)
    x = np.abs(rng.laplace(0, 1, 50000))
    cfg = act(error=QE.KL, n_bits=4)
    fill_activation_config(cfg, stats_of(x))
    assert np.quantile(x, 0.9) < cfg.threshold < x.max()


@FAST
@given(w=hnp.arrays(np.float32, (4, 3, 3), elements=st.floats(-4, 4, width=32)), pow2=st.booleans())
def test_kl_weight_thresholds_stay_in_range(w, pow2):
    cfg = WeightsQuantConfig(4, QM.POWER_OF_TWO if pow2 else QM.SYMMETRIC, QE.KL, True, (0,))
    fill_weights_config(cfg, w)
    top = np.abs(w.reshape(4, -1)).max(axis=1)
    assert np.all(np.isfinite(cfg.threshold)) and np.all(cfg.threshold > 0)
    assert np.all(cfg.threshold <= np.maximum(2.0 ** np.ceil(np.log2(np.maximum(top, 2.0**-16))), 2.0**-16) * (1 + 1e-9))


def test_kl_uniform_weights_range_holds_zero():
    w = np.random.default_rng(2).normal(0.5, 1, (8, 50)).astype(np.float32)
    cfg = WeightsQuantConfig(8, QM.UNIFORM, QE.KL, True, (0,))
    fill_weights_config(cfg, w)
    assert np.all(cfg.range_min <= 0) and np.all(cfg.range_max >= 0)


# -------------------------------------------------------------------- HMSE
def test_hmse_with_equal_importance_is_mse():
    w = np.random.default_rng(3).normal(0, 1, (6, 4, 3, 3)).astype(np.float32)
    mse = WeightsQuantConfig(3, QM.SYMMETRIC, QE.MSE, True, (0,))
    hmse = WeightsQuantConfig(3, QM.SYMMETRIC, QE.HMSE, True, (0,), importance=np.ones_like(w))
    fill_weights_config(mse, w)
    fill_weights_config(hmse, w)
    np.testing.assert_allclose(hmse.threshold, mse.threshold, rtol=1e-6)


def test_hmse_keeps_the_weights_that_read_large_inputs():
    """One input channel dominates: HMSE keeps its (large) weight unclipped, MSE clips it."""
    w = np.linspace(-0.3, 0.3, 201, dtype=np.float32)[None, :]
    w[0, 0] = 1.0  # the weight reading the loud input
    importance = np.full_like(w, 1e-4)
    importance[0, 0] = 1.0
    mse = WeightsQuantConfig(2, QM.SYMMETRIC, QE.MSE, True, (0,))
    hmse = WeightsQuantConfig(2, QM.SYMMETRIC, QE.HMSE, True, (0,), importance=importance)
    fill_weights_config(mse, w)
    fill_weights_config(hmse, w)
    assert float(hmse.threshold[0]) > 0.9 > float(mse.threshold[0])


def test_second_moments_are_collected_when_asked():
    x = np.random.default_rng(4).normal(0, 2, (16, 3, 5, 5)).astype(np.float32)
    c = StatisticsCollector(64, 1, second_moments=True)
    c.update(x)
    np.testing.assert_allclose(c.result().mean_square_per_channel, (x**2).mean(axis=(0, 2, 3)), rtol=1e-5)
    assert StatisticsCollector(64, 1).result().mean_square_per_channel is None


# ---------------------------------------------------------- shift negative
def test_shift_negative_puts_a_small_negative_tail_on_an_unsigned_grid():
    rng = np.random.default_rng(5)
    pre = rng.normal(0, 2, 40000)
    gelu = pre * 0.5 * (1 + np.tanh(0.7978845608 * (pre + 0.044715 * pre**3)))  # min about -0.17
    s = stats_of(gelu)
    signed, shifted = act(), act(shift_negative_ratio=0.05)
    fill_activation_config(signed, s)
    fill_activation_config(shifted, s)
    assert signed.signed and not shifted.signed
    assert float(shifted.grid.zero_point) > 0 and shifted.range_min <= gelu.min() + 1e-6
    assert mse_of(gelu, shifted) < mse_of(gelu, signed) / 2


def test_shift_negative_leaves_large_negative_ranges_alone():
    x = np.random.default_rng(6).normal(0, 1, 5000)
    cfg = act(shift_negative_ratio=0.05)
    fill_activation_config(cfg, stats_of(x))
    assert cfg.signed and float(cfg.grid.zero_point) == 0


def test_fixed_range_needs_no_search():
    cfg = act(fixed_range=(0.0, 255 / 256))
    fill_activation_config(cfg, stats_of(np.random.default_rng(7).random(100)))
    assert float(cfg.grid.scale) == pytest.approx(1 / 256) and float(cfg.grid.zero_point) == 0
