"""Functional forms of weighted layers, timm's norm-act layers and ops with nothing to
quantize: read, quantized and folded like their module forms."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import model_compression_toolkit as mct
from model_compression_toolkit.core.graph import OpKind
from model_compression_toolkit.pytorch.backend import PytorchBackend
from tests.zoo import torchvision_ops

torchvision_ops.install()
BACKEND = PytorchBackend()
NO_SIMILARITY = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))


def _images(shape=(4, 3, 8, 8), n=2):
    rng = np.random.default_rng(0)
    return [[rng.standard_normal(shape).astype(np.float32)] for _ in range(n)]


class FunctionalNet(nn.Module):
    """conv -> batch norm -> relu -> layer norm -> linear, all called functionally on the
    module's own parameters (timm's BatchNormAct2d and LayerNorm2d do this)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(6)
        self.norm = nn.LayerNorm(6)
        self.fc = nn.Linear(6, 5)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)
            self.bn.weight.uniform_(0.5, 2)
            self.bn.bias.uniform_(-1, 1)

    def forward(self, x):
        y = F.conv2d(x, self.conv.weight, self.conv.bias, 1, 1)
        y = F.batch_norm(
            y, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias, False, 0.1, 1e-5
        )
        y = F.relu(y).mean((2, 3))
        y = F.layer_norm(y, (6,), self.norm.weight, self.norm.bias, 1e-5)
        return F.linear(y, self.fc.weight, self.fc.bias)


def test_functional_layers_carry_their_weights_and_are_named_after_their_module():
    model = FunctionalNet().eval()
    graph, warnings = BACKEND.read(model, _images()[0])
    assert not warnings
    conv, bn, norm, fc = (graph.node(n) for n in ("conv", "bn", "norm", "fc"))
    assert (conv.kind, bn.kind, norm.kind, fc.kind) == (
        OpKind.CONV, OpKind.BATCH_NORM, OpKind.LAYER_NORM, OpKind.DENSE,
    )  # fmt: skip
    np.testing.assert_array_equal(fc.weights["kernel"], model.fc.weight.detach().numpy())
    assert conv.kernel_axes == {"kernel": (0,)} and fc.kernel_in_axis == {"kernel": 1}
    assert set(bn.weights) == {"gamma", "beta", "mean", "variance"} and bn.attrs["epsilon"] == 1e-5
    assert not [n for n in graph.nodes() if n.kind == OpKind.CONSTANT]  # the parameters moved into the layers
    x = _images()[0]
    np.testing.assert_allclose(
        BACKEND.forward(BACKEND.build(graph, False), x)[0], BACKEND.forward(model, x)[0], atol=1e-5
    )


def test_a_functional_batch_norm_folds_into_the_functional_conv_before_it():
    model = FunctionalNet().eval()
    batches = _images()
    q_model, info = mct.ptq.pytorch_post_training_quantization(model, lambda: iter(batches), NO_SIMILARITY)
    assert "bn" not in info.layers and info.layers["conv"].origin == ["conv", "bn"]
    assert info.layers["conv"].weights["kernel"]["n_bits"] == 8
    assert dict(q_model.named_parameters())["conv.bias"].shape == (6,)  # the folded batch norm's shift
    assert info.unsupported_layers == []
    x = torch.as_tensor(batches[0][0])
    with torch.no_grad():
        f, q = model(x), q_model(x)
    assert F.cosine_similarity(f.flatten(), q.flatten(), dim=0) > 0.999


def test_timm_norm_act_layers_fold_into_their_conv():
    timm = pytest.importorskip("timm")
    from timm.layers import BatchNormAct2d, LayerNorm2d

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
            self.bn = BatchNormAct2d(8, act_layer=nn.SiLU)
            self.norm = LayerNorm2d(8)

        def forward(self, x):
            return self.norm(self.bn(self.conv(x)))

    assert timm.__version__
    torch.manual_seed(0)
    model = Block().eval()
    with torch.no_grad():
        model.bn.running_var.uniform_(0.5, 2)
    batches = _images()
    q_model, info = mct.ptq.pytorch_post_training_quantization(model, lambda: iter(batches), NO_SIMILARITY)
    assert info.unsupported_layers == []
    assert info.layers["conv"].origin == ["conv", "bn"]  # BatchNormAct2d's F.batch_norm, folded
    assert (
        info.layers["bn.act"].activation is not None and info.layers["norm"].kind == OpKind.LAYER_NORM.value
    )
    x = torch.as_tensor(batches[0][0])
    with torch.no_grad():
        f, q = model(x), q_model(x)
    assert F.cosine_similarity(f.flatten(), q.flatten(), dim=0) > 0.999


class Movers(nn.Module):
    """Ops that only move, select or repeat values, and stochastic depth in eval mode."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        from torchvision.ops import stochastic_depth

        y = self.fc(x)  # (B, 4, 8)
        a, b = y.chunk(2, dim=-1)
        c, d = torch.split(y, 4, dim=-1)
        first = y.unbind(1)[0]
        e = first[:, None, :].expand(-1, 4, -1)
        f = (a + c).reshape_as(b + d).swapaxes(1, 2).swapaxes(1, 2)
        g = torch.cat([f, b], -1) / 2
        return stochastic_depth(g, 0.2, "row", False) + e


def test_ops_with_nothing_to_quantize_pass_quantization_through_and_are_never_unsupported():
    model = Movers().eval()
    rng = np.random.default_rng(0)
    batches = [[rng.standard_normal((3, 4, 8)).astype(np.float32)] for _ in range(2)]
    q_model, info = mct.ptq.pytorch_post_training_quantization(model, lambda: iter(batches), NO_SIMILARITY)
    assert info.unsupported_layers == [] and not [w for w in info.warnings if "not supported" in w]
    movers = {
        n: layer
        for n, layer in info.layers.items()
        if layer.layer_type in ("chunk", "split", "unbind", "expand")
    }
    movers |= {n: layer for n, layer in info.layers.items() if layer.layer_type in ("reshape_as", "swapaxes")}
    assert len(movers) == 7
    for name, layer in movers.items():
        # no quantizer of its own, and not a float layer: its output is its quantized input's values
        assert layer.activation is None and name not in info.float_layers, name
    assert not [
        n for n, layer in info.layers.items() if layer.layer_type == "stochastic_depth"
    ]  # removed in eval
    assert info.layers["truediv"].activation is not None  # a new scale: quantized again
    x = torch.as_tensor(batches[0][0])
    with torch.no_grad():
        f, q = model(x), q_model(x)
    assert F.cosine_similarity(f.flatten(), q.flatten(), dim=0) > 0.999
