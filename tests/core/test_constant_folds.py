"""A constant applied to a conv's or linear layer's output, one value per output channel, is
folded into the layer (`preparation.fold_constant_adds`, `fold_constant_muls`):

- added or subtracted, into its bias: PaddlePaddle's exporter writes every conv bias as a
  separate ``Add`` (PP-OCR through ONNX and onnx2torch), which gave the conv's output a grid of
  its own before the add rounded it again;
- multiplied (or one value for all channels), into its kernel and bias: PP-LCNetV3's affine
  blocks (``conv -> mul(a) -> add(b)``) left the conv's output a tensor an int8 runtime holds
  and rounds before the scale.

PyTorch only: its reader keeps such a constant as a graph node (``get_attr``), while a Keras
model holds it inside the ``keras.ops`` call (and a Keras conv has its bias)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import model_compression_toolkit as mct
from model_compression_toolkit.core.config import QuantizationConfig
from model_compression_toolkit.core.graph import OpKind
from model_compression_toolkit.core.preparation import prepare_graph
from model_compression_toolkit.pipeline.backends import get_backend


class _BiasAsAdd(nn.Module):
    """``conv(bias=False) -> + c -> relu -> pool -> linear(bias=False) -> - d``: each bias
    written as a separate op, as PaddlePaddle's exporter writes them."""

    def __init__(self, shift_shape: tuple[int, ...] = (1, 8, 1, 1), reshaped: bool = False) -> None:
        super().__init__()
        self.reshaped = reshaped
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.register_buffer("c", torch.randn(shift_shape))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 5, bias=False)
        self.register_buffer("d", torch.randn(1, 5))

    def forward(self, x):
        c = self.c.reshape(-1).reshape(1, -1, 1, 1) if self.reshaped else self.c  # ONNX: Reshape(bias, shape)
        y = torch.relu(self.conv(x) + c)
        return self.fc(torch.flatten(self.pool(y), 1)) - self.d


class _Affine(nn.Module):
    """``conv -> * a -> + b -> relu -> pool -> linear -> * k``: a learnable scale and shift
    after the conv (some of ``a`` negative), one scale for all of the linear layer's outputs."""

    def __init__(self, scale_shape: tuple[int, ...] = (1, 8, 1, 1)) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.register_buffer("a", torch.randn(scale_shape))
        self.register_buffer("b", torch.randn(1, 8, 1, 1))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 5)
        self.register_buffer("k", torch.tensor([0.25]))

    def forward(self, x):
        y = torch.relu(self.conv(x) * self.a + self.b)
        return self.fc(torch.flatten(self.pool(y), 1)) * self.k


def _x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((4, 3, 12, 12)).astype(np.float32)


def _prepared(model: nn.Module):
    backend = get_backend(model)
    graph, _ = backend.read(model, [_x()])
    return backend, prepare_graph(graph, QuantizationConfig())


@pytest.mark.parametrize("reshaped", [False, True])
def test_a_per_channel_add_and_subtract_fold_into_the_bias_exactly(reshaped):
    model = _BiasAsAdd(reshaped=reshaped).eval()
    backend, graph = _prepared(model)
    kinds = [n.kind for n in graph.nodes()]
    assert not {OpKind.ADD, OpKind.SUB, OpKind.CONSTANT, OpKind.RESHAPE} & {k for k, n in zip(kinds, graph.nodes()) if n.name != "flatten"}
    conv, fc = graph.node("conv"), graph.node("fc")
    np.testing.assert_allclose(conv.weights["bias"], model.c.numpy().reshape(-1), rtol=1e-6)
    np.testing.assert_allclose(fc.weights["bias"], -model.d.numpy().reshape(-1), rtol=1e-6)
    assert conv.origin[-1] == "add" and fc.origin[-1] == "sub"
    with torch.no_grad():
        want = model(torch.from_numpy(_x())).numpy()
    got = backend.forward(backend.build(graph, quantized=False), [_x()])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_folded_conv_has_no_grid_of_its_own():
    """Before, conv's output had an 8-bit grid and the add's output another."""
    mct.set_log_folder(None)
    model = _BiasAsAdd().eval()
    q, _ = mct.ptq.pytorch_post_training_quantization(model, lambda: iter([[_x()]]))
    quantized = {n.replace("_activation_quant", "") for n, _ in q.named_modules() if n.endswith("_activation_quant")}
    assert "conv" not in quantized and "add" not in quantized
    with torch.no_grad():
        want = model(torch.from_numpy(_x())).numpy()
        got = q(torch.from_numpy(_x())).numpy()
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()


@pytest.mark.parametrize(
    "shape",
    [(1, 8, 12, 12), (1, 1, 1, 12)],  # varies along the map / along the width: not a bias
)
def test_a_constant_that_is_not_one_per_channel_stays_an_add(shape):
    model = _BiasAsAdd(shape).eval()
    backend, graph = _prepared(model)
    assert "add" in {n.name for n in graph.nodes()}
    assert "bias" not in graph.node("conv").weights


def test_a_per_channel_and_a_single_scale_fold_into_the_kernel_and_bias_exactly():
    model = _Affine().eval()
    backend, graph = _prepared(model)
    assert not {OpKind.MUL, OpKind.ADD, OpKind.CONSTANT} & {n.kind for n in graph.nodes()}
    conv, fc = graph.node("conv"), graph.node("fc")
    a = model.a.numpy().reshape(-1)
    assert (a < 0).any()  # a negative scale flips the channel: still exact
    np.testing.assert_allclose(conv.weights["kernel"], model.conv.weight.detach().numpy() * a[:, None, None, None], rtol=1e-6)
    np.testing.assert_allclose(
        conv.weights["bias"], model.conv.bias.detach().numpy() * a + model.b.numpy().reshape(-1), rtol=1e-5
    )
    np.testing.assert_allclose(fc.weights["kernel"], model.fc.weight.detach().numpy() * 0.25, rtol=1e-6)
    assert conv.origin[-2:] == ["mul", "add"] and fc.origin[-1] == "mul_1"
    with torch.no_grad():
        want = model(torch.from_numpy(_x())).numpy()
    got = backend.forward(backend.build(graph, quantized=False), [_x()])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(1, 8, 12, 12), (1, 1, 1, 12)])  # along the map / the width: not a scale
def test_a_constant_that_is_not_one_per_channel_stays_a_mul(shape):
    model = _Affine(shape).eval()
    _, graph = _prepared(model)
    assert "mul" in {n.name for n in graph.nodes()}
    np.testing.assert_array_equal(graph.node("conv").weights["kernel"], model.conv.weight.detach().numpy())
