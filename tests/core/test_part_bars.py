"""Each output part is judged against its own bar, and a softmax by the decisions it changes.

A detector's box part (values read as they are) gives its task back at 20 dB; its class
scores (probabilities read at a threshold) need 30 dB. The part that counts is the one
furthest under its own bar: a fix that leaves the boxes at 23 dB and the scores at 25 dB
does not restore (PicoDet: every activation at 16 bits, reported as restoring at 23.3 dB,
kept 93.4 % of its float detections).

A softmax is read by rank (a classifier's argmax, a CTC decoder's argmax at each step):
noise that moves its probabilities and keeps every argmax is no cause (PP-OCRv4's
recognizer at 8 bits keeps every text line), one that changes its argmax is.

Pure core: graphs built by hand, outputs made from the float ones with chosen noise, and
`parts.measure` / `fix_menu.judge` on them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.core.similarity.causes import CAUSE_DB, QuantizerEntry
from model_compression_toolkit.core.similarity.fix_menu import FixMenu, choose, judge
from model_compression_toolkit.core.similarity.parts import (
    DECISION_RESTORE_DB,
    RESTORE_DB,
    OutputImpact,
    changed_decisions,
    decision_sqnr_db,
    is_probability,
    is_ranked,
    measure,
    output_parts,
    sqnr_db,
)
from model_compression_toolkit.core.similarity.suggested import SuggestedFix


def _graph(outputs: dict[str, tuple[OpKind, str, tuple]]) -> Graph:
    """``x -> dense -> <each output>``: ``name: (kind, function, output shape)``."""
    g = Graph("parts", "pytorch")
    g.add_node(Node("x", OpKind.INPUT, "Input"))
    g.add_node(Node("dense", OpKind.DENSE, "Linear"))
    g.add_edge("x", "dense")
    for name, (kind, function, shape) in outputs.items():
        attrs = {"function": function} if function else {}
        g.add_node(Node(name, kind, function or "Linear", attrs=attrs, output_shapes=[shape]))
        g.add_edge("dense", name)
    g.outputs = [(name, 0) for name in outputs]
    return g


def _noisy(reference: np.ndarray, db: float, seed: int, read: np.ndarray | None = None) -> np.ndarray:
    """``reference`` plus noise scaled so that each sample's SQNR over ``read`` (default:
    every value) is ``db``."""
    noise = np.random.default_rng(seed).standard_normal(reference.shape)
    mask = np.ones(reference.shape, bool) if read is None else read
    axes = tuple(range(1, reference.ndim))
    signal, power = np.square(reference * mask).sum(axes), np.square(noise * mask).sum(axes)
    scale = np.sqrt(signal / np.maximum(power, 1e-12) / 10 ** (db / 10)).reshape(-1, *[1] * len(axes))
    return (reference + scale * noise).astype(np.float32)


def _softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(np.float32)


# -- a box output and a score output: each against its own bar --------------------------

BOXES, SCORES = (64, 4), (64, 6)


def _detector(box_db: float, score_db: float) -> tuple[Graph, list[np.ndarray], list[np.ndarray]]:
    """Boxes in pixels (0-320) and sigmoid scores, the scores' decision values at ``score_db``."""
    g = _graph({"boxes": (OpKind.DENSE, "", BOXES), "scores": (OpKind.ACTIVATION, "sigmoid", SCORES)})
    rng = np.random.default_rng(0)
    boxes = rng.uniform(0, 320, BOXES).astype(np.float32)
    scores = rng.uniform(0.1, 0.95, SCORES).astype(np.float32)
    noisy_scores = np.clip(_noisy(scores, score_db, 2), 0.0, 1.0)
    return g, [boxes, scores], [_noisy(boxes, box_db, 1), noisy_scores]


@dataclass
class _Probe:
    """What `judge` asks of a probe: the impact of a variant (here: fixed outputs)."""

    graph: Graph
    reference: list[np.ndarray]
    outputs: list[np.ndarray]

    def impact(self, variant: Graph, at: str | None = None) -> OutputImpact:
        return measure(output_parts(self.graph), [self.reference], [self.outputs])


def test_the_part_furthest_under_its_own_bar_counts_not_the_lowest_sqnr():
    g, reference, outputs = _detector(box_db=23.0, score_db=25.0)
    parts = output_parts(g)
    assert [p.probability for p in parts] == [False, True]
    impact = measure(parts, [reference], [outputs])
    assert sqnr_db([reference[0]], [outputs[0]]) == pytest.approx(23.0, abs=0.3)  # the boxes: lowest SQNR
    # the scores count: 5 dB under their 30 dB bar, the boxes 3 dB over their 20
    assert impact.part == "scores" and impact.probability, impact
    assert RESTORE_DB < impact.sqnr_db < DECISION_RESTORE_DB and impact.margin_db < 0 and not impact.restored
    # a cause is judged against one bar for every part: the lowest SQNR, the boxes (no cause here)
    assert impact.cause_view().part == "boxes" and not impact.cause_view().probability
    assert [p.label for p in impact.parts] == ["boxes", "scores"]


def test_a_fix_that_leaves_the_boxes_over_20_db_and_the_scores_under_30_does_not_restore():
    g, reference, outputs = _detector(box_db=23.0, score_db=25.0)
    fix = judge(SuggestedFix(activation_n_bits=16), g, _Probe(g, reference, outputs), FixMenu(), 6.0, None)
    assert fix.output_probability and fix.restore_db == DECISION_RESTORE_DB, fix
    assert fix.output_sqnr_db_after < DECISION_RESTORE_DB and fix.restores is False, fix.summary()

    # every part at its bar: restores
    g, reference, outputs = _detector(box_db=23.0, score_db=36.0)
    fix = judge(SuggestedFix(activation_n_bits=16), g, _Probe(g, reference, outputs), FixMenu(), 6.0, None)
    assert not fix.output_probability and fix.output_sqnr_db_after == pytest.approx(23.0, abs=0.3)
    assert fix.restores is True, fix.summary()


def test_when_none_restores_the_fix_nearest_its_bar_is_suggested():
    """A box part at 18 dB (2 dB under its bar) is nearer restoring than scores at 25 dB (5
    under theirs), though its SQNR is lower."""
    near = SuggestedFix(activation_n_bits=16, output_sqnr_db_after=18.0)
    far = SuggestedFix(weights_n_bits=16, output_sqnr_db_after=25.0, output_probability=True)
    assert not near.restores and not far.restores
    assert choose([far, near], FixMenu()) is near


# -- a softmax read by rank ----------------------------------------------------------------

CLASSES = 10


def _classifier(rows: int = 256) -> tuple[Graph, np.ndarray]:
    g = _graph({"probs": (OpKind.SOFTMAX, "", (rows, CLASSES))})
    logits = np.random.default_rng(3).normal(0, 1, (rows, CLASSES))
    logits[np.arange(rows), np.arange(rows) % CLASSES] += 3.0  # a clear top class, 0.5-0.9
    return g, _softmax(logits)


def _entry(g: Graph, reference: np.ndarray, output: np.ndarray) -> QuantizerEntry:
    entry = QuantizerEntry("dense", "activation", "Linear", 8, 30.0)
    entry.set_impact(measure(output_parts(g), [[reference]], [[output]]))
    entry.cause = entry.damages_output()
    return entry


def test_a_softmax_whose_argmax_never_changes_is_no_cause_however_its_probabilities_move():
    g, probs = _classifier()
    assert is_probability(g, "probs") and is_ranked(g, "probs")
    # noise on every probability, shrunk where it would change a row's top class
    noisy = _noisy(probs, 12.0, 4, read=probs >= 0.05)
    flips = noisy.argmax(-1) != probs.argmax(-1)
    noisy[flips] = probs[flips]
    assert decision_sqnr_db([probs], [noisy]) < CAUSE_DB - 5  # judged at a threshold: a cause
    entry = _entry(g, probs, noisy)
    assert not entry.cause and entry.output_ranked, entry.evidence()
    assert entry.output_sqnr_db >= DECISION_RESTORE_DB  # not one decision changed


def test_a_softmax_whose_argmax_changes_is_a_cause():
    g, probs = _classifier()
    changed = probs.copy()
    rows = np.arange(0, len(probs), 8)  # one row in 8: its top class swapped with another's
    top = probs[rows].argmax(-1)
    other = (top + 1) % CLASSES
    changed[rows, top], changed[rows, other] = probs[rows, other], probs[rows, top]
    entry = _entry(g, probs, changed)
    assert entry.cause and entry.output_sqnr_db < CAUSE_DB and entry.output_ranked, entry.evidence()
    assert "top class changes" in entry.evidence()


def _ctc(steps: int = 40, samples: int = 4) -> np.ndarray:
    """CTC-like ``(samples, steps, CLASSES)``: the blank (class 0) at 0.98, a character every
    5 steps at 0.98."""
    top = np.zeros((samples, steps), int)
    top[:, 2::5] = 1 + np.arange(samples)[:, None] % (CLASSES - 1)
    logits = np.full((samples, steps, CLASSES), -4.0)
    np.put_along_axis(logits, top[..., None], 4.0, axis=-1)
    return _softmax(logits)


def test_a_ctc_character_moved_a_step_is_no_cause_one_that_vanishes_is():
    ref = _ctc()
    g = _graph({"probs": (OpKind.SOFTMAX, "", ref.shape)})
    moved = np.roll(ref, 1, axis=1)  # every character one step later: the same text
    assert decision_sqnr_db([ref], [moved]) < CAUSE_DB  # judged at a threshold: a cause
    assert not changed_decisions(ref, moved, 2).any()
    assert not _entry(g, ref, moved).cause

    vanished = ref.copy()
    vanished[:, 2::10] = ref[:, 0:1]  # every other character replaced by the blank
    assert changed_decisions(ref, vanished, 2)[:, 2::10].all()
    entry = _entry(g, ref, vanished)
    assert entry.cause and entry.output_sqnr_db < CAUSE_DB, entry.evidence()


def test_a_sigmoid_is_read_at_a_threshold_not_by_rank():
    g = _graph({"scores": (OpKind.ACTIVATION, "sigmoid", (8, 4)), "probs": (OpKind.SOFTMAX, "", (8, 4))})
    assert is_probability(g, "scores") and not is_ranked(g, "scores")
    assert [p.ranked for p in output_parts(g)] == [False, True]


def test_scores_through_an_onnx_reshape_with_a_shape_input_still_hold_probabilities():
    """An ONNX Reshape takes its target shape as a second input (a constant): PicoDet's
    sigmoid scores reach its outputs through one, then a transpose, and stay probabilities."""
    g = Graph("picodet", "pytorch")
    g.add_node(Node("x", OpKind.INPUT, "Input"))
    g.add_node(Node("sigmoid", OpKind.ACTIVATION, "Sigmoid", attrs={"function": "sigmoid"}))
    g.add_node(Node("shape", OpKind.CONSTANT, "get_attr"))
    g.add_node(Node("reshape", OpKind.RESHAPE, "OnnxReshape"))
    g.add_node(Node("transpose", OpKind.RESHAPE, "OnnxTranspose"))
    g.add_edge("x", "sigmoid")
    g.add_edge("sigmoid", "reshape")
    g.add_edge("shape", "reshape", dst_index=1)
    g.add_edge("reshape", "transpose")
    g.outputs = [("transpose", 0)]
    assert is_probability(g, "transpose") and not is_ranked(g, "transpose")
    assert [p.probability for p in output_parts(g)] == [True]


def test_a_spread_fix_that_does_not_restore_says_so_plainly_with_what_each_gave():
    """No cause, the loss spread (PicoDet): every activation at 16 bits leaves the class
    scores at 29.6 dB, under their bar; the summary must not present it as the fix without
    saying that no fix tried restores, and what each gave."""
    from model_compression_toolkit.core.similarity.fix_menu import alternative

    acts = SuggestedFix(activation_n_bits=16, output_sqnr_db_before=5.2, output_sqnr_db_after=29.6,
                        output_probability=True)  # fmt: skip
    weights = SuggestedFix(weights_n_bits=16, output_sqnr_db_before=5.2, output_sqnr_db_after=5.2,
                           output_probability=True)  # fmt: skip
    acts.alternatives = [alternative(acts, True), alternative(weights, False)]
    assert acts.restores is False and acts.note is None
    summary = acts.summary()
    assert "No fix tried restores" in summary, summary
    assert "every activation at 16 bits gave output SQNR 29.6 dB" in summary, summary
    assert "every weight at 16 bits gave output SQNR 5.2 dB" in summary, summary
    assert acts.to_dict()["note"] == acts.said_note
    # one that restores says nothing of the kind
    acts.output_sqnr_db_after = 31.0
    assert acts.restores and acts.said_note is None and "No fix tried" not in acts.summary()
