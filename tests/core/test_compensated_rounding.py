"""Error-compensated rounding of kernels (`core.calibration.rounding`, ``weights_compensated_rounding``).

- The rows a layer's input is laid out in, times the kernel's matrix, are the frameworks' own
  convolutions and dense layers: every stride, padding, dilation and layout.
- The rounding keeps every weight on its grid; with uncorrelated inputs it is rounding to
  nearest, and with correlated ones its output error on unseen inputs is a fraction of it.
- End to end, in both frameworks, a model reading smooth signals (neighbouring samples
  correlated, as audio and images are) has a much higher output SQNR with it than without
  it (``weights_compensated_rounding=False``), on held-out signals, with the same grids.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import model_compression_toolkit as mct
from model_compression_toolkit.core.calibration import rounding
from model_compression_toolkit.core.graph import Node, OpKind
from model_compression_toolkit.core.quant_config import QuantGrid
from model_compression_toolkit.errors import ConfigurationError
from tests.fixtures.smooth import layout, signals, smooth, smooth_model

FAST = settings(max_examples=30, deadline=None)


# ---------------------------------------------------------------- layout against the frameworks
def _torch_conv_node(conv, size: tuple[int, ...]) -> Node:
    import torch

    out = conv(torch.zeros((1, conv.in_channels, *size))).shape[1:]
    return Node(
        "conv", OpKind.CONV, type(conv).__name__,
        attrs={"stride": conv.stride, "padding": conv.padding, "dilation": conv.dilation, "groups": 1,
               "transposed": False, "padding_mode": "zeros"},
        weights={"kernel": conv.weight.detach().numpy()}, kernel_axes={"kernel": (0,)}, kernel_in_axis={"kernel": 1},
        input_shapes=[(None, conv.in_channels, *size)], output_shapes=[(None, *out)], channel_axis=1,
    )  # fmt: skip


def _kernel_cfg(node: Node):
    from model_compression_toolkit.core.config import QuantizationErrorMethod, QuantizationMethod
    from model_compression_toolkit.core.quant_config import WeightsQuantConfig

    return WeightsQuantConfig(8, QuantizationMethod.SYMMETRIC, QuantizationErrorMethod.MSE, True,
                              node.kernel_axes["kernel"])  # fmt: skip


def _rows_times_kernel(node: Node, x: np.ndarray) -> np.ndarray:
    """(rows, out channels): every row of ``x`` times the kernel's matrix."""
    node.quant.weights["kernel"] = _kernel_cfg(node)
    patches = rounding.patches_of(node)
    assert patches is not None
    rows = patches.rows(x, limit=10**9)
    return rows.astype(np.float64) @ rounding.kernel_matrix(node, node.weights["kernel"]).T.astype(np.float64)


@FAST
@given(
    size=st.integers(3, 10),
    kernel=st.integers(1, 4),
    stride=st.integers(1, 3),
    padding=st.integers(0, 3),
    dilation=st.integers(1, 2),
    channels=st.integers(1, 3),
)
def test_rows_times_the_kernel_are_a_pytorch_conv2d(size, kernel, stride, padding, dilation, channels):
    torch = pytest.importorskip("torch")
    if size + 2 * padding < dilation * (kernel - 1) + 1:
        return  # no output
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(channels, 2, (kernel, kernel + 1), stride=(stride, 1), padding=(padding, 1),
                           dilation=(dilation, 1), bias=False)  # fmt: skip
    x = np.random.default_rng(0).normal(size=(2, channels, size, size + 2)).astype(np.float32)
    node = _torch_conv_node(conv, (size, size + 2))
    with torch.no_grad():
        want = conv(torch.from_numpy(x)).numpy()  # (N, O, H, W): rows run over N, H, W in C order
    got = _rows_times_kernel(node, x)
    np.testing.assert_allclose(got, np.moveaxis(want, 1, -1).reshape(-1, want.shape[1]), rtol=1e-4, atol=1e-4)


@FAST
@given(
    size=st.integers(4, 12),
    kernel=st.integers(1, 4),
    stride=st.integers(1, 3),
    dilation=st.integers(1, 2),
    padding=st.sampled_from(["same", "valid"]),
)
def test_rows_times_the_kernel_are_a_keras_conv2d(size, kernel, stride, dilation, padding):
    keras = pytest.importorskip("keras")
    if size < dilation * (kernel - 1) + 1 or (dilation > 1 and stride > 1):
        return  # no output, or what Keras does not allow
    conv = keras.layers.Conv2D(
        3, kernel, strides=stride, padding=padding, dilation_rate=dilation, use_bias=False
    )
    x = np.random.default_rng(1).normal(size=(2, size, size, 2)).astype(np.float32)
    want = np.asarray(conv(x))  # (N, H, W, O)
    node = Node(
        "conv", OpKind.CONV, "Conv2D",
        attrs={"strides": (stride, stride), "padding": padding, "dilation_rate": (dilation, dilation), "groups": 1},
        weights={"kernel": np.asarray(conv.get_weights()[0])}, kernel_axes={"kernel": (3,)},
        kernel_in_axis={"kernel": 2}, input_shapes=[(None, size, size, 2)], output_shapes=[(None, *want.shape[1:])],
        channel_axis=-1,
    )  # fmt: skip
    np.testing.assert_allclose(_rows_times_kernel(node, x), want.reshape(-1, 3), rtol=1e-4, atol=1e-4)


def test_rows_of_a_dense_layer_on_a_sequence_are_its_tokens():
    w = np.random.default_rng(2).normal(size=(5, 3)).astype(np.float32)  # PyTorch (out, in)
    node = Node(
        "fc", OpKind.DENSE, "Linear", weights={"kernel": w}, kernel_axes={"kernel": (0,)},
        kernel_in_axis={"kernel": 1}, input_shapes=[(None, 4, 3)], output_shapes=[(None, 4, 5)], channel_axis=-1,
    )  # fmt: skip
    x = np.random.default_rng(3).normal(size=(2, 4, 3)).astype(np.float32)
    np.testing.assert_allclose(_rows_times_kernel(node, x), (x @ w.T).reshape(-1, 5), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- the rounding itself
def _moments(x: np.ndarray) -> rounding.InputMoments:
    n = x.shape[1]
    m = rounding.InputMoments(rounding.Patches(n, n, -1, input_shape=(n,)))
    m.update(x.astype(np.float32))
    return m


def _grid(w: np.ndarray, bits: int = 8) -> tuple[np.ndarray, QuantGrid]:
    scale = np.abs(w).max(axis=1) / (2 ** (bits - 1) - 1)
    return scale, QuantGrid(scale, np.zeros_like(scale), -(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def _nearest(w: np.ndarray, scale: np.ndarray, grid: QuantGrid) -> np.ndarray:
    return np.clip(np.round(w / scale[:, None]), grid.qmin, grid.qmax) * scale[:, None]


def test_weights_stay_on_their_grid_and_the_output_error_on_unseen_inputs_falls():
    rng = np.random.default_rng(4)
    w = rng.normal(size=(16, 64))
    scale, grid = _grid(w, bits=4)
    calibration, held_out = smooth(64, 512, seed=5), smooth(64, 512, seed=6)
    q = _moments(calibration).round(w, scale, grid.zero_point, grid)
    levels = q / scale[:, None]
    np.testing.assert_allclose(levels, np.round(levels), atol=1e-9)  # on the grid
    assert np.round(levels).min() >= grid.qmin and np.round(levels).max() <= grid.qmax
    nearest = _nearest(w, scale, grid)
    error = np.mean(((q - w) @ held_out.T) ** 2)
    error_nearest = np.mean(((nearest - w) @ held_out.T) ** 2)
    assert error < error_nearest / 4, (error, error_nearest)
    # more error per weight, taken where the inputs cancel it
    assert np.mean((q - w) ** 2) > np.mean((nearest - w) ** 2)


def test_with_the_mean_error_corrected_the_covariance_weighs_the_errors():
    """Inputs far from zero (after a ReLU, a shifted batch norm): bias correction takes the
    mean error ``(Wq - W) mean`` out, so what is left is weighed by the inputs' covariance.
    Rounded for that (``centered``), the error left on unseen inputs is about half of what
    rounding for the second moments leaves, which spend their columns cancelling a mean
    error the bias takes anyway."""
    rng = np.random.default_rng(10)
    w = rng.normal(size=(16, 64))
    scale, grid = _grid(w, bits=4)
    calibration, held_out = 3.0 + 0.2 * smooth(64, 512, seed=11), 3.0 + 0.2 * smooth(64, 512, seed=12)
    moments = _moments(calibration)
    mean = calibration.mean(axis=0)

    def left(q: np.ndarray) -> float:  # the output error once the bias is corrected
        return float(np.mean(((q - w) @ (held_out - mean).T) ** 2))

    centered = moments.round(w, scale, grid.zero_point, grid, centered=True)
    second = moments.round(w, scale, grid.zero_point, grid, centered=False)
    assert left(centered) < 0.75 * left(second), (left(centered), left(second))
    assert left(second) < left(_nearest(w, scale, grid))

    # a layer whose bias is corrected (its input's mean set) is rounded for the covariance
    node = Node("fc", OpKind.DENSE, "Linear", weights={"kernel": w.astype(np.float32)}, kernel_axes={"kernel": (0,)},
                kernel_in_axis={"kernel": 1}, input_shapes=[(None, 64)], output_shapes=[(None, 16)],
                channel_axis=-1)  # fmt: skip
    cfg = _kernel_cfg(node)
    cfg.grid = grid
    node.quant.input_moments = moments
    node.quant.input_mean = mean.astype(np.float32)
    np.testing.assert_allclose(rounding.compensated_kernel(node, cfg), centered, rtol=1e-6, atol=1e-6)
    node.quant.input_mean = None
    np.testing.assert_allclose(rounding.compensated_kernel(node, cfg), second, rtol=1e-6, atol=1e-6)

    # a copy of the graph (the analysis's variants, a tuning trial) reads the rounding made;
    # a kernel that changed (equalized) is rounded again
    import copy

    twin = copy.deepcopy(node)
    assert twin.quant.input_moments is moments and twin.weights["kernel"] is not node.weights["kernel"]
    assert rounding.compensated_kernel(twin, cfg) is rounding.compensated_kernel(node, cfg)
    twin.weights["kernel"] = twin.weights["kernel"] * 1.5
    assert not np.allclose(rounding.compensated_kernel(twin, cfg), second)


def test_uncorrelated_inputs_round_to_nearest():
    rng = np.random.default_rng(7)
    w = rng.normal(size=(8, 32))
    scale, grid = _grid(w)
    x = np.eye(32)[np.arange(320) % 32] * rng.uniform(0.5, 2.0, (320, 1))  # one input at a time
    q = _moments(x).round(w, scale, grid.zero_point, grid)
    np.testing.assert_allclose(q, _nearest(w, scale, grid), atol=1e-12)


def test_inputs_that_give_no_usable_moments_round_to_nearest():
    """A constant input channel (nothing left once centered), an input holding inf or NaN (a
    mask): the rounding never fails a PTQ call and never leaves the grid."""
    rng = np.random.default_rng(9)
    w = rng.normal(size=(6, 12))
    scale, grid = _grid(w)
    x = rng.normal(size=(256, 12))
    x[:, 3] = 5.0  # constant
    q = _moments(x).round(w, scale, grid.zero_point, grid, centered=True)
    levels = q / scale[:, None]
    np.testing.assert_allclose(levels, np.round(levels), atol=1e-9)
    x[7, 2] = np.inf
    for centered in (True, False):
        q = _moments(x).round(w, scale, grid.zero_point, grid, centered=centered)
        np.testing.assert_allclose(q, _nearest(w, scale, grid), atol=1e-12)


def test_columns_split_into_blocks_of_whole_input_channels():
    taps = rounding.BLOCK // 2 - 12  # two channels fit in a block, three do not
    patches = rounding.Patches(3 * taps, 3, 1, kernel=(taps,), stride=(1,), dilation=(1,), pad_before=(0,),
                               pad_after=(0,), input_shape=(3, taps))  # fmt: skip
    assert [(b.start, b.stop) for b in patches.blocks()] == [(0, 2 * taps), (2 * taps, 3 * taps)]
    wide = rounding.BLOCK + 100
    one = rounding.Patches(wide, 1, 1, kernel=(wide,), stride=(1,), dilation=(1,), pad_before=(0,),
                           pad_after=(0,), input_shape=(1, wide))  # fmt: skip
    assert [(b.start, b.stop) for b in one.blocks()] == [(0, wide)]  # one channel is never cut


# ---------------------------------------------------------------- end to end, both frameworks
def _sqnr(fw, compensated: bool) -> float:
    """The quantized model's output SQNR (dB) on held-out signals."""
    model = smooth_model(fw.name)
    calibration, held_out = layout(fw.name, signals(64, seed=1)), layout(fw.name, signals(64, seed=2))
    qc = mct.core.QuantizationConfig(weights_n_bits=4, weights_compensated_rounding=compensated)
    config = mct.core.CoreConfig(
        quantization_config=qc, debug_config=mct.core.DebugConfig(analyze_similarity=False)
    )
    q_model, _ = fw.ptq(model, lambda: iter([[calibration[:32]], [calibration[32:]]]), core_config=config)
    f, q = fw.predict(model)(held_out), fw.predict(q_model)(held_out)
    return float(10 * np.log10(np.sum(f**2) / np.sum((q - f) ** 2)))


def test_compensated_rounding_gives_back_output_sqnr_on_held_out_signals(fw, caplog):
    with caplog.at_level(logging.DEBUG, logger="model_compression_toolkit"):
        with_it = _sqnr(fw, compensated=True)
    said = [r.getMessage() for r in caplog.records if "errors compensated" in r.getMessage()]
    assert said and "on 2 layers" in said[-1], said  # the conv, and the dense past the flatten
    without_it = _sqnr(fw, compensated=False)
    # 4-bit weights on smooth signals: nearest rounding's errors add up along the taps
    assert with_it > without_it + 6, (with_it, without_it)


def test_a_flag_that_is_not_a_bool_is_refused_before_work_starts():
    with pytest.raises(
        ConfigurationError, match="weights_compensated_rounding must be True or False; got 'yes'"
    ):
        mct.core.QuantizationConfig(weights_compensated_rounding="yes").validate()


def test_moments_of_an_equalized_input_are_the_moments_scaled():
    """Equalization divides a consumer's input channel ``c`` by ``s_c``: its moments scaled
    are the moments of the scaled input, so a fix search rounds as a quantization of the
    equalized model does."""
    rng = np.random.default_rng(8)
    patches = rounding.Patches(3 * 4, 3, 1, kernel=(4,), stride=(1,), dilation=(1,), pad_before=(0,),
                               pad_after=(0,), input_shape=(3, 10))  # fmt: skip
    x = rng.normal(size=(6, 3, 10)).astype(np.float32)
    s = np.array([0.5, 2.0, 4.0])
    before, after = rounding.InputMoments(patches), rounding.InputMoments(patches)
    before.update(x)
    after.update((x / s[None, :, None]).astype(np.float32))
    scaled = before.scaled(s)
    assert scaled is not None and scaled.rows == after.rows
    np.testing.assert_allclose(scaled.sums(centered=False)[0], after.sums(centered=False)[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(scaled.sums(centered=True)[0], after.sums(centered=True)[0], rtol=1e-4, atol=1e-5)
    assert before.scaled(np.ones(2)) is None  # scales that are not one per channel


def test_the_work_budget_takes_the_cheapest_layers_first(fw):
    """Over the budget, the layers that cost the least are compensated and the others round
    to nearest; the default budget takes both layers of this small model."""
    qc = mct.core.QuantizationConfig(weights_compensated_rounding=True)
    from model_compression_toolkit.pipeline.session import produced_graph

    model = smooth_model(fw.name)
    calibration = layout(fw.name, signals(64, seed=1))
    config = mct.core.CoreConfig(
        quantization_config=qc, debug_config=mct.core.DebugConfig(analyze_similarity=False)
    )
    q_model, _ = fw.ptq(model, lambda: iter([[calibration[:32]], [calibration[32:]]]), core_config=config)
    graph = produced_graph(q_model)
    assert graph is not None
    every = rounding.compensated_layers(graph)
    assert len(every) == 2
    costs = {name: rounding.work(patches, rounding.kernel_matrix(graph.node(name), graph.node(name).weights["kernel"]).shape[0])
             for name, (_, patches) in every.items()}  # fmt: skip
    cheap = min(costs, key=costs.__getitem__)
    assert list(rounding.compensated_layers(graph, budget=costs[cheap])) == [cheap]
    assert rounding.compensated_layers(graph, budget=0.0) == {}


def _compensated_kinds(fw, compensated: bool | None) -> list[str]:
    """The kinds of the layers whose kernels a quantization of the smooth model rounds with
    compensation (``compensated``: the flag, None: not given)."""
    from model_compression_toolkit.pipeline.session import produced_graph

    model = smooth_model(fw.name)
    calibration = layout(fw.name, signals(32, seed=1))
    qc = {} if compensated is None else {"weights_compensated_rounding": compensated}
    config = mct.core.CoreConfig(
        quantization_config=mct.core.QuantizationConfig(**qc),
        debug_config=mct.core.DebugConfig(analyze_similarity=False),
    )
    q_model, _ = fw.ptq(model, lambda: iter([[calibration]]), core_config=config)
    graph = produced_graph(q_model)
    assert graph is not None
    return [node.kind.name for node in graph.nodes() if node.quant.input_moments is not None]


def test_it_is_on_by_default_and_off_when_asked(fw):
    """By default both kernels are rounded with compensation; ``False`` rounds every weight
    to nearest (no layer gets input moments), as MCT's PTQ does."""
    assert _compensated_kinds(fw, None) == ["CONV", "DENSE"]
    assert _compensated_kinds(fw, False) == []
