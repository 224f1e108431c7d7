"""Quantization grids and the numpy fake-quantizer.

``prev -> x -> q(x) -> next``: q rounds x onto the grid and back to float (fake quant).
"""

from __future__ import annotations

import numpy as np

from model_compression_toolkit.core.quant_config import QuantGrid

# Smallest threshold / range width: an all-zero channel still gets a valid grid.
MIN_THRESHOLD = 2.0**-16


def power_of_two_ceil(threshold: np.ndarray | float) -> np.ndarray:
    """The smallest power of two >= threshold (elementwise)."""
    t = np.maximum(np.asarray(threshold, dtype=np.float64), MIN_THRESHOLD)
    return np.power(2.0, np.ceil(np.log2(t)))


def symmetric_grid(threshold: np.ndarray | float, n_bits: int, signed: bool) -> QuantGrid:
    """Grid of a symmetric quantizer: [-t, t) when signed, [0, t) when not."""
    t = np.maximum(np.asarray(threshold, dtype=np.float64), MIN_THRESHOLD)
    if signed:
        scale = t / 2.0 ** (n_bits - 1)
        qmin, qmax = -(2 ** (n_bits - 1)), 2 ** (n_bits - 1) - 1
    else:
        scale = t / 2.0**n_bits
        qmin, qmax = 0, 2**n_bits - 1
    return QuantGrid(scale=scale, zero_point=np.zeros_like(scale), qmin=qmin, qmax=qmax)


def uniform_grid(range_min: np.ndarray | float, range_max: np.ndarray | float, n_bits: int) -> QuantGrid:
    """Grid of an asymmetric quantizer over [min, max], widened so that 0 is on the grid."""
    lo = np.minimum(np.asarray(range_min, dtype=np.float64), 0.0)
    hi = np.maximum(np.asarray(range_max, dtype=np.float64), 0.0)
    levels = 2**n_bits - 1
    scale = np.maximum(hi - lo, MIN_THRESHOLD) / levels
    zero_point = np.clip(np.round(-lo / scale), 0, levels)
    return QuantGrid(scale=scale, zero_point=zero_point, qmin=0, qmax=levels)


def _broadcast(param: np.ndarray, ndim: int, axes: tuple[int, ...], shape: tuple) -> np.ndarray:
    """Reshape a per-channel parameter so it broadcasts over ``axes`` of a tensor."""
    param = np.asarray(param)
    if param.ndim == 0 or not axes:
        return param
    axes = tuple(a % ndim for a in axes)
    target = [1] * ndim
    for a in axes:
        target[a] = shape[a]
    return param.reshape(target)


def fake_quant(x: np.ndarray, grid: QuantGrid, axes: tuple[int, ...] = ()) -> np.ndarray:
    """Quantize ``x`` onto ``grid`` and back to float, in x's dtype.

    Args:
        x: the tensor.
        grid: scalars, or parameters with one entry per channel along ``axes`` (the
            product of those axes' sizes, in C order).
        axes: the channel axes of ``x`` the grid's parameters run along.
    """
    x = np.asarray(x)
    scale = _broadcast(grid.scale, x.ndim, axes, x.shape)
    zp = _broadcast(grid.zero_point, x.ndim, axes, x.shape)
    q = np.clip(np.round(x / scale) + zp, grid.qmin, grid.qmax)
    return ((q - zp) * scale).astype(x.dtype, copy=False)


def channel_view(w: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """``w`` as a 2-D (channels, values) array, channels being ``axes`` in C order."""
    axes = tuple(a % w.ndim for a in axes)
    rest = tuple(a for a in range(w.ndim) if a not in axes)
    moved = np.transpose(w, axes + rest)
    n_channels = int(np.prod([w.shape[a] for a in axes], dtype=np.int64)) if axes else 1
    return moved.reshape(n_channels, -1)
