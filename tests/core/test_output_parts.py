"""A detection head's output joins box coordinates in pixels and class scores in 0-1 on one
grid: the report measures the harm where it lands (the scores), names the concatenation as
the cause with its part, and its fix gives the scores back.

Over the whole output the boxes carry the signal power, so an output SQNR over the whole
tensor stays high while every score rounds to one of two values (a real YOLO head at 8
bits keeps 29 % of its float detections). The weights are constructed, the same in both
frameworks, so the margins hold on any CPU.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.core.similarity.parts import is_probability, sqnr_db

# the model's output on one grid, as an integer-only target or MCT puts it: the case these tests judge
ANALYZE = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=True), quantize_outputs=True)
BOXES, CLASSES, FEATURES = 4, 6, 16


def _weights(seed: int = 0) -> dict[str, np.ndarray]:
    """Features from a 3x3 conv and ReLU; boxes 0-320 pixels; class logits of std ~3."""
    rng = np.random.default_rng(seed)
    w = {
        "features": rng.normal(0, 0.4, (FEATURES, 3, 3, 3)).astype(np.float32),
        "features_b": np.zeros(FEATURES, np.float32),
        "box": rng.uniform(0, 45.0, (BOXES, FEATURES, 1, 1)).astype(np.float32),
        "box_b": np.full(BOXES, 8.0, np.float32),
        "cls": rng.normal(0, 1.2, (CLASSES, FEATURES, 1, 1)).astype(np.float32),
        "cls_b": np.full(CLASSES, -1.0, np.float32),
    }
    return w


def _data(channels_last: bool) -> np.ndarray:
    x = np.random.default_rng(1).uniform(0, 1, (64, 3, 12, 12)).astype(np.float32)
    return x.transpose(0, 2, 3, 1).copy() if channels_last else x


def _torch_head():
    import torch
    from torch import nn

    class DetectionHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Conv2d(3, FEATURES, 3, padding=1)
            self.act = nn.ReLU()
            self.box = nn.Conv2d(FEATURES, BOXES, 1)
            self.cls = nn.Conv2d(FEATURES, CLASSES, 1)

        def forward(self, x):
            f = self.act(self.features(x))
            return torch.cat([self.box(f), torch.sigmoid(self.cls(f))], dim=1)

    model = DetectionHead().eval()
    w = _weights()
    with torch.no_grad():
        for name in ("features", "box", "cls"):
            getattr(model, name).weight.copy_(torch.from_numpy(w[name]))
            getattr(model, name).bias.copy_(torch.from_numpy(w[name + "_b"]))
    return model


def _keras_head():
    import keras

    w = _weights()
    x = keras.Input((12, 12, 3))
    f = keras.layers.Conv2D(FEATURES, 3, padding="same", name="features")(x)
    f = keras.layers.ReLU(name="act")(f)
    box = keras.layers.Conv2D(BOXES, 1, name="box")(f)
    cls = keras.layers.Activation("sigmoid", name="scores")(keras.layers.Conv2D(CLASSES, 1, name="cls")(f))
    model = keras.Model(x, keras.layers.Concatenate(axis=-1, name="cat")([box, cls]))
    for name in ("features", "box", "cls"):
        model.get_layer(name).set_weights([w[name].transpose(2, 3, 1, 0), w[name + "_b"]])
    return model


def _predict(fw, model, x: np.ndarray) -> np.ndarray:
    """Outputs with channels on axis 1 in both frameworks."""
    y = fw.predict(model)(x) if fw.name == "pytorch" else np.asarray(model(x, training=False))
    return np.asarray(y) if fw.name == "pytorch" else np.moveaxis(np.asarray(y), -1, 1)


def _scores(y: np.ndarray) -> np.ndarray:
    return y[:, BOXES:]


def _recall(reference: np.ndarray, other: np.ndarray, confidence: float = 0.25) -> float:
    """The share of the float detections (a class score over YOLO's default confidence
    threshold at a position) found again."""
    found = reference >= confidence
    return float((other[found] >= confidence).mean()) if found.any() else 1.0


@pytest.fixture
def head(fw):
    model = _torch_head() if fw.name == "pytorch" else _keras_head()
    return model, _data(fw.channels_last)


def test_by_default_a_detection_head_keeps_its_scores_as_its_output_is_not_rounded(fw, head):
    """On a target that runs float the head's one output is handed on unrounded (as pt2e and
    NNCF do): the scores and the boxes keep their own grids, and the scores their decisions."""
    model, x = head
    q_model, info = fw.ptq(model, lambda: iter([[x[i * 16 : (i + 1) * 16]] for i in range(4)]))
    y_float, y_q = _predict(fw, model, x), _predict(fw, q_model, x)
    assert sqnr_db([_scores(y_float)], [_scores(y_q)]) > 25
    assert _recall(_scores(y_float), _scores(y_q)) >= 0.97
    (cat,) = [layer for layer in info.layers.values() if layer.kind == "concat"]
    assert cat.activation is None and "model output" in cat.activation_float_reason


def test_a_detection_head_is_judged_on_its_scores_not_its_boxes(fw, head):
    model, x = head

    def gen():
        for i in range(4):
            yield [x[i * 16 : (i + 1) * 16]]

    q_model, info = fw.ptq(model, gen, core_config=ANALYZE)
    y_float, y_q = _predict(fw, model, x), _predict(fw, q_model, x)
    assert 200 < y_float[:, :BOXES].max() < 400 and _scores(y_float).max() <= 1.0  # the head is as described
    # the damage is real and hides over the whole output
    assert sqnr_db([y_float], [y_q]) > 25
    assert sqnr_db([_scores(y_float)], [_scores(y_q)]) < 12
    assert _recall(_scores(y_float), _scores(y_q)) < 0.8

    report = info.similarity
    first = report.quantizers[0]
    assert first.kind == "activation" and first.cause, report.summary()
    assert first.layer_type.lower().startswith(("cat", "concat")), report.summary()
    assert first.output_sqnr_db < 12 and first.output_whole_db > 25
    assert f"channels {BOXES}-{BOXES + CLASSES - 1}" in first.output_part, first.output_part
    assert first.output_part_distinct <= 4
    assert first.input_range_spread > 100
    assert "distinct values" in report.summary() and first.output_part in report.summary()

    fix = report.suggested_fix()
    assert fix.activation_bits == {first.name: 16} and not fix.activations, fix.code()  # integer, not float
    fixed, _ = fw.ptq(model, gen, core_config=dataclasses.replace(ANALYZE, keep_float=fix))
    y_fixed = _predict(fw, fixed, x)
    assert sqnr_db([_scores(y_float)], [_scores(y_fixed)]) > 25
    assert _recall(_scores(y_float), _scores(y_fixed)) >= 0.97

    # the snippet the report prints pastes as it is and quantizes the same
    scope: dict = {}
    exec(fix.code(), scope)
    pasted, _ = fw.ptq(model, gen, core_config=scope["core_config"])
    np.testing.assert_allclose(_predict(fw, pasted, x), y_fixed, rtol=0, atol=1e-4)


def _deep_residual_mlp(blocks: int = 48, width: int = 16):
    """Residual blocks with hard-swish and an RMS norm written as ONNX writes them (add, clip,
    mul, div, sqrt...): every op its own quantizer, as in a converted OCR network."""
    import torch
    from torch import nn

    class Deep(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp = nn.Linear(8, width)
            self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in range(blocks))
            self.out = nn.Linear(width, 4)

        def forward(self, x):
            x = self.inp(x)
            for block in self.blocks:
                h = block(x)
                x = x + h * torch.clamp(h + 3, 0, 6) / 6
                x = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5)
            return self.out(x)

    model = Deep().eval()
    rng = np.random.default_rng(0)
    with torch.no_grad():
        for layer in [model.inp, *model.blocks, model.out]:
            fan_in = layer.weight.shape[1]
            layer.weight.copy_(torch.from_numpy(rng.normal(0, 1 / np.sqrt(fan_in), layer.weight.shape).astype(np.float32)))
            layer.bias.zero_()
    return model


def test_a_loss_spread_over_hundreds_of_quantizers_is_said_and_its_setting_restores_it():
    """No quantizer alone damages the output, all of them together do (4-bit activations,
    each quantizer keeping 20 dB or more): the report says the loss is spread, where it
    accumulates, and suggests the cheapest setting it measured to restore it (every
    activation at 8 bits), which does."""
    torch = pytest.importorskip("torch")
    model = _deep_residual_mlp()
    x = np.random.default_rng(0).normal(0, 1, (64, 8)).astype(np.float32)

    def gen():
        for i in range(4):
            yield [x[i * 16 : (i + 1) * 16]]

    config = dataclasses.replace(ANALYZE, quantization_config=mct.core.QuantizationConfig(activation_n_bits=4))
    q_model, info = mct.ptq.pytorch_post_training_quantization(model, gen, core_config=config)
    report, fix = info.similarity, info.similarity.suggested_fix()
    assert report.causes() == [], report.summary()
    assert fix.spread is not None and "the loss is spread" in report.summary(), report.summary()
    assert "every activation at 8 bits" in fix.spread and "every weight at 16 bits" in fix.spread
    assert fix.activation_n_bits == 8 and not fix.activations and not fix.weights, fix.code()
    assert fix.output_sqnr_db_after >= 30 > 20 > fix.output_sqnr_db_before, fix.summary()

    with torch.no_grad():
        run = lambda m: m(torch.from_numpy(x)).numpy()  # noqa: E731
        y_float, y_q = run(model), run(q_model)
        fixed, _ = mct.ptq.pytorch_post_training_quantization(model, gen, core_config=fix.apply(config))
        y_fixed = run(fixed)
    assert sqnr_db([y_float], [y_fixed]) > sqnr_db([y_float], [y_q]) + 15


@pytest.mark.parametrize("model_name", ["head", "digits"])
def test_a_quantizer_run_from_its_layer_on_gives_the_impact_of_the_whole_model(fw, head, trained_digits, model_name):
    """The output impact of one quantizer, run only from its layer on (fed the float values
    that cross into that part), equals the whole variant's, for every quantizer (outputs
    and weights) of a model with a concatenation and of a CNN."""
    from model_compression_toolkit.core.similarity.causes import ImpactProbe, QuantizerEntry, isolate
    from model_compression_toolkit.pipeline.backends import get_backend
    from model_compression_toolkit.pipeline.session import produced_graph

    model, x = head if model_name == "head" else (trained_digits[0], trained_digits[1][:32])
    q_model, _ = fw.ptq(model, lambda: iter([[x[:16]], [x[16:32]]]))
    graph, backend = produced_graph(q_model), get_backend(model)
    probe = ImpactProbe(backend, graph, [[x[:8]], [x[8:16]]])
    entries = [QuantizerEntry(n.name, "activation", n.layer_type, 8, 0.0) for n in graph.nodes() if n.quant.activation]
    entries += [QuantizerEntry(n.name, "weights", n.layer_type, 8, 0.0) for n in graph.nodes() if n.quant.weights]
    probe.prepare([e.name for e in entries])
    assert len(probe.cuts) >= len({e.name for e in entries}) // 2  # most run on a part of the model
    for entry in entries:
        variant = isolate(graph, entry)
        whole, cut = probe.impact(variant), probe.impact(variant, at=entry.name)
        assert abs(whole.sqnr_db - cut.sqnr_db) < 0.05, (entry.name, entry.kind, whole, cut)
        assert whole.part == cut.part


@pytest.mark.parametrize("between", [OpKind.RESHAPE, OpKind.IDENTITY])
def test_scores_laid_out_by_a_reshape_or_transpose_still_hold_probabilities(between):
    """A detector's scores reach its output as (batch, anchors, classes) through a reshape or
    a transpose (PicoDet's ONNX file): they are still the sigmoid's probabilities, judged on
    the values a decision reads; a reshape of logits is not."""

    for function, expected in (("sigmoid", True), ("relu", False)):
        g = Graph("scores", "pytorch")
        g.add_node(Node("x", OpKind.INPUT, "Input"))
        g.add_node(Node("act", OpKind.ACTIVATION, function, attrs={"function": function}))
        g.add_node(Node("layout", between, "permute"))
        g.add_edge("x", "act")
        g.add_edge("act", "layout")
        g.outputs = [("layout", 0)]
        assert is_probability(g, "layout") is expected, (function, between)
