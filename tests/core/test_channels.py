"""Per-channel sums: taken block by block, they equal the sums over the whole tensor."""

import numpy as np
import pytest

from model_compression_toolkit.core.calibration.quantizers import fake_quant, uniform_grid
from model_compression_toolkit.core.quant_config import QuantGrid
from model_compression_toolkit.core.similarity import channels
from model_compression_toolkit.core.similarity.analysis import _block_quantizer
from model_compression_toolkit.core.similarity.channels import ChannelSums


def _whole(reference, quantized, axis):
    """The sums in one go: each tensor as (channels, values) in float64, non-finite values as zero."""

    def rows(x):
        if axis is None or x.ndim < 2:
            return x.reshape(1, -1)
        return np.moveaxis(x, axis, 0).reshape(x.shape[axis], -1)

    ref, q = rows(reference), rows(quantized)
    if not (np.isfinite(ref).all() and np.isfinite(q).all()):
        ref, q = np.nan_to_num(ref, posinf=0.0, neginf=0.0), np.nan_to_num(q, posinf=0.0, neginf=0.0)
    ref64, diff = ref.astype(np.float64), ref.astype(np.float64) - q
    nonzero = ref != 0
    return {
        "signal": np.einsum("ij,ij->i", ref64, ref64),
        "noise": np.einsum("ij,ij->i", diff, diff),
        "low": ref.min(axis=1),
        "high": ref.max(axis=1),
        "nonzero": int(nonzero.sum()),
        "zeroed": int((nonzero & (q == 0)).sum()),
    }


def _check(sums, expected):
    for name in ("signal", "noise"):
        np.testing.assert_allclose(getattr(sums, name), expected[name], rtol=1e-12)
    for name in ("low", "high", "nonzero", "zeroed"):
        np.testing.assert_array_equal(getattr(sums, name), expected[name])


CASES = [
    ((4, 6, 5, 7), 1),  # NCHW
    ((4, 5, 7, 6), -1),  # NHWC: short rows, every channel of a few samples at a time
    ((2, 3, 300), 1),  # rows longer than a block
    ((3, 50), None),  # one channel
    ((6, 40), 0),  # a weight: channels first
]


@pytest.mark.parametrize("block", [64, channels.BLOCK_VALUES])
@pytest.mark.parametrize("shape, axis", CASES)
def test_block_sums_equal_the_whole_tensor_sums(monkeypatch, block, shape, axis):
    monkeypatch.setattr(channels, "BLOCK_VALUES", block)
    rng = np.random.default_rng(3)
    grid = uniform_grid(-1.0, 2.5, 4)
    chunks = [rng.standard_normal(shape).astype(np.float32) for _ in range(2)]
    chunks[0].reshape(-1)[::7] = 0.0  # zeros stay out of the zero-rounded share
    chunks[1].reshape(-1)[:3] = [np.nan, np.inf, -np.inf]  # non-finite values count as zero
    quantized = [fake_quant(c, grid) for c in chunks]
    quantize = _block_quantizer(grid, np.dtype(np.float32))
    assert quantize is not None
    sums, by_block = ChannelSums(axis), ChannelSums(axis)
    for c, q in zip(chunks, quantized):
        sums.add(c, q)
        by_block.add_quantized(c, quantize)
    whole = [_whole(c, q, axis) for c, q in zip(chunks, quantized)]
    expected = {
        "signal": whole[0]["signal"] + whole[1]["signal"],
        "noise": whole[0]["noise"] + whole[1]["noise"],
        "low": np.minimum(whole[0]["low"], whole[1]["low"]),
        "high": np.maximum(whole[0]["high"], whole[1]["high"]),
        "nonzero": whole[0]["nonzero"] + whole[1]["nonzero"],
        "zeroed": whole[0]["zeroed"] + whole[1]["zeroed"],
    }
    _check(sums, expected)
    _check(by_block, expected)


def test_a_tensor_that_is_not_contiguous_is_read_as_it_is():
    x = np.random.default_rng(4).standard_normal((3, 8, 9, 5)).astype(np.float32)
    transposed = np.transpose(x, (0, 3, 1, 2))  # NHWC data seen as NCHW
    q = np.round(transposed * 4) / 4
    sums = ChannelSums(1)
    sums.add(transposed, q)
    _check(sums, _whole(transposed, q, 1))


def test_tensors_of_different_shapes_are_refused():
    with pytest.raises(ValueError, match="shapes"):
        ChannelSums(1).add(np.zeros((2, 3, 4)), np.zeros((2, 4, 3)))


@pytest.mark.parametrize(
    "grid",
    [
        QuantGrid(np.asarray(0.25), np.asarray(3.0), 0, 15),  # ties land exactly on .5
        QuantGrid(np.asarray(0.0371), np.asarray(0.0), -128, 127),
        QuantGrid(np.asarray(0.0371), np.asarray(200.0), 0, 255),  # a zero point outside half the range
    ],
)
def test_the_activation_quantizer_on_float64_blocks_gives_fake_quant_values(grid):
    """The comparison quantizes the float output block by block, in float64, its zero point
    moved into the integer range: the values are `fake_quant`'s, ties and extremes included."""
    rng = np.random.default_rng(5)
    x = np.concatenate(
        [
            (rng.standard_normal(4000) * 3).astype(np.float32),
            np.arange(-40, 40, dtype=np.float32) * np.float32(0.125),  # on and between the ties
            np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, -0.0, 1e-40], dtype=np.float32),
        ]
    )
    quantize = _block_quantizer(grid, x.dtype)
    assert quantize is not None
    got = quantize(x.astype(np.float64))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, fake_quant(x, grid))
