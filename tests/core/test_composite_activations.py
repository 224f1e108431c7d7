"""A hard-swish or hard-sigmoid written as separate ops is quantized once, at its output,
as a fused one is (issue 30: PP-OCR's recognizer spells ``x * clip(x + 3, 0, 6) / 6``).

PyTorch only: the Keras reader reads ``keras.ops.add(x, 3.0)`` but keeps its scalar in the
layer's payload, not in the node's attributes, so the core cannot see the 3 and the 6.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import model_compression_toolkit as mct
from model_compression_toolkit.core import preparation
from tests.zoo import torchvision_ops

NO_SIMILARITY = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))


class HardSwishOps(nn.Module):
    """conv -> hard-swish as ops, in the three spellings, between convs; ``fused`` uses
    ``nn.Hardswish`` instead (the reference for the number of quantizers)."""

    def __init__(self, fused: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fused = fused
        self.convs = nn.ModuleList(nn.Conv2d(c_in, 16, 3, padding=1) for c_in in (3, 16, 16, 16))
        self.head = nn.Conv2d(16, 4, 1)
        with torch.no_grad():
            for conv in self.convs:
                conv.weight.mul_(4.0)  # pre-activations of a few units wide: x * relu6(x + 3) up to ~100

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, conv in enumerate(self.convs):
            y = conv(x)
            if self.fused:
                x = F.hardswish(y)
            elif i % 3 == 0:
                x = y * torch.clamp(y + 3, 0, 6) / 6
            elif i % 3 == 1:
                x = y * F.hardsigmoid(y)
            else:
                x = y * F.relu6(y + 3.0) * (1 / 6)
        return self.head(x)


def _batches(n: int = 4, seed: int = 0) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.uniform(-1, 1, (8, 3, 12, 12)).astype(np.float32)] for _ in range(n)]


def _quantize(model: nn.Module) -> tuple[object, float]:
    """(info, output SQNR in dB on a batch not seen in calibration)."""
    batches = _batches()
    q_model, info = mct.ptq.pytorch_post_training_quantization(model, lambda: iter(batches), NO_SIMILARITY)
    x = torch.as_tensor(_batches(1, seed=9)[0][0])
    with torch.no_grad():
        f, q = model(x).double(), q_model(x).double()
    return info, float(10 * torch.log10((f**2).sum() / ((f - q) ** 2).sum()))


def _quantizers(info) -> int:
    return sum(1 for layer in info.layers.values() if layer.activation)


def test_a_hard_swish_written_as_ops_is_quantized_only_at_its_output():
    info, _ = _quantize(HardSwishOps().eval())
    fused_info, _ = _quantize(HardSwishOps(fused=True).eval())
    assert _quantizers(info) == _quantizers(fused_info)  # as many as with nn.Hardswish
    for name in ("add", "clamp", "mul", "hardsigmoid", "add_1", "relu6", "mul_2"):
        layer = info.layers[name]
        assert layer.activation is None, name
        assert "inside a hard-swish written as ops" in layer.activation_float_reason, name
    for name in ("truediv", "mul_1", "mul_3"):  # each composite's output: quantized
        assert info.layers[name].activation is not None, name
    assert "fused with the activation 'truediv'" in info.layers["convs.0"].activation_float_reason


def test_quantizing_only_the_output_raises_the_output_sqnr(monkeypatch):
    model = HardSwishOps().eval()
    info, sqnr = _quantize(model)
    monkeypatch.setattr(preparation, "find_composites", lambda graph: [])  # every op quantized, as before
    every_op_info, every_op_sqnr = _quantize(model)
    assert _quantizers(every_op_info) >= _quantizers(info) + 10
    assert sqnr > every_op_sqnr + 1.0, (sqnr, every_op_sqnr)


class SharedIntermediate(nn.Module):
    """``r = relu6(x + 3)`` is also read by the output: it is no longer inside one activation."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        r = F.relu6(y + 3)
        return y * r / 6 + r


def test_an_intermediate_read_elsewhere_keeps_its_quantizer():
    info, _ = _quantize(SharedIntermediate().eval())
    assert info.layers["relu6"].activation is not None
    assert all("hard-swish" not in str(layer.activation_float_reason) for layer in info.layers.values())


class HardSigmoidOps(nn.Module):
    """A squeeze-excitation gate ``x * (relu6(s + 3) / 6)``, ``s`` another tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.squeeze = nn.Conv2d(8, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        s = self.squeeze(y.mean((2, 3), keepdim=True))
        return y * (F.relu6(s + 3) / 6)


def test_a_hard_sigmoid_written_as_ops_is_quantized_only_at_its_output():
    info, _ = _quantize(HardSigmoidOps().eval())
    for name in ("add", "relu6"):
        assert "inside a hard-sigmoid written as ops" in info.layers[name].activation_float_reason
    assert info.layers["truediv"].activation is not None


def _onnx_hard_swish():
    """conv -> Add(3) -> Clip(0, 6) -> Mul(x, .) -> Div(6) -> conv, converted by onnx2torch."""
    onnx = pytest.importorskip("onnx")
    onnx2torch = pytest.importorskip("onnx2torch")
    from onnx import TensorProto, helper, numpy_helper

    torchvision_ops.install()
    rng = np.random.default_rng(0)
    mk = helper.make_node
    nodes = [
        mk("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        mk("Add", ["c1", "three"], ["a"]),
        mk("Clip", ["a", "zero", "six"], ["r"]),
        mk("Mul", ["c1", "r"], ["m"]),
        mk("Div", ["m", "six"], ["h"]),
        mk("HardSigmoid", ["h"], ["s"], alpha=0.2, beta=0.5),
        mk("Mul", ["h", "s"], ["h2"]),
        mk("Conv", ["h2", "w2", "b2"], ["y"]),
    ]
    initializers = {
        "w1": (rng.standard_normal((8, 3, 3, 3)) * 1.5).astype(np.float32), "b1": np.zeros(8, np.float32),
        "w2": (rng.standard_normal((4, 8, 1, 1)) * 0.3).astype(np.float32), "b2": np.zeros(4, np.float32),
        "three": np.float32(3), "zero": np.float32(0), "six": np.float32(6),
    }  # fmt: skip
    graph = helper.make_graph(
        nodes, "hard_swish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in initializers.items()],
    )  # fmt: skip
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    return onnx2torch.convert(model).eval()


def test_a_hard_swish_in_onnx_ops_converted_by_onnx2torch_is_quantized_once():
    info, sqnr = _quantize(_onnx_hard_swish())
    reasons = {name: str(layer.activation_float_reason) for name, layer in info.layers.items()}
    inside = sorted(name for name, reason in reasons.items() if "written as ops" in reason)
    assert len(inside) == 4, reasons  # Add, Clip, Mul; then HardSigmoid of the second hard-swish
    assert sqnr > 25.0
