"""Task metrics of the real zoo, in numpy: detection matching, CTC decoding, text-region
recall, pitch accuracy."""

from __future__ import annotations

import numpy as np


# ------------------------------------------------------------------ detection (YOLOv8 head)
def iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one ``(x1, y1, x2, y2)`` box with each of ``boxes`` (K, 4)."""
    w = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    h = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)
    inter = w * h
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / np.maximum(area + areas - inter, 1e-9)


def yolo_detections(output: np.ndarray, score: float = 0.25, nms_iou: float = 0.45) -> np.ndarray:
    """One image's YOLOv8 output ``(4 + classes, anchors)`` (cx, cy, w, h in pixels, then
    class scores) -> detections ``(K, 6)``: x1, y1, x2, y2, class, score; best class per
    anchor, kept at ``score`` or above, then non-maximum suppression per class."""
    scores = output[4:]
    cls, best = scores.argmax(0), scores.max(0)
    keep = best >= score
    cx, cy, w, h = output[:4, keep]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)
    cls, best = cls[keep], best[keep]
    out = []
    for c in np.unique(cls):
        idx = np.flatnonzero(cls == c)
        idx = idx[np.argsort(-best[idx])]
        while idx.size:
            out.append([*boxes[idx[0]], c, best[idx[0]]])
            idx = idx[1:][iou(boxes[idx[0]], boxes[idx[1:]]) < nms_iou]
    return np.array(out, np.float64).reshape(-1, 6)


def detection_recall(reference: list[np.ndarray], found: list[np.ndarray], min_iou: float = 0.5) -> dict:
    """How many of the ``reference`` detections (per image) ``found`` finds again: same
    class, IoU >= ``min_iou``, each found box matched once (best IoU first). Returns
    ``recall`` (None when the reference has none), ``mean_iou`` of the matches, ``count``."""
    matched, total, ious = 0, 0, []
    for ref, det in zip(reference, found):
        total += len(ref)
        free = np.ones(len(det), bool)
        for box in ref[np.argsort(-ref[:, 5])]:
            candidates = np.flatnonzero(free & (det[:, 4] == box[4]))
            if not candidates.size:
                continue
            overlaps = iou(box[:4], det[candidates, :4])
            j = overlaps.argmax()
            if overlaps[j] >= min_iou:
                matched += 1
                ious.append(overlaps[j])
                free[candidates[j]] = False
    return {
        "recall": matched / total if total else None,
        "mean_iou": float(np.mean(ious)) if ious else None,
        "count": total,
    }


def detection_ap(reference: list[np.ndarray], found: list[np.ndarray], min_iou: float = 0.5) -> float | None:
    """AP50 of ``found`` (per image, every score down to a low floor) against the
    ``reference`` detections as ground truth: the found detections of all images ranked by
    score, each a true positive when it matches a reference box not yet matched (same
    class, IoU >= ``min_iou``, best IoU first), and the area under the precision-recall
    curve (VOC's all-points interpolation). Unlike a recall at one confidence threshold, it
    does not flip on a detection whose score moves from just over the threshold to just
    under it; it falls when detections are lost, or ranked below false ones."""
    total = sum(len(r) for r in reference)
    if not total:
        return None
    ranked = [(det[5], i, det) for i, dets in enumerate(found) for det in dets]
    ranked.sort(key=lambda item: -item[0])
    free = [np.ones(len(r), bool) for r in reference]
    hits = np.zeros(len(ranked))
    for k, (_, i, det) in enumerate(ranked):
        ref = reference[i]
        candidates = np.flatnonzero(free[i] & (ref[:, 4] == det[4])) if len(ref) else np.array([], int)
        if candidates.size:
            overlaps = iou(det[:4], ref[candidates, :4])
            j = overlaps.argmax()
            if overlaps[j] >= min_iou:
                hits[k], free[i][candidates[j]] = 1.0, False
    tp = np.cumsum(hits)
    recall = np.concatenate([[0.0], tp / total, [tp[-1] / total if tp.size else 0.0]])
    precision = np.concatenate([[1.0], tp / np.arange(1, len(ranked) + 1), [0.0]])
    precision = np.maximum.accumulate(precision[::-1])[::-1]  # the best precision at this recall or more
    return float(np.sum(np.diff(recall) * precision[1:]))


# ------------------------------------------------------------------ text recognition (CTC)
def ctc_greedy(probabilities: np.ndarray, characters: list[str]) -> list[str]:
    """Greedy CTC decoding of ``(N, T, classes)``: best class per step, repeats merged,
    blanks (class 0) dropped; trailing and leading spaces stripped."""
    texts = []
    for best in probabilities.argmax(-1):
        keep = np.ones(len(best), bool)
        keep[1:] = best[1:] != best[:-1]
        texts.append("".join(characters[i] for i in best[keep] if i != 0).strip())
    return texts


def edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (ca != cb))
    return row[-1]


def text_accuracy(predicted: list[str], truth: list[str]) -> dict:
    """``line``: the share of lines read exactly; ``char``: 1 - edit distance / length,
    summed over all lines."""
    errors = sum(edit_distance(p, t) for p, t in zip(predicted, truth))
    return {
        "line": float(np.mean([p == t for p, t in zip(predicted, truth)])),
        "char": 1.0 - errors / sum(len(t) for t in truth),
    }


# ------------------------------------------------------------------ text detection (DB)
def shrunk(box: tuple[int, int, int, int], ratio: float = 0.4) -> tuple[float, float, float, float]:
    """DB's training target for a text box: the box moved in by ``area (1 - ratio^2) /
    perimeter`` on every side (the probability map marks this kernel, not the whole box)."""
    left, top, right, bottom = box
    w, h = right - left, bottom - top
    d = w * h * (1 - ratio**2) / (2 * (w + h))
    d = min(d, h / 2 - 1, w / 2 - 1)
    return left + d, top + d, right - d, bottom - d


def text_region_scores(
    maps: np.ndarray, boxes: list[list], threshold: float = 0.3, cover: float = 0.5
) -> dict:
    """PP-OCR detector maps ``(N, 1, H, W)`` against each page's line boxes: ``recall``,
    the share of lines whose shrunk box (`shrunk`) the binarized map (> ``threshold``)
    covers at ``cover`` or more; ``pixel_f1`` of the binarized map against the shrunk boxes."""
    found = total = 0
    tp = fp = fn = 0
    for prob, page_boxes in zip(maps[:, 0], boxes):
        binary = prob > threshold
        target = np.zeros_like(binary)
        for box in page_boxes:
            x1, y1, x2, y2 = (int(round(v)) for v in shrunk(box))
            region = binary[y1 : y2 + 1, x1 : x2 + 1]
            found += region.mean() >= cover
            total += 1
            target[y1 : y2 + 1, x1 : x2 + 1] = True
        tp += np.sum(binary & target)
        fp += np.sum(binary & ~target)
        fn += np.sum(~binary & target)
    return {"recall": found / total, "pixel_f1": 2 * tp / max(2 * tp + fp + fn, 1)}


# ------------------------------------------------------------------ pitch (CREPE)
CENTS_PER_BIN = 20.0
CENTS_OFFSET = 1997.3794084376191  # bin 0, in cents above 10 Hz


def bins_to_cents(probabilities: np.ndarray) -> np.ndarray:
    """CREPE's pitch per frame: the probability-weighted mean of the 9 bins around the
    best one (torchcrepe's ``weighted_argmax``), in cents above 10 Hz."""
    best = probabilities.argmax(-1)
    cents = []
    for p, b in zip(probabilities, best):
        lo, hi = max(b - 4, 0), min(b + 5, p.shape[-1])
        weights = p[lo:hi]
        bins = np.arange(lo, hi)
        cents.append(CENTS_OFFSET + CENTS_PER_BIN * float(weights @ bins / max(weights.sum(), 1e-9)))
    return np.array(cents)


def raw_pitch_accuracy(probabilities: np.ndarray, f0_hz: np.ndarray, tolerance_cents: float = 50.0) -> float:
    """The share of frames whose pitch is within ``tolerance_cents`` of the true ``f0_hz``."""
    truth = 1200 * np.log2(f0_hz / 10.0)
    return float(np.mean(np.abs(bins_to_cents(probabilities) - truth) <= tolerance_cents))
