"""The PyTorch backend on real small models: the backend contract (`tests.backends.contract`)
on PyTorch models, and what only PyTorch does (fx reading, in-place quantizers, hooks,
channels-last pooling, weights shared without a copy)."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import model_compression_toolkit as mct
from model_compression_toolkit.core.calibration.quantizers import QuantizedWeights, fake_quant, symmetric_grid
from model_compression_toolkit.core.config import QuantizationErrorMethod, QuantizationMethod
from model_compression_toolkit.core.graph import OpKind
from model_compression_toolkit.core.quant_config import ActivationQuantConfig, WeightsQuantConfig
from model_compression_toolkit.errors import InputMismatchError, ModelReadError
from model_compression_toolkit.pytorch.backend import PytorchBackend
from tests.backends.contract import BackendContract
from tests.fixtures.torch_models import MODELS, ConvBnRelu, Residual, TwoInputs, make, odd

BACKEND = PytorchBackend()


def _assert_same(expected: list[np.ndarray], got: list[np.ndarray], atol: float = 1e-5) -> None:
    assert len(expected) == len(got)
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, atol=atol, rtol=0)


class TestPytorchBackend(BackendContract):
    backend = BACKEND

    def mlp(self, w1, b1, w2, b2):
        model = nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 3)).eval()
        with torch.no_grad():
            for layer, w, b in ((model[0], w1, b1), (model[2], w2, b2)):
                layer.weight.copy_(torch.from_numpy(w.T.copy()))
                layer.bias.copy_(torch.from_numpy(b))
        return model

    def unsupported_model(self):
        model, sample = odd()
        # chunk only moves values: known (issue 24); PReLU is an activation (issue 30)
        return model, sample, {"erf": "erf", "shuffle": "PixelShuffle"}

    def user_model(self):
        model, sample = make("conv_bn_relu")
        model.train()  # its flags, gradients and hooks must stay as they are
        model.features[0].register_forward_hook(lambda *args: None)
        return model, sample

    def model_state(self, model):
        return {
            "state": {k: v.detach().clone().numpy() for k, v in model.state_dict().items()},
            "training": [m.training for m in model.modules()],
            "requires_grad": [p.requires_grad for p in model.parameters()],
            "hooks": [len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()],
        }

    @pytest.fixture(params=list(MODELS))
    def float_model(self, request):
        return make(request.param)


@pytest.mark.parametrize("key", list(MODELS))
def test_a_float_build_returns_what_the_model_returns_and_is_frozen(key):
    model, sample = make(key)
    graph, _ = BACKEND.read(model, sample)
    built = BACKEND.build(graph, quantized=False)
    with torch.no_grad():  # same output structure as the original
        want = model(*(torch.from_numpy(x) for x in sample))
        got = built(*(torch.from_numpy(x) for x in sample))
    assert type(got) is type(want)
    if isinstance(want, tuple) and isinstance(want[0], dict):
        assert list(got[0]) == list(want[0]) and isinstance(got[0]["aux"], list)
    assert not built.training
    assert all(not p.requires_grad for p in built.parameters())


def test_graph_describes_the_layers():
    model, sample = make("groups")
    graph, _ = BACKEND.read(model, sample)
    dw, grouped, up, up_grouped = (graph.node(n) for n in ("depthwise", "grouped", "up", "up_grouped"))
    assert dw.kind == OpKind.CONV and dw.attrs["groups"] == 4 and dw.kernel_axes == {"kernel": (0,)}
    assert grouped.attrs["stride"] == (2, 2) and grouped.output_shapes == [(None, 8, 3, 3)]
    assert up.kind == OpKind.CONV_TRANSPOSE and up.kernel_axes == {"kernel": (1,)}
    assert up_grouped.kernel_axes == {"kernel": ()} and "bias" not in up_grouped.weights
    np.testing.assert_array_equal(dw.weights["kernel"], model.depthwise.weight.detach().numpy())
    assert graph.node("relu6").attrs["function"] == "relu6" and graph.node("relu6").kind == OpKind.ACTIVATION
    assert graph.inputs == ["x"] and graph.node("x").output_shapes == [(None, 4, 8, 8)]

    model, sample = make("residual")
    graph, _ = BACKEND.read(model, sample)
    bn = graph.node("bn1")
    assert bn.kind == OpKind.BATCH_NORM and set(bn.weights) == {"gamma", "beta", "mean", "variance"}
    assert bn.attrs["epsilon"] == pytest.approx(1e-5)
    np.testing.assert_array_equal(bn.weights["variance"], model.bn1.running_var.numpy())
    # a module called twice: its path first, the fx node name after
    assert graph.node("relu").layer_type == "ReLU" and graph.node("relu_1").layer_type == "ReLU"
    add = graph.node("add")
    assert add.kind == OpKind.ADD and [e.src for e in graph.in_edges("add")] == ["x", "conv2"]
    assert graph.outputs == [("relu_1", 0)]

    model, sample = make("transformerish")
    graph, _ = BACKEND.read(model, sample)
    assert graph.node("norm").kind == OpKind.LAYER_NORM and graph.node("norm").channel_axis == -1
    assert graph.node("fc1").channel_axis == -1 and graph.node("act").attrs["function"] == "gelu"
    assert graph.node("softmax").kind == OpKind.SOFTMAX and graph.node("softmax").attrs["dim"] == -1

    model, sample = make("functional")
    graph, _ = BACKEND.read(model, sample)
    assert graph.node("size").kind == OpKind.SHAPE and graph.node("size").output_shapes == [()]
    assert graph.node("size").channel_axis is None
    assert graph.node("getattr_1").kind == OpKind.SHAPE  # x.shape
    assert graph.node("cat").input_shapes == [(None, 4, 4, 4), (None, 4, 4, 4)]
    assert graph.node("view").kind == OpKind.RESHAPE


def test_unsupported_ops_keep_their_weights_and_output_shapes():
    model, sample = odd()
    graph, _ = BACKEND.read(model, sample)
    assert graph.node("chunk").output_shapes == [(None, 1, 8, 8), (None, 1, 8, 8)]
    assert graph.node("chunk").kind == OpKind.RESHAPE
    assert graph.node("prelu").weights.keys() == {"weight"}


def test_unsupported_layers_of_one_type_give_one_warning_naming_them(recwarn):
    """Seven PixelShuffle modules and an erf: two warnings, not eight; the first names
    five shuffles and says how many more there are; info lists all eight layers."""
    import model_compression_toolkit as mct

    class Shuffles(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 1)
            self.shuffles = nn.Sequential(*(nn.PixelShuffle(1) for _ in range(7)))

        def forward(self, x):
            return torch.erf(self.shuffles(self.conv(x)))

    x = np.random.default_rng(0).standard_normal((2, 3, 4, 4)).astype(np.float32)
    _, info = mct.ptq.pytorch_post_training_quantization(Shuffles(), lambda: iter([[x]]))
    shown = [str(w.message) for w in recwarn if "not supported" in str(w.message)]
    assert info.warnings == shown and len(shown) == 2, shown
    grouped = "PixelShuffle is not supported: its 7 layers 'shuffles.0', 'shuffles.1', 'shuffles.2', "
    assert shown[0].startswith(grouped + "'shuffles.3', 'shuffles.4' and 2 more (all in info.unsupported_layers)")
    assert shown[1] == "'erf' (erf) is not supported: kept in float and passed through unchanged"
    assert info.unsupported_layers == [f"shuffles.{i}" for i in range(7)] + ["erf"]


def test_untraceable_model_raises_model_read_error_quoting_fx():
    class DataDependent(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x

    with pytest.raises(ModelReadError, match=r"torch\.fx could not trace DataDependent.*control flow"):
        BACKEND.read(DataDependent(), [np.ones((1, 3), np.float32)])


def test_a_wrong_sample_quotes_torch_and_names_the_forward_signature():
    model, _ = make("conv_bn_relu")
    with pytest.raises(InputMismatchError, match=r"\(2, 5, 8, 8\).*torch failed") as info:
        BACKEND.read(model, [np.zeros((2, 5, 8, 8), np.float32)])
    assert "channels" in str(info.value)  # torch's own message
    with pytest.raises(
        InputMismatchError, match=r"expected 2 inputs for TwoInputs.forward\(image, features\); got 1"
    ):
        BACKEND.read(TwoInputs(), [np.zeros((2, 3, 6, 6), np.float32)])


def test_only_the_users_own_run_calls_the_users_hook():
    model, sample = make("conv_bn_relu")
    calls = []
    model.features[0].register_forward_hook(lambda *args: calls.append(1))
    graph, _ = BACKEND.read(model, sample)
    assert calls == [1]  # the read ran its copy once with the hook, to see it does not change the output
    BACKEND.forward(BACKEND.build(graph, quantized=False), sample)
    BACKEND.forward(BACKEND.build(graph, quantized=True), sample)
    assert calls == [1]
    BACKEND.forward(model, sample)
    assert calls == [1, 1]  # then only the user's own run called the user's hook


def _conv_quant(graph, name, kernel_threshold, activation_threshold):
    node = graph.node(name)
    grid = symmetric_grid(kernel_threshold, 4, signed=True)
    node.quant.weights["kernel"] = WeightsQuantConfig(
        n_bits=4,
        method=QuantizationMethod.SYMMETRIC,
        error_method=QuantizationErrorMethod.NOCLIPPING,
        per_channel=True,
        channel_axes=(0,),
        grid=grid,
    )
    agrid = symmetric_grid(activation_threshold, 8, signed=True)
    node.quant.activation = ActivationQuantConfig(
        n_bits=8,
        method=QuantizationMethod.SYMMETRIC,
        error_method=QuantizationErrorMethod.NOCLIPPING,
        signed=True,
        threshold=activation_threshold,
        grid=agrid,
    )
    return grid, agrid


def test_a_quantized_conv_holds_its_fake_quantized_kernel():
    """A 4-D kernel on its grid per output channel (axis 0), held by the built conv."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 6, 3))
    sample = [np.random.default_rng(2).standard_normal((2, 3, 7, 7)).astype(np.float32)]
    graph, _ = BACKEND.read(model, sample)
    kernel = graph.node("0").weights["kernel"]
    grid, agrid = _conv_quant(graph, "0", np.abs(kernel).max(axis=(1, 2, 3)) * 0.8, 1.3)
    built = BACKEND.build(graph, quantized=True)

    qkernel = fake_quant(kernel, grid, (0,))
    with torch.no_grad():
        y = F.conv2d(torch.from_numpy(sample[0]), torch.from_numpy(qkernel), model[0].bias).numpy()
    agrid32 = dataclasses.replace(agrid, scale=np.float32(agrid.scale), zero_point=np.float32(agrid.zero_point))
    expected = fake_quant(y, agrid32)  # activations are fake-quantized in float32
    (got,) = BACKEND.forward(built, sample)
    np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)
    assert len(np.unique(got)) <= 256
    quantizers = [name for name, m in built.named_modules() if type(m).__name__ == "ActivationFakeQuant"]
    assert quantizers == ["0_activation_quant"]
    np.testing.assert_array_equal(built.get_submodule("0").weight.numpy(), qkernel)


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("shifted", [False, True])
def test_activation_quantizer_same_with_and_without_autograd(shifted, inplace):
    from model_compression_toolkit.core.calibration.quantizers import uniform_grid
    from model_compression_toolkit.pytorch.builder import ActivationFakeQuant

    original = np.random.default_rng(5).standard_normal((4, 3, 5, 5)).astype(np.float32) * 3
    x = torch.from_numpy(original.copy())
    grid = uniform_grid(-1.3, 4.1, 4) if shifted else symmetric_grid(np.array([1.0, 2.0, 0.5]), 8, signed=True)
    quantizer = ActivationFakeQuant(grid, "act", channel_axis=1, ndim=4, inplace=inplace)
    leaf = x.clone().requires_grad_(True)
    tracked = quantizer(leaf)
    with torch.no_grad():
        no_grad = quantizer(x)
    assert tracked.requires_grad and not no_grad.requires_grad
    tracked.sum().backward()  # the autograd path keeps what backward needs, even with inplace
    np.testing.assert_array_equal(leaf.detach().numpy(), original)
    grid32 = dataclasses.replace(grid, scale=np.float32(grid.scale), zero_point=np.float32(grid.zero_point))
    expected = fake_quant(original, grid32, (1,) if np.size(grid.scale) > 1 else ())
    np.testing.assert_array_equal(no_grad.numpy(), tracked.detach().numpy())
    np.testing.assert_allclose(no_grad.numpy(), expected, atol=1e-6, rtol=0)
    assert (no_grad.data_ptr() == x.data_ptr()) is inplace  # as nn.ReLU(inplace=True): x is overwritten
    if not inplace:
        np.testing.assert_array_equal(x.numpy(), original)


def test_quantizers_overwrite_only_tensors_no_one_else_holds():
    """A quantizer works in place on a layer's new output (one tensor less at a time),
    never on the model's input, which the caller holds, or on a view of it."""
    from model_compression_toolkit.pytorch.builder import ActivationFakeQuant

    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 4), nn.ReLU()).eval()
    x = np.random.default_rng(6).standard_normal((4, 3, 2, 2)).astype(np.float32)
    original = x.copy()
    # the output on a grid too (an integer-only target's model): the fused linear+relu has a quantizer
    q_model, _ = mct.ptq.pytorch_post_training_quantization(
        model, lambda: iter([[x]]), mct.core.CoreConfig(quantize_outputs=True)
    )
    with torch.no_grad():
        q_model(torch.from_numpy(x))  # shares x's memory
    np.testing.assert_array_equal(x, original)
    inplace = {m.node_name: m.inplace for m in q_model.modules() if isinstance(m, ActivationFakeQuant)}
    assert inplace == {"input_1": False, "2": True}, inplace  # the input's and the fused linear+relu's


def test_quantizer_name_says_which_node():
    model, sample = make("conv_bn_relu")
    graph, _ = BACKEND.read(model, sample)
    _conv_quant(graph, "features.0", 1.0, 4.0)
    built = BACKEND.build(graph, quantized=True, extra_outputs=["features.0"])
    names = [name for name, m in built.named_modules() if type(m).__name__ == "ActivationFakeQuant"]
    assert names == ["features_0_activation_quant"] and "features.0" in repr(built.get_submodule(names[0]))
    _, conv_out = BACKEND.forward(built, sample)
    step = 4.0 / 128
    np.testing.assert_allclose(conv_out / step, np.round(conv_out / step), atol=1e-4)


def test_a_tap_gets_each_output_before_the_next_layer_runs():
    model, sample = make("residual")
    graph, _ = BACKEND.read(model, sample)
    names = [graph.inputs[0], "conv1", "conv2"]
    events = []
    tapped = BACKEND.build(graph, quantized=False, extra_outputs=names, tap=lambda name, value: events.append(name))
    tapped.get_submodule("conv2").register_forward_pre_hook(lambda m, i: events.append("conv2 runs"))
    assert BACKEND.forward(tapped, sample) == []
    assert events == [names[0], "conv1", "conv2 runs", "conv2"]  # handed over before the next layer runs


def test_models_built_from_one_set_of_quantized_weights_hold_them_without_a_copy():
    model, sample = make("conv_bn_relu")
    graph, _ = BACKEND.read(model, sample)
    _conv_quant(graph, "features.0", 1.0, 4.0)
    weights = QuantizedWeights(graph)
    first, second = (BACKEND.build(graph, quantized=True, weights=weights) for _ in range(2))
    kernel = weights["features.0"]["kernel"]
    for built in (first, second):  # no copy of the weights per model
        assert built.get_submodule("features.0").weight.data_ptr() == kernel.ctypes.data
    read_only = graph.node("features.0").weights["kernel"]
    read_only.flags.writeable = False  # a weight torch cannot share is copied, without a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        built = BACKEND.build(graph, quantized=False)
    assert built.get_submodule("features.0").weight.data_ptr() != read_only.ctypes.data
    (plain,) = BACKEND.forward(built, sample)
    np.testing.assert_allclose(plain, BACKEND.forward(model, sample)[0], atol=1e-5)


def test_extra_output_is_not_overwritten_by_an_inplace_relu():
    model, sample = make("conv_bn_relu")
    seen = {}

    def hook(module, inputs, output):
        seen["bn"] = output.detach().clone().numpy()

    model.features[1].register_forward_hook(hook)
    graph, _ = BACKEND.read(model, sample)
    _, bn = BACKEND.forward(BACKEND.build(graph, quantized=False, extra_outputs=["features.1"]), sample)
    BACKEND.forward(model, sample)
    assert (bn < 0).any()
    _assert_same([seen["bn"]], [bn])



class SharedConvOutput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.conv2 = nn.Conv2d(3, 4, 3), nn.Conv2d(3, 4, 3)
        self.relu, self.relu6 = nn.ReLU(), nn.ReLU6(inplace=True)

    def forward(self, x):
        y = self.conv(x)
        return self.relu(y), y * 2, self.relu6(self.conv2(x))  # y is read twice


def test_an_activation_works_in_place_only_on_a_tensor_it_alone_reads():
    model = SharedConvOutput().eval()
    sample = [np.random.default_rng(4).standard_normal((2, 3, 6, 6)).astype(np.float32)]
    graph, _ = BACKEND.read(model, sample)
    built = BACKEND.build(graph, quantized=False)
    for want, got in zip(BACKEND.forward(model, sample), BACKEND.forward(built, sample), strict=True):
        np.testing.assert_array_equal(got, want)
    assert built.get_submodule("relu").inplace is False  # conv's output is read again
    assert built.get_submodule("relu6").inplace is True  # conv2's output: one tensor less
    assert model.relu6.inplace is True and model.relu.inplace is False  # the user's modules as they were
    tapped = BACKEND.build(graph, quantized=False, extra_outputs=["conv2"])
    assert tapped.get_submodule("relu6").inplace is False
    conv2 = BACKEND.forward(tapped, sample)[-1]
    assert (conv2 < 0).any()


class MaxPools(nn.Module):
    """Every form of 2-D max pooling, each followed by a ``.view`` that needs a
    channels-first contiguous tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.MaxPool2d(3, 2, 1)
        self.odd = nn.MaxPool2d(2, ceil_mode=True, dilation=1)
        self.dilated = nn.MaxPool2d(3, 1, padding=1, dilation=2)
        self.with_indices = nn.MaxPool2d(2, return_indices=True)

    def forward(self, x):
        n = x.shape[0]
        a = self.odd(self.stem(x))
        b = F.max_pool2d(x, 3, 1, 1) + torch.max_pool2d(x, 3, 1, 1)
        pooled, indices = self.with_indices(x)
        return a.view(n, -1), b.view(n, -1), self.dilated(x).view(n, -1), pooled.view(n, -1), indices.view(n, -1)


def test_max_pooling_is_reproduced_bit_for_bit():
    """The built model pools in channels-last order (faster on the CPU) and hands the
    next layer a channels-first tensor, as the user's model does."""
    model = MaxPools().eval()
    sample = [np.random.default_rng(1).standard_normal((2, 5, 15, 13)).astype(np.float32)]
    graph, warnings = BACKEND.read(model, sample)
    assert warnings == []
    got = BACKEND.forward(BACKEND.build(graph, quantized=False), sample)
    for want, value in zip(BACKEND.forward(model, sample), got, strict=True):
        np.testing.assert_array_equal(value, want)


@pytest.mark.parametrize("layer", ["conv", "linear"])
def test_a_new_bias_is_built_and_used(layer):
    torch.manual_seed(0)
    if layer == "conv":
        model, shape = nn.Sequential(nn.Conv2d(3, 4, 3, bias=False)), (2, 3, 5, 5)
    else:
        model, shape = nn.Sequential(nn.Linear(6, 4, bias=False)), (2, 6)
    sample = [np.random.default_rng(3).standard_normal(shape).astype(np.float32)]
    graph, _ = BACKEND.read(model, sample)
    assert "bias" not in graph.node("0").weights
    bias = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    graph.node("0").weights["bias"] = bias
    (plain,) = BACKEND.forward(model, sample)
    (got,) = BACKEND.forward(BACKEND.build(graph, quantized=False), sample)
    axis = 1 if layer == "conv" else -1
    shape = [1] * got.ndim
    shape[axis] = 4
    np.testing.assert_allclose(got, plain + bias.reshape(shape), atol=1e-5)


def test_small_helpers():
    assert BACKEND.name == "pytorch" and BACKEND.channels_last is False
    assert BACKEND.input_count(TwoInputs()) == 2 and BACKEND.input_count(ConvBnRelu()) == 1
    assert BACKEND.model_name(Residual()) == "Residual" and BACKEND.expected_input_shapes(Residual()) is None
    assert BACKEND.is_tensor(torch.ones(1)) and not BACKEND.is_tensor(np.ones(1))
    assert BACKEND.to_numpy(torch.arange(3)).tolist() == [0, 1, 2]

    class Embed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(10, 4)

        def forward(self, ids):
            return self.embed(ids).mean(1)

    model = Embed()
    ids = [np.array([[1, 2], [3, 9]], np.int64)]
    graph, warnings = BACKEND.read(model, ids)
    assert not warnings and graph.node("embed").weights["weight"].shape == (10, 4)
    assert graph.node("embed").kind == OpKind.EMBEDDING  # a lookup: its output is an activation
    _assert_same(BACKEND.forward(model, ids), BACKEND.forward(BACKEND.build(graph, quantized=False), ids))


def test_a_non_tensor_argument_is_left_unquantized():
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)

        def forward(self, x, k: int = 2):
            return self.conv(x) * k

    model = Scaled().eval()
    x = np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)
    q_model, info = mct.ptq.pytorch_post_training_quantization(model, lambda: iter([[x]]))
    assert info.layers["x"].activation is not None
    assert info.layers["k"].activation is None and "non-tensor" in info.layers["k"].activation_float_reason
    (expected,) = BACKEND.forward(model, [x])
    np.testing.assert_allclose(BACKEND.forward(q_model, [x])[0], expected, atol=0.1 * np.abs(expected).max())


def test_reading_a_model_does_not_import_symbolic_shapes():
    """torch.fx's ShapeProp imports sympy on its first run: half a second of a first PTQ call."""
    code = (
        "import sys, numpy as np, torch\n"
        "from model_compression_toolkit.pytorch.backend import PytorchBackend\n"
        "model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())\n"
        "PytorchBackend().read(model, [np.zeros((2, 3, 8, 8), np.float32)])\n"
        "print(sorted(m for m in ('sympy', 'torch.fx.experimental.symbolic_shapes') if m in sys.modules))\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "[]", out.stdout


class _Options(nn.Module):
    """Optional arguments that torch.fx cannot trace as inputs: a branch on None, a flag and a mode."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4, 2)

    def forward(self, x, mask=None, features: bool = False, mode: str = "mean"):
        y = self.conv(x)
        y = y.mean((2, 3)) if mode == "mean" else y.amax((2, 3))
        if mask is not None:
            y = y * mask
        return y if features else self.fc(y)


def test_optional_arguments_the_data_does_not_give_are_read_with_their_defaults():
    model = _Options().eval()
    x = np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)
    with pytest.warns(UserWarning, match=r"mask=None, features=False, mode='mean'.*forward takes \(x\)"):
        q_model, info = mct.ptq.pytorch_post_training_quantization(model, lambda: iter([[x]]))
    assert list(inspect.signature(q_model.forward).parameters) == ["x"]
    assert any("mask=None" in w for w in info.warnings)
    (expected,) = BACKEND.forward(model, [x])
    (got,) = BACKEND.forward(q_model, [x])
    assert got.shape == expected.shape == (4, 2)
    np.testing.assert_allclose(got, expected, atol=0.05 * np.abs(expected).max())


def test_an_optional_argument_the_data_gives_stays_an_input():
    model = _Options().eval()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    mask = np.array([[1, 0, 1, 0]] * 4, np.float32)
    graph, read_warnings = BACKEND.read(model, [x, mask])
    assert graph.inputs == ["x", "mask"] and any("features=False" in w for w in read_warnings)
    assert not any("mask=None" in w for w in read_warnings)
    _assert_same(BACKEND.forward(model, [x, mask]), BACKEND.forward(BACKEND.build(graph, quantized=False), [x, mask]))
