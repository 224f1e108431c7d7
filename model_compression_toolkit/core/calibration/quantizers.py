"""Quantization grids and the numpy fake-quantizer.

``prev -> x -> q(x) -> next``: q rounds x onto the grid and back to float (fake quant).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np

from model_compression_toolkit.core.calibration.bias_correction import corrected_bias
from model_compression_toolkit.core.calibration.rounding import compensated_kernel
from model_compression_toolkit.core.quant_config import QuantGrid, WeightsQuantConfig

if TYPE_CHECKING:
    from model_compression_toolkit.core.graph import Graph, Node

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
    if x.ndim == 0 or x.size <= _BLOCK_VALUES:
        return _fake_quant_block(x, scale, zp, grid)
    out = np.empty_like(x)
    rows = max(1, _BLOCK_VALUES // max(1, x[0].size))  # blocks of rows: small temporaries, in cache
    for start in range(0, x.shape[0], rows):
        block = slice(start, start + rows)
        out[block] = _fake_quant_block(x[block], _rows(scale, block), _rows(zp, block), grid)
    return out


_BLOCK_VALUES = 1 << 16


def histogram_through_grid(counts: np.ndarray, edges: np.ndarray, grid: QuantGrid) -> np.ndarray:
    """The histogram ``counts`` over ``edges`` after a per-tensor ``grid``: each bin's
    count moved, whole, to the bin of its centre's quantized value (values beyond the
    edges count in the end bins). The total is unchanged; a bin a rounding boundary
    cuts goes whole to one side, so the picture is exact to a bin."""
    edges = np.asarray(edges, dtype=np.float64)
    centres = (edges[:-1] + edges[1:]) / 2
    moved = fake_quant(centres, QuantGrid(np.max(grid.scale), np.max(grid.zero_point), grid.qmin, grid.qmax))
    index = np.clip(np.searchsorted(edges, moved, side="right") - 1, 0, centres.size - 1)
    return np.bincount(index, weights=np.asarray(counts, dtype=np.float64), minlength=centres.size).astype(np.int64)


def _rows(param: np.ndarray, block: slice) -> np.ndarray:
    """The rows of a broadcast parameter that go with ``block`` of the tensor's first axis."""
    return param[block] if np.ndim(param) and np.shape(param)[0] > 1 else param


def _fake_quant_block(x: np.ndarray, scale: np.ndarray, zp: np.ndarray, grid: QuantGrid) -> np.ndarray:
    shifted = bool(np.any(zp))
    q = np.asarray(np.divide(x, scale))  # one temporary, updated in place
    np.round(q, out=q)
    if shifted:
        q += zp
    np.clip(q, grid.qmin, grid.qmax, out=q)
    if shifted:
        q -= zp
    q *= scale
    return q.astype(x.dtype, copy=False)


def channel_view(w: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """``w`` as a 2-D (channels, values) array, channels being ``axes`` in C order."""
    axes = tuple(a % w.ndim for a in axes)
    rest = tuple(a for a in range(w.ndim) if a not in axes)
    moved = np.transpose(w, axes + rest)
    n_channels = int(np.prod([w.shape[a] for a in axes], dtype=np.int64)) if axes else 1
    return moved.reshape(n_channels, -1)


def node_weight(
    node: Node, name: str, quantized: bool, known: Mapping[str, Mapping[str, np.ndarray]] | None = None
) -> np.ndarray:
    """The node's weight ``name`` as the model uses it: fake-quantized on its grid when
    ``quantized``, and, for a bias-corrected layer's bias, corrected for its kernel's grid.

    ``known`` (node -> weight name -> array) holds quantized weights already computed;
    one found there is used as is.
    """
    value = node.weights[name]
    if quantized and name == "bias" and node.quant.input_mean is not None:
        if known is not None and node.name in known and name in known[node.name]:
            return known[node.name][name]
        return corrected_bias(node, node_weight(node, "kernel", True, known))
    cfg = node.quant.weights.get(name) if quantized else None
    if cfg is None or cfg.grid is None:
        return value
    if known is not None and node.name in known and name in known[node.name]:
        return known[node.name][name]
    return _quantized(node, name, cfg)


def _quantized(node: Node, name: str, cfg: WeightsQuantConfig) -> np.ndarray:
    """A weight on its grid: a kernel with input moments rounded with its errors
    compensated (`core.calibration.rounding`), any other to nearest."""
    if name == "kernel":
        compensated = compensated_kernel(node, cfg)
        if compensated is not None:
            return compensated
    assert cfg.grid is not None
    return fake_quant(node.weights[name], cfg.grid, cfg.channel_axes)


class QuantizedWeights(Mapping):
    """node -> weight name -> quantized weights (a corrected bias included), each node's
    computed on first use.

    Every quantized build uses one, so a kernel is quantized once even when its corrected
    bias needs it too; the PTQ call's builder and logging sink share one.
    """

    def __init__(self, graph: Graph) -> None:
        self._graph = graph
        self._names = [node.name for node in graph.nodes() if node.quant.weights]
        self._values: dict[str, dict[str, np.ndarray]] = {}

    def __getitem__(self, name: str) -> dict[str, np.ndarray]:
        if name not in self._values:
            if name not in self._names:
                raise KeyError(name)
            node = self._graph.node(name)
            values = {w: _quantized(node, w, c) for w, c in node.quant.weights.items() if c.grid is not None}
            if node.quant.input_mean is not None and "kernel" in values:
                values["bias"] = corrected_bias(node, values["kernel"])
            self._values[name] = values
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)
