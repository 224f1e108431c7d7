"""Real pretrained models (weights from PyPI wheels) quantize and keep their task, or the
similarity report names what breaks it.

Per model of `tests.zoo.real.cases`: the float metric is high (the loaders, the data and the
metric are right), PTQ succeeds, and the 8-bit metric stays within `MARGIN` of float or
the report (with a log folder) names at least one cause. The healthy models (CREPE tiny,
MTCNN, PP-OCRv4's text detector, whose probability map moves its text borders by a pixel
or two at 8 bits) stay within a point and get no cause. The detector's first cause is its
head concatenation, and the report's fix gives its detections back. The Keras nets compute
what the PyTorch ones do.

Each model is quantized once per module (`_measured`), with no log folder: the report,
where a test needs it, is turned on by ``DebugConfig(analyze_similarity=True)``, small. Export parity and the fixed metric are in bench/real_zoo.py.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import model_compression_toolkit as mct
from tests.zoo.real.cases import CASES
from tests.zoo.real.wheels import missing

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Using a non-tuple sequence:UserWarning"),  # onnx2torch's Slice
]

# Lowest float value of each primary metric (measured: all 100 %, PP-OCR rec 96.7 %, cls 96.9 %)
FLOAT_FLOOR = {"ppocr_rec": 0.8, "ppocr_cls": 0.85}
FLOAT_FLOOR_DEFAULT = 0.9
MARGIN = 0.15  # 8-bit within 15 points of float, or a cause named (nudenet, its output on one grid: ~26 %)
# measured: 8-bit metric equal to float, no cause (PP-OCR det: a map at 35 dB within 3 px;
# PP-OCR rec: its CTC softmax, read by rank, keeps every argmax or moves it by one step)
HEALTHY = ["crepe_tiny", "crepe_tiny_keras", "onet", "rnet", "ppocr_det", "ppocr_rec"]

_CACHE: dict[str, dict] = {}


def _need(name: str):
    case = CASES[name]
    lacking = missing(case.weights)
    if lacking:
        pytest.skip(f"wheel not installed: {', '.join(lacking)} (make install)")
    pytest.importorskip({"pytorch": "torch", "keras": "keras"}[case.framework])
    if case.weights.startswith(("ppocr", "nudenet")):  # ONNX files (tests/zoo/real/onnx_models.py)
        pytest.importorskip("onnx2torch")
        pytest.importorskip("onnxruntime")
    return case


# Models quantized with the similarity report from the start (no log folder: DebugConfig
# turns it on), small so that it stays cheap: CREPE must get no cause. The others are
# quantized without it, and again with it only if they fall (nudenet's detector test
# quantizes it once more, its outputs on one grid, with the report).
WITH_REPORT = set(HEALTHY)
SMALL_REPORT = {"similarity_samples": 2, "impact_samples": 2, "max_impact_quantizers": 3}


def _ptq(case, model, batches, report: bool, keep_float=None, **config):
    ptq = {
        "pytorch": mct.ptq.pytorch_post_training_quantization,
        "keras": mct.ptq.keras_post_training_quantization,
    }[case.framework]
    debug = mct.core.DebugConfig(analyze_similarity=report, **SMALL_REPORT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = mct.core.CoreConfig(
            debug_config=debug, keep_float=keep_float if keep_float is not None else (), **config
        )
        return ptq(model, lambda: iter(batches), core_config=config)


def _measured(name: str) -> dict:
    """The model, its float metric, its 8-bit model and metric, and for `WITH_REPORT` the
    similarity report; computed once per module."""
    if name not in _CACHE:
        case = _need(name)
        model, batches = case.make(), case.calibration()
        entry = {"model": model, "batches": batches, "float": case.evaluate(model)}
        entry["q_model"], info = _ptq(case, model, batches, report=name in WITH_REPORT)
        entry["8-bit"] = case.evaluate(entry["q_model"])
        if name in WITH_REPORT:
            entry["report"] = info.similarity
        _CACHE[name] = entry
    return _CACHE[name]


def _report(name: str):
    """The similarity report of model ``name`` (one more PTQ call if it had none)."""
    entry = _measured(name)
    if "report" not in entry:
        _, info = _ptq(CASES[name], entry["model"], entry["batches"], report=True)
        entry["report"] = info.similarity
    return entry["report"]


@pytest.mark.parametrize("name", list(CASES))
def test_float_metric_is_high(name):
    entry = _measured(name)
    case = CASES[name]
    assert entry["float"][case.primary] >= FLOAT_FLOOR.get(name, FLOAT_FLOOR_DEFAULT), entry["float"]
    if name == "nudenet":  # recall of its own detections is 1 by definition: check there are some
        assert entry["float"]["count"] >= 10, entry["float"]


@pytest.mark.parametrize("name", list(CASES))
def test_8bit_keeps_the_task_or_the_report_names_a_cause(name):
    entry = _measured(name)
    primary = CASES[name].primary
    drop = entry["float"][primary] - entry["8-bit"][primary]
    if drop <= MARGIN:
        return
    report = _report(name)
    assert report is not None and report.causes(), (
        f"{name}: 8-bit {entry['8-bit']} vs float {entry['float']}, and no cause named:\n"
        + (report.summary() if report is not None else "no report")
    )


@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_model_keeps_its_metric_and_gets_no_cause(name):
    entry = _measured(name)
    primary = CASES[name].primary
    assert entry["8-bit"][primary] >= entry["float"][primary] - 0.01, (entry["float"], entry["8-bit"])
    report = _report(name)
    assert report is not None and not report.causes(), report.summary()


@pytest.mark.parametrize("name", ["crepe_tiny", "onet", "rnet"])
def test_keras_net_computes_what_the_pytorch_net_does(name):
    _need(name)
    pytest.importorskip("keras")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tests.zoo.real.nets import max_abs_diff

    rng = np.random.default_rng(0)
    shape = {"crepe_tiny": (4, 1024), "onet": (4, 3, 48, 48), "rnet": (4, 3, 24, 24)}[name]
    x = rng.standard_normal(shape).astype(np.float32)
    assert max_abs_diff(name, x) < 1e-4


def test_the_detector_s_cause_is_its_head_concatenation_and_the_fix_restores_or_says_it_does_not():
    """YOLOv8n's head joins box coordinates in pixels with class scores in 0-1 into its one
    output. By default (a target that runs float) that output is handed on unrounded, as
    pt2e and NNCF do, and 8-bit keeps the float detections (AP50 95.4 %, 2026-11-28). Put on
    one grid, as an integer-only target or MCT puts it (``quantize_outputs=True``), 8-bit
    keeps few of them; the first cause is that concatenation, named with the score part it
    wipes out. Issue 30's "done when": the suggested fix, applied as the report says
    (``CoreConfig(keep_float=fix)`` beside the call's own settings), gives AP50 (34 float
    detections as ground truth) within `RESTORED` of float, or the report says plainly that
    no fix it tried restores, with what each gave. Measured (2026-11-27, this module's small
    report, bench/results/real_zoo.md): on one grid 8-bit 29.4 %; the concatenation float
    alone leaves the scores at 10.7 dB; every activation at 16 bits, 21 dB (AP50 98.9 %); with
    the concatenation float too, 21.3 dB (the 8-bit weights' noise); the search's suggestion,
    the concatenation float, every activation at 16 bits and the 8-bit kernels rounded with
    compensation, 34 dB and AP50 99.5 % (every weight at 16 bits instead: 58.7 dB, 99.7 %,
    2.9 MiB more)."""
    entry = _measured("nudenet")
    assert entry["float"]["ap50"] - entry["8-bit"]["ap50"] < 0.1, (entry["float"], entry["8-bit"])
    case = CASES["nudenet"]
    on_grid, info = _ptq(case, entry["model"], entry["batches"], report=True, quantize_outputs=True)
    report = info.similarity
    assert entry["float"]["ap50"] - case.evaluate(on_grid)["ap50"] > 0.5, report.summary()
    first = report.quantizers[0]
    assert first.cause and first.layer_type == "OnnxConcat" and first.kind == "activation", report.summary()
    assert first.output_part is not None and "channels 4-21" in first.output_part, first.output_part
    assert first.output_part_distinct <= 4 and first.input_range_spread > 100, report.summary()
    assert first.output_probability, report.summary()  # judged on the scores a detection reads
    fix = report.suggested_fix()
    assert "quantize_outputs=True" in fix.code(), fix.code()
    fixed, _ = _ptq(case, entry["model"], entry["batches"], report=False, keep_float=fix, quantize_outputs=True)
    result = case.evaluate(fixed)
    if result["ap50"] >= entry["float"]["ap50"] - RESTORED:
        assert fix.restores, fix.summary()  # and the report says it restores
        return
    # not restored: the report must not present it as the fix without saying so
    assert not fix.restores and fix.note is not None and "No fix tried restores" in fix.note, (
        result,
        fix.summary(),
    )
    for tried in (a for a in fix.alternatives if a.allowed):
        assert f"{tried.change} gave {tried.gives()}" in fix.note, fix.note
    assert fix.note in report.summary()


RESTORED = 0.01  # AP50 within 1 point of float: the fix restores the metric (issue 30)
