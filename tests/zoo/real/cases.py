"""The real zoo: each pretrained model with its calibration data and its task metric.

A `Case` builds its model, gives representative batches (seeded, never the evaluation
data), and measures a model (float or quantized) on its task. ``primary`` names the
headline metric, a share in [0, 1] (higher is better).

| case | data | metric |
|---|---|---|
| nudenet (YOLOv8n) | 48 photos at 320x320 | AP50 against the float model's detections (score >= 0.1) as ground truth; their recall at 0.1 (same class, IoU >= 0.5) |
| ppocr_rec | 30 rendered lines | exact-line and character accuracy, greedy CTC |
| ppocr_det | 8 rendered pages | recall of the lines (binarized map covers >= 50 % of the shrunk box), pixel F1 |
| ppocr_cls | 32 rendered lines, half turned 180 degrees | orientation accuracy |
| onet, rnet (MTCNN) | 48 crops, half Grace Hopper's face | face / not-face accuracy at 0.5 (labels by construction) |
| crepe_tiny | 64 synthesized tones | raw pitch accuracy (within 50 cents), median error in cents |

ONet's landmarks have no ground truth here: ``landmark_px`` is their mean distance to the
float model's landmarks on the face crops, in pixels of the 48x48 crop (0 for float).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from tests.zoo.real import data, metrics

# YOLOv8's default confidence threshold is 0.25; on these photos (no nudity; faces in the
# portrait's crops only) the float model finds 5 detections at 0.25 in 16 images, so the
# threshold is lowered to 0.1 (about 40 detections in 48 images), for float and quantized alike.
# A recall at one threshold is a coin toss for the detections the float model scores just
# over it (a fifth of them within 0.015 of 0.1): any noise at all, 16-bit activations
# included, moves some under. The primary metric is therefore AP50 of the model's
# detections down to `DETECTION_FLOOR` against the float detections as ground truth
# (`metrics.detection_ap`), which falls only when detections are lost or outranked.
DETECTION_SCORE = 0.1
DETECTION_FLOOR = 0.01
NUDENET_IMAGES = 48


@dataclass
class Case:
    name: str
    framework: str  # "pytorch" or "keras"
    weights: str  # the key of `tests.zoo.real.wheels.FILES`
    make: Callable[[], Any]
    calibration: Callable[[], list[list[np.ndarray]]]
    evaluate: Callable[[Any], dict[str, Any]]
    primary: str
    notes: list[str] = field(default_factory=list)


def predict(model: Any, x: np.ndarray, framework: str, batch: int = 16) -> list[np.ndarray]:
    """Every output of ``model`` on ``x`` (in the framework's layout), in chunks of ``batch``."""
    chunks = []
    for start in range(0, len(x), batch):
        part = x[start : start + batch]
        if framework == "pytorch":
            import torch

            with torch.no_grad():
                out = model(torch.as_tensor(part))
            out = out if isinstance(out, (list, tuple)) else (out,)
            chunks.append([o.detach().cpu().numpy() for o in out])
        else:
            out = model(part, training=False)
            out = out if isinstance(out, (list, tuple)) else (out,)
            chunks.append([np.asarray(o) for o in out])
    return [np.concatenate(parts) for parts in zip(*chunks)]


def _batches(x: np.ndarray, size: int) -> list[list[np.ndarray]]:
    return [[x[i : i + size]] for i in range(0, len(x), size)]


def _nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


# ------------------------------------------------------------------ nudenet
@cache
def nudenet_images() -> np.ndarray:
    return data.detector_images(NUDENET_IMAGES, seed=0)


@cache
def _nudenet_float():
    """The float detector, converted once (its reference detections come from it)."""
    from tests.zoo.real.onnx_models import to_torch

    return to_torch("nudenet", (1, 3, 320, 320))


def _detections(model) -> list[np.ndarray]:
    """The model's detections on `nudenet_images` down to `DETECTION_FLOOR`."""
    out = predict(model, nudenet_images(), "pytorch", batch=4)[0]
    return [metrics.yolo_detections(o, DETECTION_FLOOR) for o in out]


@cache
def _float_detections() -> tuple[np.ndarray, ...]:
    return tuple(_detections(_nudenet_float()))


def nudenet_reference() -> tuple[np.ndarray, ...]:
    """The float model's detections on `nudenet_images` (score >= `DETECTION_SCORE`)."""
    return tuple(d[d[:, 5] >= DETECTION_SCORE] for d in _float_detections())


def _nudenet_eval(model) -> dict:
    """``ap50`` (primary), then the ``recall`` at `DETECTION_SCORE`, ``mean_iou``, ``count``."""
    found = list(_float_detections()) if model is _nudenet_float() else _detections(model)
    reference = list(nudenet_reference())
    over = [d[d[:, 5] >= DETECTION_SCORE] for d in found]
    return {"ap50": metrics.detection_ap(reference, found), **metrics.detection_recall(reference, over)}


# ------------------------------------------------------------------ PP-OCR
@cache
def _rec_eval_data():
    return data.text_lines(30, seed=0)


def _rec_eval(model) -> dict:
    from tests.zoo.real.onnx_models import ocr_characters

    x, texts = _rec_eval_data()
    probabilities = predict(model, x, "pytorch", batch=8)[0]
    return metrics.text_accuracy(metrics.ctc_greedy(probabilities, ocr_characters()), texts)


@cache
def _pages():
    return data.text_pages(8, seed=2)


def _det_eval(model) -> dict:
    pages = _pages()
    maps = predict(model, np.stack([p.image for p in pages]), "pytorch", batch=4)[0]
    return metrics.text_region_scores(maps, [p.boxes for p in pages])


@cache
def _cls_eval_data():
    return data.oriented_lines(32, seed=1)


def _cls_eval(model) -> dict:
    x, labels = _cls_eval_data()
    probabilities = predict(model, x, "pytorch")[0]
    return {"accuracy": float(np.mean(probabilities.argmax(-1) == labels))}


# ------------------------------------------------------------------ MTCNN
@cache
def _faces(size: int):
    return data.face_crops(48, size=size, seed=3)


@cache
def _float_landmarks() -> np.ndarray:
    from tests.zoo.real.nets import torch_net

    x, _ = _faces(48)
    return predict(torch_net("onet"), x, "pytorch")[1]


def _face_eval(size: int, framework: str) -> Callable[[Any], dict]:
    def evaluate(model) -> dict:
        x, labels = _faces(size)
        outputs = predict(model, x if framework == "pytorch" else _nhwc(x), framework)
        probability = outputs[-1][:, 1]
        result = {"accuracy": float(np.mean((probability > 0.5) == labels))}
        if size == 48:  # ONet: (box, landmarks, probability)
            faces = labels == 1
            diff = (outputs[1] - _float_landmarks())[faces] * size
            result["landmark_px"] = float(np.mean(np.hypot(diff[:, :5], diff[:, 5:])))
        return result

    return evaluate


# ------------------------------------------------------------------ CREPE
@cache
def _tones():
    return data.tones(64, seed=4)


def _crepe_eval(framework: str) -> Callable[[Any], dict]:
    def evaluate(model) -> dict:
        frames, f0 = _tones()
        probabilities = predict(model, frames, framework)[0]
        cents = metrics.bins_to_cents(probabilities) - 1200 * np.log2(f0 / 10.0)
        return {
            "rpa": metrics.raw_pitch_accuracy(probabilities, f0),
            "cents": float(np.median(np.abs(cents))),
        }

    return evaluate


# ------------------------------------------------------------------ the cases
def _onnx(name: str, shape: tuple[int, ...]) -> Callable[[], Any]:
    def make():
        from tests.zoo.real.onnx_models import to_torch

        return to_torch(name, shape)

    return make


def _net(name: str, framework: str) -> Callable[[], Any]:
    def make():
        from tests.zoo.real import nets

        return nets.torch_net(name) if framework == "pytorch" else nets.keras_net(name)

    return make


def _face_calibration(size: int, framework: str):
    def calibration():
        x, _ = data.face_crops(32, size=size, seed=13)
        return _batches(x if framework == "pytorch" else _nhwc(x), 16)

    return calibration


CASES: dict[str, Case] = {}


def _add(case: Case) -> None:
    CASES[case.name] = case


# fmt: off
_add(Case(
    "nudenet", "pytorch", "nudenet", _nudenet_float,
    lambda: _batches(data.detector_images(8, seed=10)[3:], 4), _nudenet_eval, "ap50",
))
_add(Case(
    "ppocr_rec", "pytorch", "ppocr_rec", _onnx("ppocr_rec", (1, 3, 48, 320)),
    lambda: _batches(data.text_lines(16, seed=10)[0], 8), _rec_eval, "line",
))
_add(Case(
    "ppocr_det", "pytorch", "ppocr_det", _onnx("ppocr_det", (1, 3, 320, 320)),
    lambda: _batches(np.stack([p.image for p in data.text_pages(4, seed=12)]), 2), _det_eval, "recall",
))
_add(Case(
    "ppocr_cls", "pytorch", "ppocr_cls", _onnx("ppocr_cls", (1, 3, 48, 192)),
    lambda: _batches(data.oriented_lines(16, seed=11)[0], 8), _cls_eval, "accuracy",
))
for _framework in ("pytorch", "keras"):
    _suffix = "" if _framework == "pytorch" else "_keras"
    _add(Case(
        f"crepe_tiny{_suffix}", _framework, "crepe_tiny", _net("crepe_tiny", _framework),
        lambda: _batches(data.tones(32, seed=14)[0], 16), _crepe_eval(_framework), "rpa",
    ))
    _add(Case(
        f"onet{_suffix}", _framework, "onet", _net("onet", _framework),
        _face_calibration(48, _framework), _face_eval(48, _framework), "accuracy",
    ))
    _add(Case(
        f"rnet{_suffix}", _framework, "rnet", _net("rnet", _framework),
        _face_calibration(24, _framework), _face_eval(24, _framework), "accuracy",
    ))
# fmt: on
