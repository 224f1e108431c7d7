"""The Keras backend on real small models: the backend contract (`tests.backends.contract`)
on Keras models, and what only Keras does (layer kinds and kernel axes, nested models,
`.keras` round trips, layers shared between builds, subclassed and unbuilt models)."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
keras = pytest.importorskip("keras")
L = keras.layers

from model_compression_toolkit.core.calibration.quantizers import QuantizedWeights  # noqa: E402
from model_compression_toolkit.core.graph import OpKind  # noqa: E402
from model_compression_toolkit.core.preparation import fold_batch_norms, remove_no_ops  # noqa: E402
from model_compression_toolkit.errors import InputMismatchError, ModelReadError  # noqa: E402
from model_compression_toolkit.keras.backend import KerasBackend  # noqa: E402
from tests.backends.contract import MLP, BackendContract, X, quantize_mlp  # noqa: E402

B = KerasBackend()
RNG = np.random.default_rng(0)


def randomize(model: keras.Model) -> keras.Model:
    """Non-trivial weights everywhere (positive for variances), so that copying is tested."""
    for layer in model.layers:
        if layer.weights:
            layer.set_weights(
                [
                    RNG.uniform(0.5, 1.5, w.shape).astype("float32")
                    if "variance" in v.name
                    else RNG.normal(0, 0.5, w.shape).astype("float32")
                    for v, w in zip(layer.weights, layer.get_weights())
                ]
            )
    return model


def batch(*shape: int) -> np.ndarray:
    return RNG.normal(size=(2, *shape)).astype("float32")


def roundtrip(model: keras.Model, inputs: list[np.ndarray], atol: float = 1e-5):
    """Read, build in float, and check the outputs match; return the graph and warnings."""
    graph, warnings = B.read(model, inputs)
    rebuilt = B.build(graph, quantized=False)
    want, got = B.forward(model, inputs), B.forward(rebuilt, inputs)
    assert len(want) == len(got)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, atol=atol, rtol=1e-5)
    return graph, warnings


# ------------------------------------------------------------------------ models
def sequential_cnn(use_bias: bool = True) -> keras.Model:
    return randomize(
        keras.Sequential(
            [
                keras.Input((12, 12, 3)),
                L.Conv2D(4, 3, use_bias=use_bias, name="conv"),
                L.BatchNormalization(name="bn"),
                L.ReLU(name="relu"),
                L.MaxPooling2D(name="pool"),
                L.Flatten(name="flatten"),
                L.Dense(5, activation="softmax", name="fc"),
            ],
            name="cnn",
        )
    )


def residual_model() -> keras.Model:
    inp = keras.Input((16, 16, 3))
    x = L.Rescaling(1 / 255.0)(inp)
    c = L.Conv2D(8, 3, padding="same", activation="relu", name="conv")(x)
    d = L.DepthwiseConv2D(3, padding="same", name="dw")(c)
    s = L.SeparableConv2D(8, 3, padding="same", name="sep")(d)
    a = L.Activation("swish")(L.Add()([c, s]))
    lr = L.LeakyReLU(0.1)(a)
    p = L.Cropping2D(1)(L.ZeroPadding2D(1)(lr))
    t = L.MaxPooling2D(2)(L.Conv2DTranspose(4, 3, strides=2, padding="same", name="tconv")(p))
    u = L.UpSampling2D(2)(L.MaxPooling2D(2)(lr))
    cat = L.Concatenate(name="concatenate")([t, u])  # named: auto names count earlier models
    m = L.Multiply()([cat, cat])
    mx = L.Maximum()([L.Average()([cat, L.Subtract()([cat, m])]), cat])
    ln = L.LayerNormalization()(L.Dropout(0.3)(mx))
    r = L.Permute((2, 1))(L.Reshape((3, 4))(L.GlobalAveragePooling2D()(ln)))
    out = L.Dense(3, name="fc")(L.Flatten()(L.Conv1D(5, 2, name="conv1d")(r)))
    return randomize(keras.Model(inp, out, name="residual"))


def ops_model() -> keras.Model:
    inp = keras.Input((8, 8, 3))
    c = L.Conv2D(4, 3, padding="same", name="conv")(inp)
    y = keras.ops.relu(c)
    z = keras.ops.multiply(keras.ops.add(y, c), 0.5)
    z = keras.ops.concatenate([z, keras.ops.sigmoid(c)], axis=-1)
    return randomize(keras.Model(inp, L.GlobalAveragePooling2D()(z), name="with_ops"))


def nested_model() -> keras.Model:
    ii = keras.Input((8, 8, 4))
    h = L.ReLU(name="relu")(L.BatchNormalization(name="bn")(L.Conv2D(4, 3, padding="same", name="conv1")(ii)))
    inner = keras.Model(ii, h, name="inner")
    inp = keras.Input((8, 8, 3))
    x = L.Conv2D(4, 1, name="stem")(inp)
    x = inner(inner(x))  # called twice: two copies of its layers
    return randomize(keras.Model(inp, L.Dense(2, name="fc")(L.GlobalAveragePooling2D()(x)), name="outer"))


def two_in_two_out() -> keras.Model:
    a, b = keras.Input((6,), name="a"), keras.Input((4,), name="b")
    shared = L.Dense(5, name="shared")
    h = L.Concatenate()([shared(L.Dense(6)(b)), shared(a)])
    return randomize(keras.Model([a, b], [L.Dense(2, name="o1")(h), L.Dense(3, name="o2")(h)], name="two"))


@keras.saving.register_keras_serializable(package="mct_tests")
class ChannelScale(L.Layer):
    """A custom layer the backend does not know: kept in float, rebuilt from its config."""

    def __init__(self, factor: float = 2.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1],), initializer="ones")

    def call(self, x):
        return x * self.w * self.factor

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


def mlp(w1, b1, w2, b2) -> keras.Model:
    inp = keras.Input((6,))
    h = L.ReLU(name="relu")(L.Dense(4, name="d1")(inp))
    model = keras.Model(inp, L.Dense(3, name="d2")(h), name="mlp")
    model.get_layer("d1").set_weights([w1, b1])
    model.get_layer("d2").set_weights([w2, b2])
    return model


def nested_sequential() -> keras.Model:
    block = keras.Sequential([keras.Input((4,)), L.Dense(4, name="d"), L.ReLU(name="r")], name="block")
    mid_in = keras.Input((4,))
    mid = keras.Model(mid_in, block(mid_in), name="mid")  # two levels deep
    inp = keras.Input((4,))
    return randomize(keras.Model(inp, [mid(inp), L.Dense(2, name="fc")(inp)], name="top"))


MODELS = {
    "sequential_cnn": lambda: (sequential_cnn(), [batch(12, 12, 3)]),
    "residual": lambda: (residual_model(), [batch(16, 16, 3) * 100]),
    "ops": lambda: (ops_model(), [batch(8, 8, 3)]),
    "nested": lambda: (nested_model(), [batch(8, 8, 3)]),
    "nested_sequential": lambda: (nested_sequential(), [batch(4)]),
    "two_in_two_out": lambda: (two_in_two_out(), [batch(6), batch(4)]),
    "mlp": lambda: (randomize(mlp(*MLP)), [batch(6)]),
}


class TestKerasBackend(BackendContract):
    backend = B
    float_rtol = 1e-5

    def mlp(self, w1, b1, w2, b2):
        return mlp(w1, b1, w2, b2)

    def unsupported_model(self):
        inp = keras.Input((4, 4, 2))
        out = ChannelScale(3.0, name="scale")(L.Conv2D(2, 1, name="conv")(inp))
        return randomize(keras.Model(inp, out)), [batch(4, 4, 2)], {"scale": "ChannelScale"}

    def user_model(self):
        model = nested_model()
        model.get_layer("stem").trainable = False  # its flags must stay as they are
        return model, [batch(8, 8, 3)]

    def model_state(self, model):
        return {
            "weights": [w.copy() for w in model.get_weights()],
            "config": model.get_config(),
            "trainable": [layer.trainable for layer in model.layers],
        }

    @pytest.fixture(params=list(MODELS))
    def float_model(self, request):
        return MODELS[request.param]()


# ------------------------------------------------------------------------ reading
def test_sequential_cnn_reads_kinds():
    graph, warnings = B.read(sequential_cnn(), [batch(12, 12, 3)])
    assert warnings == []
    kinds = [n.kind for n in graph.nodes()]
    assert kinds == [
        OpKind.INPUT,
        OpKind.CONV,
        OpKind.BATCH_NORM,
        OpKind.ACTIVATION,
        OpKind.POOL,
        OpKind.RESHAPE,
        OpKind.DENSE,
    ]
    conv, bn, fc = graph.node("conv"), graph.node("bn"), graph.node("fc")
    assert conv.kernel_axes == {"kernel": (3,)} and set(conv.weights) == {"kernel", "bias"}
    assert conv.output_shapes == [(None, 10, 10, 4)] and conv.channel_axis == -1
    assert set(bn.weights) == {"gamma", "beta", "mean", "variance"} and bn.attrs["epsilon"] == pytest.approx(
        1e-3
    )
    assert fc.fused_activation == "softmax" and fc.kernel_axes == {"kernel": (1,)}
    assert graph.node("relu").attrs["function"] == "relu"
    assert graph.inputs == [graph.nodes()[0].name] and graph.outputs == [("fc", 0)]


def test_residual_model_with_many_layer_types():
    graph, warnings = B.read(residual_model(), [batch(16, 16, 3) * 100])
    assert warnings == []
    assert not graph.find([OpKind.UNKNOWN])
    assert graph.node("dw").kernel_axes == {"kernel": (2, 3)}
    assert graph.node("sep").kernel_axes == {"depthwise_kernel": (2, 3), "kernel": (3,)}
    assert (
        graph.node("tconv").kernel_axes == {"kernel": (2,)}
        and graph.node("tconv").kind == OpKind.CONV_TRANSPOSE
    )
    assert graph.node("conv1d").kernel_axes == {"kernel": (2,)}
    assert graph.node("conv").fused_activation == "relu"
    functions = {n.attrs["function"] for n in graph.find([OpKind.ACTIVATION])}
    assert functions == {"silu", "leaky_relu"}  # keras stores "swish" as "silu"
    kinds = {n.kind for n in graph.nodes()}
    assert {
        OpKind.ADD,
        OpKind.SUB,
        OpKind.MUL,
        OpKind.CONCAT,
        OpKind.ELEMENTWISE,
        OpKind.PAD,
        OpKind.RESIZE,
        OpKind.DROPOUT,
        OpKind.NORMALIZATION,
        OpKind.LAYER_NORM,
        OpKind.RESHAPE,
        OpKind.POOL,
    } <= kinds
    mul = graph.find([OpKind.MUL])[0]
    assert [(e.src, e.dst_index) for e in graph.in_edges(mul.name)] == [
        ("concatenate", 0),
        ("concatenate", 1),
    ]


def test_keras_ops_calls_become_nodes():
    graph, warnings = B.read(ops_model(), [batch(8, 8, 3)])
    assert warnings == []
    by_type = {n.layer_type: n for n in graph.nodes()}
    assert by_type["relu"].kind == OpKind.ACTIVATION and by_type["relu"].attrs["function"] == "relu"
    assert by_type["sigmoid"].attrs["function"] == "sigmoid"
    assert by_type["add"].kind == OpKind.ADD and by_type["multiply"].kind == OpKind.MUL
    assert by_type["concatenate"].kind == OpKind.CONCAT and len(graph.in_edges(by_type["add"].name)) == 2


def test_nested_functional_model_is_flattened():
    graph, _ = B.read(nested_model(), [batch(8, 8, 3)])
    names = [n.name for n in graph.nodes()]
    assert {"inner/conv1", "inner/bn", "inner/relu", "inner_1/conv1", "inner_1/relu"} <= set(names)
    assert "inner" not in names
    assert [e.src for e in graph.in_edges("inner_1/conv1")] == ["inner/relu"]


def test_nested_sequential_and_nested_output():
    graph, _ = B.read(nested_sequential(), [batch(4)])
    assert graph.outputs == [("mid/block/r", 0), ("fc", 0)]


def test_two_inputs_two_outputs_and_shared_layer():
    model = two_in_two_out()
    graph, _ = B.read(model, [batch(6), batch(4)])
    assert graph.inputs == ["a", "b"] and graph.outputs == [("o1", 0), ("o2", 0)]
    assert {"shared", "shared_1"} <= {n.name for n in graph.nodes()}
    assert B.input_count(model) == 2 and B.expected_input_shapes(model) == [(None, 6), (None, 4)]


def test_unbuilt_sequential_is_refused_left_unbuilt_and_read_once_built():
    """An unbuilt Sequential has no weights: building it would give the user's model random
    ones. The error says how to build it, and the model is left as it was."""
    import model_compression_toolkit as mct

    model = keras.Sequential([L.Dense(3, name="d"), L.ReLU(name="r")])
    x = batch(5)
    with pytest.raises(ModelReadError, match=r"not built yet.*model\.build\(\(None, 5\)\)"):
        mct.ptq.keras_post_training_quantization(model, lambda: iter([[x]]))
    assert not model.built and not model.weights
    model.build((None, 5))  # the way out the message gives
    roundtrip(model, [x])


def test_folded_batch_norm_and_removed_dropout_build():
    model = sequential_cnn(use_bias=False)
    x = [batch(12, 12, 3)]
    graph, _ = B.read(model, x)
    remove_no_ops(graph)
    fold_batch_norms(graph)
    assert "bn" not in graph and "bias" in graph.node("conv").weights
    np.testing.assert_allclose(B.forward(B.build(graph, False), x)[0], B.forward(model, x)[0], atol=1e-5)


# ------------------------------------------------------------------------ errors
def test_subclassed_model_is_rejected():
    class Sub(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = L.Dense(2)

        def call(self, x):
            return self.d(x)

    model, x = Sub(), batch(3)
    model(x)
    with pytest.raises(ModelReadError, match="Functional or Sequential.*model.call"):
        B.read(model, [x])
    inputs = keras.Input((3,))  # the way out the message gives
    graph, _ = roundtrip(keras.Model(inputs, model.call(inputs)), [x])
    assert graph.find([OpKind.DENSE])


def test_channels_first_batch_names_both_shapes():
    with pytest.raises(InputMismatchError, match=r"\(None, 12, 12, 3\).*\(2, 3, 12, 12\).*channels-last"):
        B.read(sequential_cnn(), [batch(3, 12, 12)])


# ------------------------------------------------------------------------ quantized builds
def read_quantized_mlp():
    """The contract's MLP, read and given its grids (`tests.backends.contract.quantize_mlp`)."""
    graph, _ = B.read(mlp(*MLP), [X])
    quantize_mlp(graph)
    return graph


def test_quantized_model_saves_and_loads_bit_identical(tmp_path):
    graph = read_quantized_mlp()
    quantized = B.build(graph, quantized=True)
    assert "relu_activation_quant" in [layer.name for layer in quantized.layers]
    path = tmp_path / "q.keras"
    quantized.save(path)
    loaded = keras.models.load_model(path)
    assert np.array_equal(B.forward(loaded, [X])[0], B.forward(quantized, [X])[0])


def test_a_build_shares_the_layers_of_a_model_built_from_the_same_graph_and_weights():
    """The similarity analysis's quantized model is wired over the returned model's layers
    (no layer made, no weight copied again; the contract checks it computes the same); a
    model built from other weights, or in float, is not shared."""
    graph = read_quantized_mlp()
    weights = QuantizedWeights(graph)
    q_model = B.build(graph, True, weights=weights)
    tapped = B.build(graph, True, extra_outputs=["relu"], weights=weights, tap=lambda n, v: None, share=q_model)
    assert {id(layer) for layer in tapped.model.layers} <= {id(layer) for layer in q_model.layers}
    own = {id(layer) for layer in q_model.layers}
    for other in (B.build(graph, True, weights=QuantizedWeights(graph), share=q_model), B.build(graph, False, share=q_model)):
        assert not {id(layer) for layer in other.layers} & own


# ------------------------------------------------------------------------ real architectures
@pytest.mark.slow
@pytest.mark.parametrize("name", ["MobileNetV2", "ResNet50", "EfficientNetB0", "DenseNet121", "ConvNeXtTiny"])
def test_applications_read_and_rebuild(name):
    start = time.time()
    model = getattr(keras.applications, name)(weights=None, input_shape=(32, 32, 3), classes=10)
    x = [RNG.uniform(0, 255, (2, 32, 32, 3)).astype("float32")]
    graph, warnings = B.read(model, x)
    rebuilt = B.build(graph, quantized=False)
    want, got = B.forward(model, x)[0], B.forward(rebuilt, x)[0]
    np.testing.assert_allclose(got, want, atol=1e-4 * max(1.0, float(np.abs(want).max())))
    unknown = sorted({n.layer_type for n in graph.find([OpKind.UNKNOWN])})
    print(f"{name}: {len(graph)} nodes, unknown layer types {unknown}, {time.time() - start:.1f}s")
    assert len(warnings) == len({n.layer_type for n in graph.find([OpKind.UNKNOWN])})  # one per type
