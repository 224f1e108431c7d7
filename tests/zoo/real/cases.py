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

Each ONNX file (nudenet, the three PP-OCR models) runs in PyTorch (onnx2torch) and, as
``<name>_keras``, in Keras (`tests.zoo.real.onnx_keras`: the same weights in a Keras 3
functional model, NHWC), on the same data with the same metric; nudenet's reference
detections are the PyTorch float model's in both. CREPE and MTCNN are defined in both
(`tests.zoo.real.nets`).

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
    # too slow for `make test` on 2 CPUs (a minute or more to build, calibrate and measure):
    # measured by bench/real_zoo.py only; tests/zoo/real/test_onnx_keras.py checks its float model
    bench_only: bool = False


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


def _detections(model, framework: str = "pytorch") -> list[np.ndarray]:
    """The model's detections on `nudenet_images` down to `DETECTION_FLOOR`."""
    x = nudenet_images()
    out = predict(model, x if framework == "pytorch" else _nhwc(x), framework, batch=4)[0]
    return [metrics.yolo_detections(o, DETECTION_FLOOR) for o in out]


@cache
def _float_detections() -> tuple[np.ndarray, ...]:
    return tuple(_detections(_nudenet_float()))


def nudenet_reference() -> tuple[np.ndarray, ...]:
    """The float model's detections on `nudenet_images` (score >= `DETECTION_SCORE`)."""
    return tuple(d[d[:, 5] >= DETECTION_SCORE] for d in _float_detections())


def _nudenet_eval(framework: str) -> Callable[[Any], dict]:
    """``ap50`` (primary), then the ``recall`` at `DETECTION_SCORE`, ``mean_iou``, ``count``,
    against the PyTorch float model's detections (the Keras float model finds the same)."""

    def evaluate(model) -> dict:
        if framework == "pytorch" and model is _nudenet_float():
            found = list(_float_detections())
        else:
            found = _detections(model, framework)
        reference = list(nudenet_reference())
        over = [d[d[:, 5] >= DETECTION_SCORE] for d in found]
        return {"ap50": metrics.detection_ap(reference, found), **metrics.detection_recall(reference, over)}

    return evaluate


# ------------------------------------------------------------------ PP-OCR
@cache
def _rec_eval_data():
    return data.text_lines(30, seed=0)


def _images(x: np.ndarray, framework: str) -> np.ndarray:
    """NCHW images in the framework's layout (the Keras models take NHWC)."""
    return x if framework == "pytorch" else _nhwc(x)


def _rec_eval(framework: str) -> Callable[[Any], dict]:
    def evaluate(model) -> dict:
        from tests.zoo.real.onnx_models import ocr_characters

        x, texts = _rec_eval_data()
        probabilities = predict(model, _images(x, framework), framework, batch=8)[0]
        return metrics.text_accuracy(metrics.ctc_greedy(probabilities, ocr_characters()), texts)

    return evaluate


@cache
def _pages():
    return data.text_pages(8, seed=2)


def _det_eval(framework: str) -> Callable[[Any], dict]:
    def evaluate(model) -> dict:
        pages = _pages()
        maps = predict(model, _images(np.stack([p.image for p in pages]), framework), framework, batch=4)[0]
        if framework == "keras":  # (B, H, W, 1) -> (B, 1, H, W)
            maps = maps.transpose(0, 3, 1, 2)
        return metrics.text_region_scores(maps, [p.boxes for p in pages])

    return evaluate


@cache
def _cls_eval_data():
    return data.oriented_lines(32, seed=1)


def _cls_eval(framework: str) -> Callable[[Any], dict]:
    def evaluate(model) -> dict:
        x, labels = _cls_eval_data()
        probabilities = predict(model, _images(x, framework), framework)[0]
        return {"accuracy": float(np.mean(probabilities.argmax(-1) == labels))}

    return evaluate


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
def _onnx(name: str, shape: tuple[int, ...], framework: str = "pytorch") -> Callable[[], Any]:
    """An ONNX file as a PyTorch module (onnx2torch) or a Keras model (`onnx_keras`)."""

    def make():
        if framework == "keras":
            from tests.zoo.real.onnx_keras import to_keras

            return to_keras(name, shape)
        if name == "nudenet":
            return _nudenet_float()
        from tests.zoo.real.onnx_models import to_torch

        return to_torch(name, shape)

    return make


def _image_batches(images: Callable[[], np.ndarray], size: int, framework: str):
    def calibration():
        return _batches(_images(images(), framework), size)

    return calibration


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


ALL_CASES: dict[str, Case] = {}  # every case, in the bench's order (bench/real_zoo.py)


def _add(case: Case) -> None:
    ALL_CASES[case.name] = case


# fmt: off
for _framework in ("pytorch", "keras"):  # the ONNX files in Keras: tests/zoo/real/onnx_keras.py
    _suffix = "" if _framework == "pytorch" else "_keras"
    _heavy = _framework == "keras"  # nudenet, PP-OCR rec and det in Keras: 70-120 s each on 2 CPUs
    _add(Case(
        f"nudenet{_suffix}", _framework, "nudenet", _onnx("nudenet", (1, 3, 320, 320), _framework),
        _image_batches(lambda: data.detector_images(8, seed=10)[3:], 4, _framework), _nudenet_eval(_framework),
        "ap50", bench_only=_heavy,
    ))
    _add(Case(
        f"ppocr_rec{_suffix}", _framework, "ppocr_rec", _onnx("ppocr_rec", (1, 3, 48, 320), _framework),
        _image_batches(lambda: data.text_lines(16, seed=10)[0], 8, _framework), _rec_eval(_framework), "line",
        bench_only=_heavy,
    ))
    _add(Case(
        f"ppocr_det{_suffix}", _framework, "ppocr_det", _onnx("ppocr_det", (1, 3, 320, 320), _framework),
        _image_batches(lambda: np.stack([p.image for p in data.text_pages(4, seed=12)]), 2, _framework),
        _det_eval(_framework), "recall", bench_only=_heavy,
    ))
    _add(Case(
        f"ppocr_cls{_suffix}", _framework, "ppocr_cls", _onnx("ppocr_cls", (1, 3, 48, 192), _framework),
        _image_batches(lambda: data.oriented_lines(16, seed=11)[0], 8, _framework), _cls_eval(_framework),
        "accuracy",
    ))
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

# the cases tests/zoo/real/test_real_zoo.py measures (`make test`): all but the bench-only ones
CASES: dict[str, Case] = {name: case for name, case in ALL_CASES.items() if not case.bench_only}
