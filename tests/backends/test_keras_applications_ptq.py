"""Keras-only: real keras.applications architectures quantize with logging, and quantized
models survive a `.keras` round trip bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.observers.stage_view import stage_run
from model_compression_toolkit.pipeline.events import STAGES
from tests.fixtures.digits import digits_data, representative_dataset
from tests.fixtures.tb import load, run_folders

keras = pytest.importorskip("keras")

APPLICATIONS = {
    "MobileNetV2": lambda: keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3), classes=10),
    "ResNet50": lambda: keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10),
    "EfficientNetB0": lambda: keras.applications.EfficientNetB0(weights=None, input_shape=(32, 32, 3), classes=10),
    "DenseNet121": lambda: keras.applications.DenseNet121(weights=None, input_shape=(32, 32, 3), classes=10),
    "ConvNeXtTiny": lambda: keras.applications.ConvNeXtTiny(weights=None, input_shape=(32, 32, 3), classes=10),
}
NO_SIMILARITY = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(APPLICATIONS))
def test_application_quantizes_with_every_stage_logged(name, tmp_path):
    model = APPLICATIONS[name]()
    x = np.random.default_rng(0).uniform(0, 255, (4, 32, 32, 3)).astype(np.float32)
    mct.set_log_folder(tmp_path)
    q_model, info = mct.ptq.keras_post_training_quantization(model, representative_dataset(x, 2, 2), NO_SIMILARITY)
    (run,) = run_folders(tmp_path)
    for stage in STAGES:
        acc = load(run / stage_run(stage))
        names = {n.name for n in acc.Graph().node}
        assert len(names) >= 0.8 * len(info.layers), stage
        assert acc.RunMetadata("Resources").step_stats.dev_stats
    assert load(run / stage_run("thresholds_selection")).Tags()["histograms"]
    float_out, quant_out = np.asarray(model(x, training=False)), np.asarray(q_model(x, training=False))
    assert quant_out.shape == float_out.shape and np.isfinite(quant_out).all()
    assert sum(1 for layer in info.layers.values() if layer.weights) >= 10


def test_quantized_digits_model_saves_and_loads_bit_identical(trained_digits_keras, tmp_path):
    model, x_train = trained_digits_keras
    q_model, _ = mct.ptq.keras_post_training_quantization(model, representative_dataset(x_train, 2, 16))
    path = tmp_path / "q.keras"
    q_model.save(path)
    loaded = keras.models.load_model(path)
    x = x_train[:32]
    np.testing.assert_array_equal(np.asarray(q_model(x, training=False)), np.asarray(loaded(x, training=False)))


@pytest.fixture
def trained_digits_keras():
    from tests.fixtures.trained import load_trained

    return load_trained("keras"), digits_data(channels_last=True)[0]
