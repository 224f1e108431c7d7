"""A node with two outputs (``keras.ops.split``) among a build's extra outputs gives one
value, as every caller zips the values with the names (issue 30, point 5: YOLOv8's C2f
blocks split a conv's output in two; nudenet in Keras failed in the similarity analysis)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
keras = pytest.importorskip("keras")

import model_compression_toolkit as mct  # noqa: E402
from model_compression_toolkit.keras import builder, reader  # noqa: E402


def _split_model() -> keras.Model:
    """YOLOv8's C2f block in small: conv -> split in two -> conv on the second half -> concat of
    all three -> conv. A node with two outputs, the first of them not used by the next conv."""
    keras.utils.set_random_seed(1)
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(8, 1, activation="relu")(inputs)
    first, second = keras.ops.split(x, [4], axis=-1)
    y = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(second)
    z = keras.layers.Concatenate()([first, second, y])
    return keras.Model(inputs, keras.layers.Conv2D(6, 1)(z))


def test_a_node_with_two_outputs_among_the_extra_outputs_gives_one_value(tmp_path):
    """The float model is built with extra outputs, one value per named node (the session
    zips them with the names): a two-output split used to give both, shifting every later
    value by one -- the similarity analysis then fed a 4-channel tensor to an 8-channel
    placeholder (nudenet in Keras: 'expected shape=(None, 80, 80, 32), found (5, 80, 80, 16)')."""
    rng = np.random.default_rng(0)
    batches = [[rng.uniform(-1, 1, (8, 8, 8, 3)).astype(np.float32)] for _ in range(2)]
    graph, _ = reader.read(_split_model(), batches[0])
    split = next(n.name for n in graph.nodes() if n.layer_type == "split")
    last = graph.outputs[0][0]
    model = builder.build(graph, quantized=False, extra_outputs=[split, last])
    values = model(batches[0][0])
    assert len(values) == 3  # the graph's output, then one value per name
    np.testing.assert_allclose(np.asarray(values[2]), np.asarray(values[0]), rtol=1e-6)
    debug = mct.core.DebugConfig(analyze_similarity=True, similarity_samples=4)
    _, info = mct.ptq.keras_post_training_quantization(
        _split_model(), lambda: iter(batches), core_config=mct.core.CoreConfig(debug_config=debug)
    )
    assert info.similarity is not None
