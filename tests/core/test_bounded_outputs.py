"""A probability output (a sigmoid's or a softmax's) is judged on the values a decision reads.

A text detector's probability map is mostly background, probabilities of a few thousandths
that no threshold ever reads; over the whole map their noise outweighs the few values that
decide anything, so a healthy map can show an output SQNR of a few dB. The report judges
such an output on the elements whose float or quantized value reaches 0.05
(`core.similarity.parts.DECISION_LEVEL`): a map whose decisions do not change gets no
cause, one whose small probabilities are wiped out does.

The model is the same in both frameworks: the input holds the logits, a 1x1 convolution
(weight 1) and a sigmoid make the map; 4-bit activations make the grids coarse on purpose.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.core.similarity.causes import CAUSE_DB, SKIP_MARGIN_DB
from model_compression_toolkit.core.similarity.parts import (
    DECISION_LEVEL,
    decision_sqnr_db,
    measure,
    output_parts,
    sqnr_db,
)
from model_compression_toolkit.observers.similarity_view import causes_markdown

SIZE = 16
CONFIG = mct.core.CoreConfig(
    quantize_outputs=True,  # the logits map on one grid: what these tests judge
    quantization_config=mct.core.QuantizationConfig(activation_n_bits=4),
    debug_config=mct.core.DebugConfig(analyze_similarity=True),
)


def _frames(kind: str, count: int = 32, seed: int = 0) -> np.ndarray:
    """Logit maps ``(N, 1, SIZE, SIZE)``: background at -6 to -4.5 (probabilities under
    0.011). ``"clear"``: every other frame has a 3x3 object at +4 (probability 0.98), the
    others are background only. ``"weak"``: every frame has a 3x3 object of weak
    probabilities (0.1 to 0.4, logits -2.2 to -0.4) and a margin of logits at -60 (a masked
    border), which stretches the grid of the logits until the weak ones round away."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-6.0, -4.5, (count, 1, SIZE, SIZE))
    for i in range(count):
        r, c = rng.integers(4, SIZE - 3, 2)
        if kind == "clear" and i % 2 == 0:
            x[i, 0, r : r + 3, c : c + 3] = 4.0
        elif kind == "weak":
            x[i, 0, r : r + 3, c : c + 3] = rng.uniform(-2.2, -0.4, (3, 3))
            x[i, 0, :4] = -60.0
    return x.astype(np.float32)


def _model(fw):
    if fw.name == "pytorch":
        import torch
        from torch import nn

        class ProbabilityMap(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.conv = nn.Conv2d(1, 1, 1)

            def forward(self, x):
                return torch.sigmoid(self.conv(x))

        model = ProbabilityMap().eval()
        with torch.no_grad():
            model.conv.weight.fill_(1.0)
            model.conv.bias.zero_()
        return model
    import keras

    x = keras.Input((SIZE, SIZE, 1), name="logits")
    conv = keras.layers.Conv2D(1, 1, name="conv")
    model = keras.Model(x, keras.layers.Activation("sigmoid", name="map")(conv(x)))
    conv.set_weights([np.ones((1, 1, 1, 1), np.float32), np.zeros(1, np.float32)])
    return model


def _run(fw, model, x: np.ndarray) -> np.ndarray:
    """The map, channels on axis 1, for ``x`` given channels on axis 1."""
    if fw.name == "pytorch":
        return fw.predict(model)(x)
    return np.moveaxis(np.asarray(model(np.moveaxis(x, 1, -1), training=False)), -1, 1)


def _calibration(fw, x: np.ndarray):
    data = x if fw.name == "pytorch" else np.moveaxis(x, 1, -1).copy()
    return lambda: iter([[data[:16]], [data[16:]]])


def _quantize(fw, kind: str, keep_float=()):
    model, x = _model(fw), _frames(kind)
    config = dataclasses.replace(CONFIG, keep_float=keep_float)
    q_model, info = fw.ptq(model, _calibration(fw, x), core_config=config)
    return _run(fw, model, x), _run(fw, q_model, x), info.similarity


def _flips(y_float: np.ndarray, y_q: np.ndarray, threshold: float) -> float:
    return float(np.mean((y_float >= threshold) != (y_q >= threshold)))


def test_a_map_whose_decisions_stay_is_no_cause_however_its_background_moves(fw):
    y_float, y_q, report = _quantize(fw, "clear")
    # the whole map says damage: the background rounds to 0, and frames without an object
    # are nothing but background
    assert sqnr_db([y_float], [y_q]) < 10
    # no decision changes, at any threshold a user would set
    for threshold in (0.1, 0.3, 0.5):
        assert _flips(y_float, y_q, threshold) == 0.0, threshold
    assert report.causes() == [], report.summary()
    # read on the decisions, the quantized model whole is over the cause bar, so no quantizer
    # alone can be under it: none runs alone (`causes.measure_impacts`), and the report says why
    assert report.quantized_output_db is not None and report.quantized_output_db >= CAUSE_DB + SKIP_MARGIN_DB
    measured = [q for q in report.quantizers if q.output_sqnr_db is not None]
    assert report.impacts_skipped > 0 and not measured, report.summary()
    assert "not run alone" in report.summary() and "not run alone" in causes_markdown(report)
    # the figure says how it counts: on the values a decision reads, not every value of the map
    assert report.quantized_output_read_as == "decision"
    assert "probabilities on the values a decision reads" in report.summary()


def test_a_map_whose_weak_probabilities_are_wiped_out_is_a_cause(fw):
    y_float, y_q, report = _quantize(fw, "weak")
    assert _flips(y_float, y_q, 0.3) > 0.01  # the weak objects' decisions change
    causes = report.causes()
    assert causes, report.summary()
    first = causes[0]
    assert first.kind == "activation" and first.output_probability and first.output_sqnr_db < 10, (
        report.summary()
    )
    assert "probabilities >= 0.05 a decision reads" in report.summary()
    fix = report.suggested_fix()
    _, y_fixed, _ = _quantize(fw, "weak", keep_float=fix)  # applied as the report says
    assert _flips(y_float, y_fixed, 0.3) < _flips(y_float, y_q, 0.3) / 2, fix.code()


# ---------------------------------------------------------------- the measure itself
def _classifier(fw):
    """Logits in, a softmax over 4 classes out (an identity dense layer before it)."""
    if fw.name == "pytorch":
        import torch
        from torch import nn

        model = nn.Sequential(nn.Linear(4, 4), nn.Softmax(dim=-1)).eval()
        with torch.no_grad():
            model[0].weight.copy_(torch.eye(4))
            model[0].bias.zero_()
        return model
    import keras

    x = keras.Input((4,), name="logits")
    dense = keras.layers.Dense(4, name="fc")
    model = keras.Model(x, keras.layers.Activation("softmax", name="probabilities")(dense(x)))
    dense.set_weights([np.eye(4, dtype=np.float32), np.zeros(4, np.float32)])
    return model


def test_a_softmax_whose_top_class_never_changes_is_read_by_rank(fw):
    """Every row's top class stands 5 over the others: 4-bit grids move the probabilities
    (the softmax's own SQNR over every value is low) but never the top class. The report's
    bounding figure is the rank reading's ceiling, and it says so, where the layer table
    counts every value."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-1.0, 1.0, (32, 4))
    x[np.arange(32), rng.integers(0, 4, 32)] = 5.0
    x = x.astype(np.float32)
    q_model, info = fw.ptq(_classifier(fw), lambda: iter([[x[:16]], [x[16:]]]), core_config=CONFIG)
    y_float, y_q = fw.predict(_classifier(fw))(x), fw.predict(q_model)(x)
    assert (y_float.argmax(-1) == y_q.argmax(-1)).all()
    report = info.similarity
    assert report.quantized_output_read_as == "rank" and report.impacts_skipped > 0, report.summary()
    assert "a softmax read by rank: no top class changed" in report.summary()
    softmax = [layer for layer in report.layers if layer.is_output]
    assert softmax and softmax[0].sqnr_db < report.quantized_output_db


def test_decision_sqnr_reads_only_the_values_a_decision_can_read():
    rng = np.random.default_rng(0)
    background = rng.uniform(0.0, 0.02, (4, 4000))
    objects = rng.uniform(0.6, 0.95, (4, 10))
    reference = np.concatenate([background, objects], axis=1)
    moved = np.concatenate([np.zeros_like(background), objects], axis=1)  # the background wiped
    assert sqnr_db([reference], [moved]) < 15  # over every value: damage (a cause under 20 dB)
    assert decision_sqnr_db([reference], [moved]) == 100.0  # nothing a decision reads moved
    weak = reference.copy()
    weak[:, -10:-5] = 0.0  # half the objects wiped out
    assert decision_sqnr_db([reference], [weak]) < 5
    # a false object (background pushed over the level) is noise where a decision reads
    false = reference.copy()
    false[:, 0] = 0.9
    assert decision_sqnr_db([reference], [false]) < 10
    assert DECISION_LEVEL == 0.05


def _graph(last: Node) -> Graph:
    graph = Graph("head", "numpy")
    graph.add_node(Node("x", OpKind.INPUT, "input", output_shapes=[(None, 8)]))
    graph.add_node(Node("logits", OpKind.DENSE, "Linear", output_shapes=[(None, 8)]))
    graph.add_edge("x", "logits")
    graph.add_node(last)
    graph.add_edge("logits", last.name)
    graph.inputs = ["x"]
    graph.outputs = [(last.name, 0)]
    return graph


@pytest.mark.parametrize(
    ("last", "probability"),
    [
        (
            Node("p", OpKind.ACTIVATION, "Sigmoid", attrs={"function": "sigmoid"}, output_shapes=[(None, 8)]),
            True,
        ),
        (Node("p", OpKind.SOFTMAX, "Softmax", output_shapes=[(None, 8)]), True),
        (
            Node(
                "p",
                OpKind.ACTIVATION,
                "OnnxHardSigmoid",
                attrs={"function": "hardsigmoid"},
                output_shapes=[(None, 8)],
            ),
            True,
        ),
        (Node("p", OpKind.ACTIVATION, "ReLU", attrs={"function": "relu"}, output_shapes=[(None, 8)]), False),
        (Node("p", OpKind.IDENTITY, "Identity", output_shapes=[(None, 8)]), False),
    ],
)
def test_an_output_is_a_probability_when_a_sigmoid_or_softmax_makes_it(last, probability):
    graph = _graph(last)
    (part,) = output_parts(graph)
    assert part.probability is probability
    # logits of a classifier are judged on every value, as before
    reference = [[np.concatenate([np.linspace(0.001, 0.04, 12), np.linspace(0.5, 0.9, 4)]).reshape(2, 8)]]
    wiped = [[np.where(reference[0][0] < 0.05, 0.0, reference[0][0])]]
    impact = measure([part], reference, wiped)
    assert impact.probability is probability
    assert (impact.sqnr_db == 100.0) is probability


def test_a_dense_map_is_compared_within_the_spatial_tolerance_of_boundary_benchmarks():
    """On a 320x320 map (tolerance 3 pixels: 0.75 % of the diagonal), a text region whose
    border moves by two pixels keeps its decisions; one that vanishes, or shrinks to half,
    does not."""
    reference = np.zeros((2, 1, 320, 320))
    reference[:, 0, 100:140, 50:250] = 0.95
    moved = np.zeros_like(reference)
    moved[:, 0, 102:138, 52:248] = 0.9  # every border two pixels in
    assert sqnr_db([reference], [moved]) < 15 and decision_sqnr_db([reference], [moved]) < 15
    assert decision_sqnr_db([reference], [moved], spatial=(2, 3)) > 25
    gone = reference.copy()
    gone[1] = 0.0
    assert decision_sqnr_db([reference], [gone], spatial=(2, 3)) < 5
    half = reference.copy()
    half[:, 0, 120:140] = 0.0
    assert decision_sqnr_db([reference], [half], spatial=(2, 3)) < 5
