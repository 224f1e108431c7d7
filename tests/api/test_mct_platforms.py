"""What a target platform, concat threshold update, shift negative correction and MCT's
torch.fx layer names do to a PyTorch model with functional ops."""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct

torch = pytest.importorskip("torch")
nn = torch.nn
NO_SIMILARITY = mct.core.DebugConfig(analyze_similarity=False)


class Branches(nn.Module):
    """conv1, conv2 * 0.01 -> cat -> max pool -> avg pool -> GELU -> flatten -> fc -> + 1 -> softmax."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.avg = nn.AvgPool2d(2)
        self.gelu = nn.GELU()
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        c = torch.cat([self.conv1(x), self.conv2(x) * 0.01], 1)
        f = torch.flatten(self.gelu(self.avg(self.pool(c))), 1)
        return torch.softmax(self.fc(f) + 1.0, dim=1)


def data():
    x = np.random.default_rng(0).normal(0, 3, (32, 3, 16, 16)).astype(np.float32)
    return lambda: iter([[x[:16]], [x[16:]]])


def quantize(config=None, tpc=None):
    config = config or mct.core.CoreConfig(debug_config=NO_SIMILARITY)
    return mct.ptq.pytorch_post_training_quantization(Branches().eval(), data(), core_config=config,
                                                      target_platform_capabilities=tpc)  # fmt: skip


def grid(info, name):
    return info.layers[name].activation["grid"]


def test_imx500_leaves_max_pool_outputs_on_their_input_grid():
    _, info = quantize(tpc=mct.get_target_platform_capabilities("pytorch", "default"))
    assert "not quantized on imx500 1.0 (MaxPool)" in info.float_layers["pool"]
    assert info.layers["avg"].activation["method"] == "power_of_two"
    assert info.layers["softmax"].activation["method"] == "power_of_two"


def test_tflite_preserves_grids_fixes_softmax_and_quantizes_dense_per_tensor():
    _, info = quantize(tpc=mct.get_target_platform_capabilities(tpc_version="1.0", device_type="tflite"))
    assert grid(info, "avg") == grid(info, "pool") == grid(info, "cat")  # quantization preserving
    assert grid(info, "mul") == grid(info, "conv2")
    assert info.layers["conv1"].activation["method"] == "uniform"  # a linear layer's output
    assert grid(info, "softmax")["scale"] == pytest.approx(1 / 256) and grid(info, "softmax")["zero_point"] == 0
    assert info.layers["fc"].weights["kernel"]["per_channel"] is False
    assert info.layers["conv1"].weights["kernel"]["per_channel"] is True


def test_concat_threshold_update_puts_the_inputs_on_the_concat_grid():
    config = mct.core.CoreConfig(quantization_config=mct.core.QuantizationConfig(concat_threshold_update=True),
                                 debug_config=NO_SIMILARITY)  # fmt: skip
    _, plain = quantize()
    _, info = quantize(config)
    assert grid(plain, "mul") != grid(plain, "cat")
    assert grid(info, "conv1") == grid(info, "cat") == grid(info, "mul")


def test_shift_negative_correction_on_a_gelu_feeding_a_dense_layer():
    qc = mct.core.QuantizationConfig(shift_negative_activation_correction=True, shift_negative_ratio=0.5)
    _, info = quantize(mct.core.CoreConfig(quantization_config=qc, debug_config=NO_SIMILARITY))
    _, plain = quantize()
    assert plain.layers["gelu"].activation["signed"] is True
    shifted = info.layers["gelu"].activation
    assert shifted["signed"] is False and shifted["grid"]["zero_point"] > 0 and shifted["range_min"] < 0


def test_mcts_fx_names_select_functional_ops_for_16_bit_activations():
    bit_cfg = mct.core.BitWidthConfig()
    names = ["mul", "cat", "add"]
    bit_cfg.set_manual_activation_bit_width([mct.core.common.network_editors.NodeNameFilter(n) for n in names], 16)
    bit_cfg.set_manual_weights_bit_width(mct.core.network_editor.NodeNameFilter("conv1"), 4, "weight")
    config = mct.core.CoreConfig(bit_width_config=bit_cfg, debug_config=NO_SIMILARITY)
    q_model, info = quantize(config, mct.get_target_platform_capabilities(tpc_version="4.0", device_type="imx500"))
    assert [info.layers[n].activation["n_bits"] for n in names] == [16, 16, 16]
    assert info.layers["softmax"].activation["n_bits"] == 8
    assert info.layers["conv1"].weights["kernel"]["n_bits"] == 4
    out = q_model(torch.from_numpy(next(data()())[0]))
    assert torch.isfinite(out).all()


def test_resource_utilization_data_counts_the_platform_bits():
    ru = mct.core.pytorch_resource_utilization_data(Branches().eval(), data())
    weights = sum(p.numel() for p in Branches().parameters())
    biases = 4 + 4 + 10
    assert ru.weights_memory == pytest.approx((weights - biases) * 1 + biases * 4)  # kernels at 8 bits, biases float
    assert 0 < ru.activation_memory < ru.total_memory and ru.bops > 0
