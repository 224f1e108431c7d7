"""Why PP-OCRv4's exported files drifted from the quantized model (issue 30), each cause on a
small model with constructed weights.

1. A scale and shift by constants after a layer (PP-LCNetV3's learnable affine blocks, a
   batch norm or a layer norm's gamma and beta exported as ``mul``/``add``), a layer norm
   and a swish written as ops were quantized at every op: five grids per block where one
   does, each rounding again what the one before rounded, so that one step at the conv
   became two after ``mul(., 1.38)`` and four after the hard-swish, and any runtime's
   float32 rounding grew through the depth (PP-OCRv4 rec: file cosine 0.989). Each chain
   is now quantized once, at its end (`core.composites`).
2. A conv whose output stays float (fused with what follows) got an int32 bias in the
   file: the runtime ran it in float anyway (no integer kernel without a quantized output),
   with its bias moved by up to half of ``s_x * s_w`` from the quantized model's. Only a
   layer whose output the file quantizes gets one now (`pytorch.onnx_model`).
3. On a small tensor (an SE block's pooled vector) whose inputs already differ, a line fits
   the differences by chance: the per-layer table named it a weight mismatch, its first
   departure. A layer whose inputs differ about as often now passes them on.
"""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.core import preparation
from model_compression_toolkit.core.layer_parity import LayerAccumulator, LayerGrid, explain

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
nn = torch.nn

# the head's output on a grid too: each chain and the head quantized once, as an integer file needs
NO_SIMILARITY = mct.core.CoreConfig(
    debug_config=mct.core.DebugConfig(analyze_similarity=False), quantize_outputs=True
)
BLOCKS, CHANNELS, SIZE = 6, 16, 16


class AffineBlocks(nn.Module):
    """PP-LCNetV3's block, as paddle2onnx writes it::

    conv -> mul(a) -> add(b) -> x * relu6(x + 3) / 6 -> mul(c) -> add(d)

    then a layer norm and a swish written as ops, as SVTR's neck has them.
    """

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.convs = nn.ModuleList(
            nn.Conv2d(3 if i == 0 else CHANNELS, CHANNELS, 3, padding=1) for i in range(BLOCKS)
        )
        with torch.no_grad():
            for conv in self.convs:
                conv.weight.normal_(0.0, 1.5 / np.sqrt(conv.weight[0].numel()), generator=generator)
                conv.bias.uniform_(-0.2, 0.2, generator=generator)
        draw = torch.rand(BLOCKS, 4, generator=generator)
        self.affine = [(1 + float(a), float(b) - 0.5, 0.2 + float(c), float(d) - 0.5) for a, b, c, d in draw]
        self.gamma = nn.Parameter(torch.rand(CHANNELS, generator=generator) + 0.5)
        self.beta = nn.Parameter(torch.rand(CHANNELS, generator=generator) - 0.5)
        self.head = nn.Linear(CHANNELS, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv, (a, b, c, d) in zip(self.convs, self.affine):
            y = conv(x) * a + b
            x = y * torch.clamp(y + 3, 0, 6) / 6 * c + d
        t = x.flatten(2).transpose(1, 2)  # (batch, positions, channels)
        centred = t - t.mean(-1, keepdim=True)
        t = centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + 1e-5) * self.gamma + self.beta
        t = t * torch.sigmoid(t)
        return self.head(t)


def _data() -> list[list[np.ndarray]]:
    x = (np.random.default_rng(0).integers(0, 256, (32, 3, SIZE, SIZE)) / 255).astype(np.float32)
    return [[x[i : i + 8]] for i in range(0, 32, 8)]


def _quantize(monkeypatch=None, composites=None):
    if monkeypatch is not None:
        monkeypatch.setattr(preparation, "find_composites", composites)
    batches = _data()
    return mct.ptq.pytorch_post_training_quantization(
        AffineBlocks().eval(), lambda: iter(batches), NO_SIMILARITY
    )


def _without_chains(graph):
    """The composites as they were: hard-swish and hard-sigmoid only."""
    from model_compression_toolkit.core.composites import find_composites

    return [c for c in find_composites(graph) if c.function in ("hardswish", "hardsigmoid")]


def test_each_scale_shift_and_activation_chain_is_quantized_once():
    _, info = _quantize()
    quantized = {name for name, layer in info.layers.items() if layer.activation}
    # the input; per block, its last add; the swish after the layer norm; the head
    assert quantized == {"x", *(f"add_{3 * i + 2}" for i in range(BLOCKS)), "mul_19", "head"}, sorted(
        quantized
    )
    reasons = {name: str(layer.activation_float_reason) for name, layer in info.layers.items()}
    assert "scale and shift by constants" in reasons["mul"], reasons["mul"]
    assert "layer norm" in reasons["sqrt"] and "swish" in reasons["sigmoid"], reasons
    # the conv is fused with the chain: it names the one quantizer after it
    assert reasons["convs.0"] == "fused with the activation 'add_2': quantized after it"
    assert info.layers["convs.0"].activation is None
    # so do the hard-swish's ops inside the chain, and none of them counts as kept float
    # (PP-OCRv4 rec's log said "107 layers quantized, 115 kept in float", every one of them these)
    assert reasons["clamp"].endswith("its output is quantized after 'add_2'"), reasons["clamp"]
    assert info.float_layers == {} and info.counts.kept_float == 0, info.float_layers


def test_the_file_lands_on_the_quantized_model_with_one_grid_per_chain(tmp_path, monkeypatch):
    data = _data()
    q_model, _ = _quantize()
    result = mct.exporter.pytorch_export_model(q_model, str(tmp_path / "once.onnx"), lambda: iter(data))
    (parity,) = result.parity
    assert result.parity_ok and parity.cosine >= 0.999, parity
    assert result.parity.layers.first_departure is None
    # each op quantized, as before: more grids, and the file further from its model
    q_every, _ = _quantize(monkeypatch, _without_chains)
    every = mct.exporter.pytorch_export_model(q_every, str(tmp_path / "every.onnx"), lambda: iter(data))
    (every_parity,) = every.parity
    assert 1 - every_parity.cosine > 2 * (1 - parity.cosine), (every_parity, parity)


def test_a_conv_fused_with_what_follows_keeps_its_float_bias_in_the_file(tmp_path):
    import onnx
    from onnx import numpy_helper

    data = _data()
    q_model, _ = _quantize()
    path = tmp_path / "m.onnx"
    mct.exporter.pytorch_export_model(q_model, str(path), lambda: iter(data))
    model = onnx.load(str(path))
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    assert len(convs) == BLOCKS
    for conv in convs:  # each conv's output goes on in float (mul, add, hard-swish) to the chain's one grid
        bias = producers.get(conv.input[2])
        assert bias is None or bias.op_type != "DequantizeLinear", conv.name
        assert consts.get(conv.input[2], np.zeros(1)).dtype == np.float32
    # per layer, the file computes what the quantized model computes: the first block's
    # grid (its inputs equal) has at most a tie rounded the other way, none departs
    table = mct.exporter.layer_parity(q_model, path, lambda: iter(data))
    first = next(r for r in table.rows if r.layer == "add_2")
    assert first.max_steps is not None and first.max_steps <= 1.001 and first.one_step < 1e-3, first
    assert table.first_departure is None, table.first_departure


def test_a_small_tensor_whose_inputs_differ_is_not_named_a_mismatch():
    """An SE block's pooled vector (2 samples x 24 channels) one step off on 20 % of values,
    its 1x1 conv two steps off on a few: a fitted line would call it a weight mismatch."""
    rng = np.random.default_rng(3)
    step = 0.02
    pooled = np.round(rng.uniform(0, 2, (2, 24, 1, 1)) / step) * step
    moved = pooled + step * (rng.uniform(size=pooled.shape) < 0.2)
    conv = np.round(rng.uniform(0, 3, (2, 24, 1, 1)) / step) * step
    conv_moved = conv + step * np.round(3 * (moved - pooled) / step * rng.uniform(0.3, 1.0, conv.shape))
    first = LayerAccumulator(LayerGrid("pool", "AvgPool", step, ("pool",), channel_axis=1), "t_pool")
    first.add(pooled, moved)
    second = LayerAccumulator(
        LayerGrid("se", "Conv2d", step, ("se",), channel_axis=1, inputs=("pool",)), "t_se"
    )
    second.add(conv, conv_moved)
    table = explain([first, second])
    row = table.rows[1]
    assert row.beyond_one_step, row
    assert row.kind in ("carried", "grown") and not row.departs, row
    assert table.first_departure is None


def _report(cosine: float, floor: float | None, departs: bool, measured: bool = True, bias: float | None = None):
    from model_compression_toolkit.core.export.report import ExportReport, OutputParity
    from model_compression_toolkit.core.layer_parity import LayerParity, LayerTable

    output = OutputParity("y", 32, 0.01, 0.5, 0.01, 50.0, 0.5, cosine, 20.0, floor_cosine=floor, bias_cosine=bias)
    row = LayerParity("conv", "Conv2d", ("conv",), 0.01, "t_conv" if measured else None, departs=departs)
    layers = LayerTable([row])
    return ExportReport(
        "m", "pytorch", "ONNX", "FAKELY_QUANT", "m.onnx", 1, "onnxruntime", "data", [output], layers=layers
    )


def test_parity_on_a_network_that_amplifies_its_own_rounding():
    """The recognizer against itself in PyTorch on 1 thread instead of 2: cosine 0.992. Its
    file passes when no layer departs on its own and the outputs are within twice the floor's
    distance; a departing layer, a file further off, or a network whose floor holds 0.999
    still fail."""
    assert _report(0.993, floor=0.990, departs=False).parity_ok
    assert not _report(0.993, floor=0.990, departs=True).parity_ok  # one layer computed otherwise
    assert not _report(0.975, floor=0.990, departs=False).parity_ok  # further than the network moves itself
    assert not _report(0.995, floor=0.9995, departs=False).parity_ok  # a network that keeps 0.999: held to it
    assert not _report(0.993, floor=0.990, departs=False, measured=False).parity_ok  # no per-layer table
    assert _report(0.9995, floor=None, departs=False, measured=False).parity_ok  # 0.999 as ever
    # the int32 biases the file stores move such a network too (PP-OCR's recognizer with
    # compensated rounding: the float32 floor 0.996, the int32 biases alone 0.976, the file
    # 0.990): the farther of the two references is the floor
    assert _report(0.990, floor=0.9964, departs=False, bias=0.9757).parity_ok
    assert not _report(0.990, floor=0.9964, departs=False).parity_ok  # the float32 floor alone
    assert not _report(0.990, floor=0.9964, departs=True, bias=0.9757).parity_ok
    assert not _report(0.940, floor=0.9964, departs=False, bias=0.9757).parity_ok  # further than both
