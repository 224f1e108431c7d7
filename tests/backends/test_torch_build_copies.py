"""Models built from one graph (the PTQ result, the similarity's float and one-quantizer
variants) share the graph's weight arrays and nothing else: each runs with its own
quantization whatever was built or run before it, and none holds a tensor of the user's
model (`pytorch.builder._copy_module` copies what the graph does not replace)."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import model_compression_toolkit as mct
from model_compression_toolkit.core.similarity.causes import WEIGHTS, QuantizerEntry, isolate
from model_compression_toolkit.pipeline.session import produced_graph
from model_compression_toolkit.pytorch import builder
from model_compression_toolkit.pytorch.backend import PytorchBackend

BACKEND = PytorchBackend()


class _Net(nn.Module):
    """``conv -> relu -> bn -> instance norm -> pool -> linear``: the batch norm after the
    ReLU is not folded (its ``num_batches_tracked`` stays in the module), and the instance
    norm's running statistics are not read into the graph: tensors every build copies."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.relu, self.bn = nn.Conv2d(3, 8, 3), nn.ReLU(), nn.BatchNorm2d(8)
        self.norm = nn.InstanceNorm2d(8, affine=True, track_running_stats=True)
        self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(8, 5)
        with torch.no_grad():
            for t in (self.bn.running_mean, self.norm.running_mean, self.bn.weight, self.norm.bias):
                t.uniform_(-0.5, 0.5)
            for t in (self.bn.running_var, self.norm.running_var):
                t.uniform_(0.5, 2.0)

    def forward(self, x):
        return self.fc(self.pool(self.norm(self.bn(self.relu(self.conv(x))))).flatten(1))


def _tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: t for k, t in [*model.named_parameters(), *model.named_buffers()] if t.numel()}


def _storages(model: nn.Module) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in _tensors(model).values()}


def _run(model: nn.Module, x: np.ndarray) -> np.ndarray:
    (y,) = BACKEND.forward(model, [x])
    return y


@pytest.fixture(scope="module")
def quantized():
    model = _Net().eval()
    x = np.random.default_rng(1).standard_normal((16, 3, 12, 12)).astype(np.float32)
    user = {k: t.detach().clone() for k, t in _tensors(model).items()}
    with warnings.catch_warnings():  # the instance norm is kept in float, with a warning
        warnings.simplefilter("ignore")
        q_model, _ = mct.ptq.pytorch_post_training_quantization(model, lambda: iter([[x[:8]], [x[8:]]]))
    graph = produced_graph(q_model)
    assert graph is not None
    return model, user, x, q_model, graph


def test_builds_from_one_graph_each_give_their_own_outputs_after_one_another(quantized):
    """Float, quantized and one-quantizer builds of one graph, built and run in turn: each
    gives what it gives alone, and the float ones what the user's model gives."""
    model, _, x, q_model, graph = quantized
    expected_float, expected_q = _run(model, x), _run(q_model, x)
    entry = next(
        QuantizerEntry(n.name, WEIGHTS, n.layer_type, 8, 0.0) for n in graph.nodes() if n.quant.weights
    )
    variant_graph = isolate(graph, entry)
    float_1 = BACKEND.build(graph, quantized=False)
    quant = BACKEND.build(graph, quantized=True)
    y_float, y_q = _run(float_1, x), _run(quant, x)
    variant = BACKEND.build(variant_graph, quantized=True)
    y_variant = _run(variant, x)
    float_2 = BACKEND.build(graph, quantized=False)

    np.testing.assert_allclose(y_float, expected_float, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(y_q, expected_q)
    assert np.abs(y_q - y_float).max() > 1e-3  # the quantization shows
    assert not np.array_equal(y_variant, y_float) and not np.array_equal(y_variant, y_q)
    for model_, first in ((float_1, y_float), (quant, y_q), (variant, y_variant), (float_2, y_float)):
        np.testing.assert_array_equal(_run(model_, x), first)  # again, after all the others
    np.testing.assert_array_equal(_run(BACKEND.build(variant_graph, quantized=True), x), y_variant)


def test_builds_share_the_graphs_arrays_only_and_never_the_users_tensors(quantized):
    """What two builds share is the graph's own weight arrays; a tensor the graph does not
    hold (the batch norm's count, the instance norm's statistics) is each build's own, and
    the user's parameters and buffers are in none of them and keep their values."""
    model, user, x, q_model, graph = quantized
    float_model, quant = BACKEND.build(graph, quantized=False), BACKEND.build(graph, quantized=True)
    graph_arrays = {a.ctypes.data for n in graph.nodes() for a in n.weights.values()}
    assert _storages(float_model) & _storages(quant) <= graph_arrays
    assert {"norm.running_mean", "norm.running_var", "bn.num_batches_tracked"} <= set(_tensors(quant))
    users = _storages(model)
    for built in (float_model, quant, q_model):
        assert not users & _storages(built)
    for name in ("norm.running_mean", "bn.num_batches_tracked"):
        quant.get_buffer(name).add_(1)  # written in one build: the others do not see it
        assert torch.equal(float_model.get_buffer(name), model.get_buffer(name))
    assert {k: t.detach() for k, t in _tensors(model).items()}.keys() == user.keys()
    for k, t in _tensors(model).items():
        assert torch.equal(t, user[k]), k


def test_a_module_copy_is_deepcopys_but_for_the_replaced_weights():
    """`builder._deep_copy` makes what ``copy.deepcopy`` makes: same types, flags, hooks and
    values, shared submodules and tied weights shared once, nothing of the original kept."""

    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.rnn = nn.Linear(3, 3), nn.Linear(3, 3), nn.LSTM(3, 4)
            self.b.weight, self.again, self.lst = self.a.weight, self.a, [1, [2]]
            self.register_buffer("buf", torch.arange(3.0))
            self.register_forward_hook(lambda *args: None)

    tied = Tied()
    made, reference = builder._deep_copy(tied, {}), copy.deepcopy(tied)
    assert type(made) is Tied and made.again is made.a and made.b.weight is made.a.weight
    assert made.lst == [1, [2]] and made.lst is not tied.lst and made.lst[1] is not tied.lst[1]
    assert list(made._forward_hooks.values()) == list(tied._forward_hooks.values())
    assert made._forward_hooks is not tied._forward_hooks
    assert [type(m) for m in made.modules()] == [type(m) for m in reference.modules()]
    assert vars(made).keys() == vars(reference).keys()
    for (k, a), (_, b) in zip(
        made.state_dict(keep_vars=True).items(), tied.state_dict(keep_vars=True).items()
    ):
        assert (
            torch.equal(a, b)
            and a is not b
            and a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()
        ), k
    seq = torch.randn(2, 1, 3)
    torch.testing.assert_close(
        made.rnn(seq)[0], tied.rnn(seq)[0], rtol=0, atol=0
    )  # its flat weights are its own
    assert {id(w) for w in made.rnn._flat_weights} == {id(p) for p in made.rnn.parameters()}
