"""The backend contract, written once: what every `core.backend.Backend` must do.

A framework's backend tests subclass `BackendContract` (as NNCF's cross-framework test
templates do) and give it that framework's small models::

    class TestKerasBackend(BackendContract):
        backend = KerasBackend()
        def mlp(self, w1, b1, w2, b2): ...       # x (N, 6) -> dense -> relu -> dense
        def unsupported_model(self): ...         # (model, sample, {layer name: layer type})
        def model_state(self, model): ...        # what reading and building must not change
        @pytest.fixture(params=[...])
        def float_model(self, request): ...      # (model, sample), every layer supported

The quantized checks run on one MLP whose weights and inputs are built here from small
dyadic numbers (multiples of 1/16 and 1/4), so every sum before a quantizer is exact in
float32 whatever order a framework adds in, and every backend is held to the same numpy
reference (`core.calibration.quantizers.fake_quant`), value for value.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from model_compression_toolkit.core.backend import Backend
from model_compression_toolkit.core.calibration.quantizers import (
    QuantizedWeights,
    fake_quant,
    symmetric_grid,
    uniform_grid,
)
from model_compression_toolkit.core.config import QuantizationErrorMethod, QuantizationMethod
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.core.quant_config import ActivationQuantConfig, QuantGrid, WeightsQuantConfig
from model_compression_toolkit.errors import InputMismatchError

_RNG = np.random.default_rng(21)
W1 = (_RNG.integers(-24, 25, (6, 4)) / 16).astype(np.float32)  # (in, out), |w| up to 1.5
B1 = (_RNG.integers(-8, 9, 4) / 16).astype(np.float32)
W2 = (_RNG.integers(-16, 17, (4, 3)) / 16).astype(np.float32)
B2 = (_RNG.integers(-4, 5, 3) / 16).astype(np.float32)
X = (_RNG.integers(-8, 9, (8, 6)) / 4).astype(np.float32)  # 8 samples in [-2, 2]
MLP = (W1, B1, W2, B2)

KERNEL_THRESHOLDS = np.array([1.0, 0.5, 1.0, 0.25])  # d1, per output channel: some weights clip
RELU_GRID = symmetric_grid(2.5, 8, signed=False)  # step 5/512; h above 2.5 clips
OUT_GRID = uniform_grid(-1.5, 2.0, 6)  # a zero point (27); the two largest outputs clip


def _float32(grid: QuantGrid) -> QuantGrid:
    """Activations are fake-quantized in float32, on the grid rounded to float32."""
    return dataclasses.replace(grid, scale=np.float32(grid.scale), zero_point=np.float32(grid.zero_point))


def mlp_reference(x: np.ndarray, quantized: bool, kernel: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Every layer's output in numpy: ``d1 -> relu -> d2``; quantized, the d1 kernel on
    its 4-bit grid (or ``kernel``) and relu and d2 fake-quantized."""
    w1 = W1
    if quantized:
        w1 = kernel if kernel is not None else fake_quant(W1, symmetric_grid(KERNEL_THRESHOLDS, 4, True), (1,))
    d1 = x @ w1 + B1
    h = np.maximum(d1, 0)
    if quantized:
        h = fake_quant(h, _float32(RELU_GRID))
    out = h @ W2 + B2
    if quantized:
        out = fake_quant(out, _float32(OUT_GRID))
    return {"d1": d1, "relu": h, "d2": out}


def mlp_nodes(graph: Graph) -> tuple[Node, Node, Node]:
    """(d1, relu, d2) of a graph read from the MLP, found by kind (names are the framework's)."""
    (d1, d2), (act,) = graph.find([OpKind.DENSE]), graph.find([OpKind.ACTIVATION])
    return d1, act, d2


def as_in_out(node: Node, name: str = "kernel") -> np.ndarray:
    """A dense kernel in the (in, out) layout, whatever the framework's."""
    return np.moveaxis(node.weights[name], node.kernel_in_axis[name], 0)


def quantize_mlp(graph: Graph) -> None:
    """d1's kernel per output channel on 4 bits, relu's output unsigned on 8, d2's output
    uniform on 6 (the grids of `mlp_reference`)."""
    d1, act, d2 = mlp_nodes(graph)
    d1.quant.weights["kernel"] = WeightsQuantConfig(
        4, QuantizationMethod.SYMMETRIC, QuantizationErrorMethod.NOCLIPPING, True,
        d1.kernel_axes["kernel"], grid=symmetric_grid(KERNEL_THRESHOLDS, 4, signed=True),
    )  # fmt: skip
    act.quant.activation = ActivationQuantConfig(
        8, QuantizationMethod.SYMMETRIC, QuantizationErrorMethod.NOCLIPPING, signed=False, grid=RELU_GRID
    )
    d2.quant.activation = ActivationQuantConfig(
        6, QuantizationMethod.UNIFORM, QuantizationErrorMethod.NOCLIPPING, grid=OUT_GRID
    )


def assert_outputs(got: list[np.ndarray], want: list[np.ndarray], atol: float = 1e-6, rtol: float = 0.0) -> None:
    assert isinstance(got, list) and len(got) == len(want)
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray), type(g)
        np.testing.assert_allclose(g, w, atol=atol, rtol=rtol)


def assert_same_state(before: Any, after: Any, where: str = "model") -> None:
    """Equal nested dicts, lists and arrays, naming the first place they differ."""
    assert type(before) is type(after), f"{where}: {type(before).__name__} became {type(after).__name__}"
    if isinstance(before, dict):
        assert list(before) == list(after), f"{where}: keys {list(before)} became {list(after)}"
        for key in before:
            assert_same_state(before[key], after[key], f"{where}[{key!r}]")
    elif isinstance(before, (list, tuple)):
        assert len(before) == len(after), f"{where}: {len(before)} items became {len(after)}"
        for i, (b, a) in enumerate(zip(before, after)):
            assert_same_state(b, a, f"{where}[{i}]")
    elif isinstance(before, np.ndarray):
        np.testing.assert_array_equal(after, before, err_msg=where)
    else:
        assert before == after, f"{where}: {before!r} became {after!r}"


class BackendContract:
    """The checks every backend passes; a subclass provides the backend and its models."""

    backend: Backend
    float_rtol = 0.0  # a float build against the model it was read from (Keras: 1e-5)

    # ------------------------------------------------------------ what a subclass gives
    def mlp(self, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, b2: np.ndarray) -> Any:
        """``x (N, 6) -> dense 6->4 -> relu -> dense 4->3`` with these weights (kernels (in, out))."""
        raise NotImplementedError

    def unsupported_model(self) -> tuple[Any, list[np.ndarray], dict[str, str]]:
        """A model with layers the backend does not support: (model, sample, {name: type})."""
        raise NotImplementedError

    def user_model(self) -> tuple[Any, list[np.ndarray]]:
        """The model whose `model_state` reading and building must leave as it was."""
        return self.mlp(*MLP), [X]

    def model_state(self, model: Any) -> Any:
        """Everything of ``model`` a read, a build or a run must not change (dicts, lists,
        arrays, plain values), copied."""
        raise NotImplementedError

    @pytest.fixture
    def float_model(self) -> tuple[Any, list[np.ndarray]]:
        """(model, sample) with every layer supported; subclasses give several (params)."""
        return self.mlp(*MLP), [X]

    # ------------------------------------------------------------ helpers
    def read_mlp(self, quantized: bool = False) -> Graph:
        graph, warnings = self.backend.read(self.mlp(*MLP), [X])
        assert warnings == []
        if quantized:
            quantize_mlp(graph)
        return graph

    def run(self, model: Any, inputs: list[np.ndarray] | None = None) -> list[np.ndarray]:
        return self.backend.forward(model, [X] if inputs is None else inputs)

    # ------------------------------------------------------------ the contract
    def test_read_gives_the_graph_of_the_mlp_and_a_float_build_computes_it(self):
        graph = self.read_mlp()
        graph.validate()
        assert graph.framework == self.backend.name
        (inp,) = graph.input_nodes()
        assert [n.kind for n in graph.nodes()] == [OpKind.INPUT, OpKind.DENSE, OpKind.ACTIVATION, OpKind.DENSE]
        d1, act, d2 = mlp_nodes(graph)
        assert graph.outputs == [(d2.name, 0)] and act.attrs["function"] == "relu"
        for node, kernel, bias in ((d1, W1, B1), (d2, W2, B2)):
            np.testing.assert_array_equal(as_in_out(node), kernel)
            np.testing.assert_array_equal(node.weights["bias"], bias)
            assert node.kernel_axes == {"kernel": (1 - node.kernel_in_axis["kernel"],)}  # per output channel
            assert node.output_shapes == [(None, kernel.shape[1])] and node.channel_axis % 2 == 1
        assert inp.output_shapes == [(None, 6)]
        want = mlp_reference(X, quantized=False)
        assert_outputs(self.run(self.backend.build(graph, quantized=False)), [want["d2"]])

    def test_float_build_reproduces_the_model(self, float_model):
        model, sample = float_model
        graph, warnings = self.backend.read(model, sample)
        assert warnings == [] and not graph.find([OpKind.UNKNOWN])
        built = self.backend.build(graph, quantized=False)
        assert_outputs(self.run(built, sample), self.run(model, sample), atol=1e-5, rtol=self.float_rtol)

    def test_quantized_build_matches_numpy_fake_quant(self):
        graph = self.read_mlp(quantized=True)
        (got,) = self.run(self.backend.build(graph, quantized=True))
        assert_outputs([got], [mlp_reference(X, quantized=True)["d2"]])
        assert len(np.unique(got)) <= 64  # six bits
        # a float build of the same graph ignores its grids
        assert_outputs(self.run(self.backend.build(graph, quantized=False)), [mlp_reference(X, False)["d2"]])

    def test_extra_outputs_follow_the_graph_outputs_in_the_order_asked(self):
        graph = self.read_mlp(quantized=True)
        d1, act, _ = mlp_nodes(graph)
        for quantized in (False, True):
            want = mlp_reference(X, quantized)
            got = self.run(self.backend.build(graph, quantized, extra_outputs=[act.name, d1.name]))
            assert_outputs(got, [want["d2"], want["relu"], want["d1"]])  # relu: after its quantizer

    def test_a_tap_receives_each_extra_output_and_the_model_returns_nothing(self):
        graph = self.read_mlp(quantized=True)
        names = [n.name for n in graph.nodes()]  # the input, d1, relu, d2: in the order they run
        expected = self.run(self.backend.build(graph, True, extra_outputs=names))[1:]
        got: dict[str, np.ndarray] = {}

        def tap(name: str, value: np.ndarray) -> None:
            assert isinstance(value, np.ndarray) and name not in got
            got[name] = value.copy()  # the array is only valid during the call

        assert self.run(self.backend.build(graph, True, extra_outputs=names, tap=tap)) == []
        assert list(got) == names
        for name, want in zip(names, expected):
            np.testing.assert_array_equal(got[name], want, err_msg=name)
        want = mlp_reference(X, quantized=True)
        np.testing.assert_array_equal(got[names[0]], X)
        assert_outputs([got[n] for n in names[1:]], [want["d1"], want["relu"], want["d2"]])

    def test_an_unsupported_layer_is_kept_float_and_named_in_the_warnings(self):
        model, sample, unsupported = self.unsupported_model()
        graph, warnings = self.backend.read(model, sample)
        for name, layer_type in unsupported.items():
            node = graph.node(name)
            assert node.kind == OpKind.UNKNOWN and node.layer_type == layer_type
            assert any(repr(name) in w and layer_type in w and "not supported" in w for w in warnings), warnings
        assert len(warnings) == len({n.layer_type for n in graph.find([OpKind.UNKNOWN])})  # one per type
        for quantized in (False, True):  # passed through unchanged, in float
            built = self.backend.build(graph, quantized=quantized)
            assert_outputs(self.run(built, sample), self.run(model, sample), atol=1e-5, rtol=self.float_rtol)

    def test_a_sample_that_does_not_fit_raises_input_mismatch(self):
        model = self.mlp(*MLP)
        with pytest.raises(InputMismatchError, match=r"\(2, 7\)"):
            self.backend.read(model, [np.zeros((2, 7), np.float32)])
        with pytest.raises(InputMismatchError, match=r"1 input.*got 2"):
            self.backend.read(model, [X, X])

    def test_the_user_model_is_left_unchanged(self):
        model, sample = self.user_model()
        before = self.model_state(model)
        outputs = self.run(model, sample)
        assert_same_state(before, self.model_state(model))  # running it changes nothing either
        graph, _ = self.backend.read(model, sample)
        for node in graph.nodes():
            for w in node.weights.values():
                if w.flags.writeable:
                    w *= 0  # the graph's arrays are its own
        for quantized in (False, True):
            self.run(self.backend.build(graph, quantized=quantized), sample)
        assert_same_state(before, self.model_state(model))
        assert_outputs(self.run(model, sample), outputs, atol=0)

    def test_builds_from_one_set_of_quantized_weights_compute_with_them(self):
        """The weights given are used as they are, not computed again."""
        graph = self.read_mlp(quantized=True)
        d1 = mlp_nodes(graph)[0]
        weights = QuantizedWeights(graph)
        first, second = (self.backend.build(graph, True, weights=weights) for _ in range(2))
        want = mlp_reference(X, quantized=True)["d2"]
        assert_outputs(self.run(first), [want])
        assert_outputs(self.run(second), [want])
        other = np.moveaxis(np.full_like(W1, 0.25), 0, d1.kernel_in_axis["kernel"])  # in the node's layout
        given = {d1.name: {"kernel": other}}
        got = self.run(self.backend.build(graph, True, weights=given))
        assert_outputs(got, [mlp_reference(X, True, kernel=np.full_like(W1, 0.25))["d2"]])

    def test_a_build_sharing_a_model_computes_what_a_fresh_build_does(self):
        """``share``: a model from the same graph, mode and weights may lend its layers;
        one from other weights, or the other mode, must not change what is computed."""
        graph = self.read_mlp(quantized=True)
        d1, act, _ = mlp_nodes(graph)
        weights = QuantizedWeights(graph)
        q_model = self.backend.build(graph, True, weights=weights)
        before = self.run(q_model)
        got: dict[str, np.ndarray] = {}
        tapped = self.backend.build(
            graph, True, extra_outputs=[act.name], weights=weights,
            tap=lambda name, value: got.setdefault(name, value.copy()), share=q_model,
        )  # fmt: skip
        assert self.run(tapped) == []
        assert_outputs([got[act.name]], [mlp_reference(X, True)["relu"]])
        assert_outputs(self.run(q_model), before, atol=0)
        float_model = self.backend.build(graph, False, share=q_model)
        assert_outputs(self.run(float_model), [mlp_reference(X, False)["d2"]])
        kernel = np.full_like(W1, 0.25)
        given = {d1.name: {"kernel": np.moveaxis(kernel, 0, d1.kernel_in_axis["kernel"])}}
        other = self.backend.build(graph, True, weights=given, share=q_model)
        assert_outputs(self.run(other), [mlp_reference(X, True, kernel=kernel)["d2"]])

    def test_forward_returns_numpy_arrays_and_the_helpers_answer(self):
        model = self.mlp(*MLP)
        graph = self.read_mlp(quantized=True)
        d1 = mlp_nodes(graph)[0]
        for m in (model, self.backend.build(graph, False), self.backend.build(graph, True, extra_outputs=[d1.name])):
            outputs = self.backend.forward(m, [X])
            assert isinstance(outputs, list) and outputs and all(type(o) is np.ndarray for o in outputs)
        assert isinstance(self.backend.name, str) and isinstance(self.backend.channels_last, bool)
        assert isinstance(self.backend.model_name(model), str) and self.backend.model_name(model)
        assert self.backend.input_count(model) in (1, None)
        names = self.backend.input_names(model)  # the keys a dict batch may use
        assert names is None or (len(names) == 1 and all(isinstance(n, str) and n for n in names))
        assert self.backend.expected_input_shapes(model) in (None, [(None, 6)])
        assert not self.backend.is_tensor(X)
        np.testing.assert_array_equal(self.backend.to_numpy(X), X)
