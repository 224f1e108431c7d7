"""The ONNX files of the real zoo rebuilt in Keras (tests/zoo/real/onnx_keras.py) compute
what onnxruntime computes on the zoo's own data, and are made of public layers and
``keras.ops`` calls only (issue 30, point 5).

Measured (2026-11-27, x86_64 with AVX-512, TensorFlow's oneDNN against onnxruntime's MLAS):
the largest difference over the largest output is 1e-6 for nudenet (boxes in pixels up to
317), 4e-6 for ppocr_rec, 2.5e-5 for ppocr_det (its probability map, through 62 convs),
3e-11 for ppocr_cls; `RELATIVE` leaves a factor of 40 for other CPUs' summation orders. A
wrong axis or layout gives differences of the order of the outputs themselves.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.zoo.real import data
from tests.zoo.real.wheels import missing

pytestmark = [pytest.mark.slow]

RELATIVE = 1e-3  # max |keras - onnxruntime| / max |onnxruntime|, per output


def _images(name: str) -> np.ndarray:
    """A few NCHW inputs of the case's evaluation data."""
    if name == "nudenet":
        return data.detector_images(3, seed=0)
    if name == "ppocr_rec":
        return data.text_lines(4, seed=0)[0]
    if name == "ppocr_det":
        return np.stack([p.image for p in data.text_pages(2, seed=2)])
    return data.oriented_lines(4, seed=1)[0]


SHAPES = {
    "nudenet": (1, 3, 320, 320),
    "ppocr_rec": (1, 3, 48, 320),
    "ppocr_det": (1, 3, 320, 320),
    "ppocr_cls": (1, 3, 48, 192),
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_the_keras_model_computes_what_onnxruntime_does(name):
    if missing(name):
        pytest.skip(f"wheel not installed: {', '.join(missing(name))} (make install)")
    pytest.importorskip("onnxruntime")
    keras = pytest.importorskip("keras")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tests.zoo.real.onnx_keras import onnx_outputs, to_keras

    model = to_keras(name, SHAPES[name])
    x = _images(name)
    expected = onnx_outputs(name, x)
    got = model(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), training=False)
    got = [np.asarray(g) for g in (got if isinstance(got, (list, tuple)) else [got])]
    assert len(got) == len(expected)
    for e, g in zip(expected, got):
        g = g.transpose(0, 3, 1, 2) if g.ndim == 4 else g  # a 4-D output is NHWC
        assert g.shape == e.shape
        scale = float(np.abs(e).max())
        assert scale > 0
        assert float(np.abs(g - e).max()) <= RELATIVE * scale, (name, float(np.abs(g - e).max()), scale)
    # public layers and keras.ops only: no Lambda, nothing Keras cannot rebuild from its config
    assert not [layer for layer in model.layers if isinstance(layer, keras.layers.Lambda)]
    rebuilt = keras.Model.from_config(model.get_config())
    assert len(rebuilt.layers) == len(model.layers)
    # and the library's reader knows every one of them (none kept float for want of a rule)
    from model_compression_toolkit.core.graph import OpKind
    from model_compression_toolkit.keras import reader

    graph, unsupported = reader.read(model, [np.ascontiguousarray(x[:1].transpose(0, 2, 3, 1))])
    assert not unsupported, unsupported
    assert not [n.name for n in graph.nodes() if n.kind == OpKind.UNKNOWN]
