"""Keras models that take or return dicts, and composite layers read as their parts."""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.core.graph import OpKind
from model_compression_toolkit.keras.ops import einsum_axes

keras = pytest.importorskip("keras")
NO_SIMILARITY = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))


def _dict_model():
    keras.utils.set_random_seed(0)
    image = keras.Input((8, 8, 3), name="image")
    extra = keras.Input((4,), name="extra")
    features = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3, activation="relu")(image))
    joined = keras.layers.Concatenate()([features, keras.layers.Dense(4)(extra)])
    return keras.Model(
        {"image": image, "extra": extra},
        {"logits": keras.layers.Dense(3)(joined), "features": features},
    )


def test_a_model_taking_and_returning_dicts_keeps_both_structures():
    model = _dict_model()
    rng = np.random.default_rng(0)
    batches = [
        {"extra": rng.standard_normal((4, 4)).astype(np.float32), "image": rng.standard_normal((4, 8, 8, 3))}
        for _ in range(2)
    ]
    q_model, info = mct.ptq.keras_post_training_quantization(model, lambda: iter(batches), NO_SIMILARITY)
    assert info.unsupported_layers == []
    x = {k: np.asarray(v, np.float32) for k, v in batches[0].items()}
    want, got = model(x, training=False), q_model(x, training=False)
    assert isinstance(got, dict) and sorted(got) == sorted(want) == ["features", "logits"]
    for key in want:
        np.testing.assert_allclose(np.asarray(got[key]), np.asarray(want[key]), atol=0.05)


def test_multi_head_attention_is_read_as_its_projections_and_products():
    keras.utils.set_random_seed(0)
    x = keras.Input((6, 16))
    y = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8, name="mha")(x, x)
    model = keras.Model(x, keras.layers.Dense(4)(keras.layers.Add()([x, y])))
    batches = [[np.random.default_rng(i).standard_normal((4, 6, 16)).astype(np.float32)] for i in range(2)]
    q_model, info = mct.ptq.keras_post_training_quantization(model, lambda: iter(batches), NO_SIMILARITY)
    assert info.unsupported_layers == []
    query = info.layers["mha/query"]
    assert query.layer_type == "EinsumDense" and query.weights["kernel"]["channel_axes"] == [1, 2]
    # Keras computes the attention with ops.dot_product_attention, or with two einsums
    kinds = (OpKind.MATMUL.value, OpKind.ATTENTION.value)
    products = [n for n, layer in info.layers.items() if layer.kind in kinds]
    assert products and all(info.layers[n].activation is not None for n in products)
    want, got = np.asarray(model(batches[0][0])), np.asarray(q_model(batches[0][0]))
    cosine = float((want * got).sum() / (np.linalg.norm(want) * np.linalg.norm(got)))
    assert cosine > 0.999


@pytest.mark.parametrize(
    "equation, axes",
    [("abc,cd->abd", ((1,), (0,))), ("abc,cde->abde", ((1, 2), (0,))), ("abcd,cde->abe", ((2,), (0, 1)))],
)
def test_an_einsum_dense_kernel_is_quantized_along_the_axes_its_output_keeps(equation, axes):
    assert einsum_axes(equation) == axes
