"""The test-only numpy backend passes the backend contract: the contract asks nothing of a
framework, and the pipeline tests (`tests/pipeline/test_pipeline.py`) can trust their backend."""

from __future__ import annotations

import numpy as np
import pytest

from model_compression_toolkit.errors import GraphValidationError, ModelReadError
from tests.backends.contract import MLP, BackendContract, X
from tests.fixtures.numpy_backend import NumpyBackend, NumpyModel, add, dense, relu, scale

RNG = np.random.default_rng(3)


def mlp(w1, b1, w2, b2) -> NumpyModel:
    return NumpyModel({"x": 6}, [dense("d1", "x", w1, b1), relu("relu", "d1"), dense("d2", "relu", w2, b2)], ["d2"])


def residual() -> NumpyModel:
    """Two inputs, a skip connection, a dense layer without bias, two outputs."""
    w = lambda *shape: RNG.standard_normal(shape).astype(np.float32)  # noqa: E731
    layers = [
        dense("a", "x", w(5, 8), w(8)), relu("a_relu", "a"), dense("b", "a_relu", w(8, 8)),
        add("skip", "a", "b"), dense("c", "y", w(3, 8), w(8)), add("merge", "skip", "c"),
    ]  # fmt: skip
    return NumpyModel({"x": 5, "y": 3}, layers, ["merge", "a_relu"], name="residual")


MODELS = {
    "mlp": lambda: (mlp(*MLP), [X]),
    "residual": lambda: (residual(), [RNG.standard_normal((4, 5), np.float32), RNG.standard_normal((4, 3), np.float32)]),
}


class TestNumpyBackend(BackendContract):
    backend = NumpyBackend()

    def mlp(self, w1, b1, w2, b2):
        return mlp(w1, b1, w2, b2)

    def unsupported_model(self):
        model = NumpyModel({"x": 6}, [dense("d", "x", MLP[0], MLP[1]), scale("twice", "d", 2.0)], ["twice"])
        return model, [X], {"twice": "Scale"}

    def model_state(self, model: NumpyModel):
        return [(layer.name, layer.op, layer.inputs, {k: v.copy() for k, v in layer.weights.items()}) for layer in model.layers]

    @pytest.fixture(params=list(MODELS))
    def float_model(self, request):
        return MODELS[request.param]()


def test_a_model_wired_wrongly_raises_model_read_error():
    b = NumpyBackend()
    with pytest.raises(ModelReadError, match=r"'d2' reads \['nowhere'\]"):
        b.read(NumpyModel({"x": 6}, [dense("d2", "nowhere", MLP[2])], ["d2"]), [X])
    with pytest.raises(ModelReadError, match="kernel"):
        b.read(NumpyModel({"x": 6}, [dense("d", "x", MLP[2])], ["d"]), [X])
    with pytest.raises(ModelReadError, match="NumpyModel"):
        b.read(object(), [X])
    graph, _ = b.read(mlp(*MLP), [X])
    with pytest.raises(GraphValidationError, match="'nope'"):
        b.build(graph, quantized=False, extra_outputs=["nope"])
