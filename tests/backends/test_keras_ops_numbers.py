"""Activations and scale-and-shift chains written as ``keras.ops`` calls with numbers are
quantized once, at their output, as the same ops in PyTorch are (issue 30, point 5: the
PP-OCR and YOLOv8 files rebuilt in Keras by tests/zoo/real/onnx_keras.py).

The Keras reader records the numbers of an arithmetic ``keras.ops`` call among the node's
attributes by parameter name (``keras.ops.add(x, 3.0)`` -> ``{"x2": 3.0}``), where
`core.composites` reads them, as it reads PyTorch's ``x + 3`` (``{"b": 3}``). Before, they
stayed in the payload only: every op of ``x * relu6(x + 3) / 6`` got its own grid.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
keras = pytest.importorskip("keras")

import model_compression_toolkit as mct  # noqa: E402
from model_compression_toolkit.core.composites import find_composites  # noqa: E402
from model_compression_toolkit.keras import reader  # noqa: E402
from model_compression_toolkit.keras.ops import number_operands  # noqa: E402

NO_SIMILARITY = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))


def _hard_swish_model(fused: bool) -> keras.Model:
    """conv -> hard-swish, three times, in two spellings as ops (``x * relu6(x + 3) / 6`` and
    ``x * hard_sigmoid(x)``) or as ``Activation("hard_swish")`` (the reference), then a
    scale and shift by numbers (``x * 1.5 + 0.25``), then a conv."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((12, 12, 3))
    x = inputs
    for i in range(3):
        y = keras.layers.Conv2D(
            16, 3, padding="same", kernel_initializer=keras.initializers.RandomNormal(0, 1.0)
        )(x)
        if fused:
            x = keras.layers.Activation("hard_swish")(y)
        elif i % 2 == 0:
            x = keras.ops.divide(
                keras.ops.multiply(y, keras.layers.ReLU(max_value=6.0)(keras.ops.add(y, 3.0))), 6.0
            )
        else:
            x = keras.ops.multiply(y, keras.layers.Activation("hard_sigmoid")(y))
    x = keras.ops.add(keras.ops.multiply(x, 1.5), 0.25)
    outputs = keras.layers.Conv2D(4, 1)(x)
    return keras.Model(inputs, outputs)


def _batches(n: int = 3, seed: int = 0) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.uniform(-1, 1, (8, 12, 12, 3)).astype(np.float32)] for _ in range(n)]


def _quantizers(info) -> int:
    return sum(1 for layer in info.layers.values() if layer.activation)


def test_the_numbers_of_keras_ops_calls_are_node_attributes():
    inputs = keras.Input((4,))
    y = keras.ops.subtract(1.0, keras.ops.divide(keras.ops.add(inputs, 3.0), np.float32(6.0)))
    z = keras.ops.multiply(y, np.full((1, 4), 2.0, np.float32))  # a per-channel array: no number
    graph, _ = reader.read(keras.Model(inputs, [y, z]), [np.zeros((2, 4), np.float32)])
    attrs = {n.layer_type: n.attrs for n in graph.nodes() if n.layer_type in ("add", "divide", "subtract")}
    assert attrs == {"add": {"x2": 3.0}, "divide": {"x2": 6.0}, "subtract": {"x1": 1.0}}
    multiply = next(n for n in graph.nodes() if n.layer_type == "multiply")
    assert multiply.attrs == {}
    dense = keras.layers.Dense(2)
    dense(inputs)
    assert number_operands(dense, (1.0,), {}) == {}  # layers: their config says it all


def test_a_hard_swish_written_as_keras_ops_is_quantized_only_at_its_output():
    batches = _batches()
    graph, _ = reader.read(_hard_swish_model(fused=False), batches[0])
    functions = sorted(c.function for c in find_composites(graph))
    assert functions == ["affine", "hardswish", "hardswish", "hardswish"], functions
    q_model, info = mct.ptq.keras_post_training_quantization(
        _hard_swish_model(fused=False), lambda: iter(batches), core_config=NO_SIMILARITY
    )
    _, fused_info = mct.ptq.keras_post_training_quantization(
        _hard_swish_model(fused=True), lambda: iter(batches), core_config=NO_SIMILARITY
    )
    # as many grids as with Activation("hard_swish")
    assert _quantizers(info) == _quantizers(fused_info), (_quantizers(info), _quantizers(fused_info))
    inside = [n for n, layer in info.layers.items() if "written as ops" in str(layer.activation_float_reason)]
    # add, relu6, multiply (its output: the divide) / hard_sigmoid / add, relu6, multiply / x * 1.5
    assert len(inside) == 3 + 1 + 3 + 1, inside
    # and the quantized model still computes the float one, roughly
    x = _batches(1, seed=9)[0][0]
    f, q = np.asarray(_hard_swish_model(fused=False)(x)), np.asarray(q_model(x))
    sqnr = 10 * np.log10(np.sum(f.astype(np.float64) ** 2) / np.sum((f - q).astype(np.float64) ** 2))
    assert sqnr > 20.0, sqnr


def test_a_layer_norm_written_as_keras_ops_is_one_composite():
    """``(x - mean) / sqrt(mean((x - mean) ** 2) + eps)`` (PP-OCRv4's recognizer, as exported)."""
    inputs = keras.Input((10, 16))
    x = keras.layers.Dense(16)(inputs)
    d = keras.ops.subtract(x, keras.ops.mean(x, axis=-1, keepdims=True))
    var = keras.ops.mean(keras.ops.power(d, 2.0), axis=-1, keepdims=True)
    y = keras.ops.divide(d, keras.ops.sqrt(keras.ops.add(var, 1e-5)))
    outputs = keras.layers.Dense(4)(y)
    graph, _ = reader.read(keras.Model(inputs, outputs), [np.zeros((2, 10, 16), np.float32)])
    assert [c.function for c in find_composites(graph)] == ["layernorm"]
