"""Data for the real zoo, made here or shipped by installed packages; every set is seeded.

- photos: scikit-learn's ``china.jpg`` and ``flower.jpg`` and matplotlib's
  ``grace_hopper.jpg`` (a portrait), cropped, flipped and scaled to 320x320.
- text: Latin words and numbers rendered with matplotlib's DejaVu Sans, black on white,
  as lines (recognizer, orientation) or pages with the lines' boxes (detector).
- faces: 48x48 / 24x24 crops jittered around Grace Hopper's face (label 1) and crops of
  the other photos and of the portrait's background (label 0).
- tones: 1024-sample frames at 16 kHz of a tone with harmonics and light noise, 100-1000 Hz.
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

# Grace Hopper's face in grace_hopper.jpg (512x600), an MTCNN-style square box, by eye
FACE_BOX = (175, 150, 345, 320)  # left, top, right, bottom


@cache
def photos() -> dict[str, np.ndarray]:
    """The three photos as HxWx3 uint8 RGB arrays."""
    import matplotlib
    from sklearn.datasets import load_sample_images

    sample = load_sample_images()
    images = {Path(f).stem: img for f, img in zip(sample.filenames, sample.images)}
    grace = Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"
    images["grace_hopper"] = np.asarray(Image.open(grace).convert("RGB"))
    return images


def _resize(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``image`` (HxWx3 uint8) resized to ``size`` = (width, height), bilinear."""
    return np.asarray(Image.fromarray(image).resize(size, Image.BILINEAR))


def detector_images(count: int = 16, size: int = 320, seed: int = 0) -> np.ndarray:
    """``count`` RGB images ``(N, 3, size, size)`` in [0, 1]: each photo whole (squashed),
    then random square crops of 50-100 % of the short side, mirrored half the time."""
    rng = np.random.default_rng(seed)
    sources = list(photos().values())
    out = [_resize(img, (size, size)) for img in sources]
    while len(out) < count:
        img = sources[len(out) % len(sources)]
        h, w = img.shape[:2]
        side = int(min(h, w) * rng.uniform(0.5, 1.0))
        top, left = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
        crop = img[top : top + side, left : left + side]
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        out.append(_resize(np.ascontiguousarray(crop), (size, size)))
    return np.stack(out[:count]).transpose(0, 3, 1, 2).astype(np.float32) / 255.0


# ------------------------------------------------------------------ text
@cache
def font(size: int) -> ImageFont.FreeTypeFont:
    import matplotlib

    return ImageFont.truetype(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"), size)


def random_text(rng: np.random.Generator, max_chars: int = 14) -> str:
    """One to three words of letters (lower, capitalized or upper case) or digits."""
    words = []
    for _ in range(rng.integers(1, 4)):
        kind = rng.integers(0, 4)
        if kind == 0:
            word = "".join(rng.choice(list(string.digits), rng.integers(2, 6)))
        else:
            word = "".join(rng.choice(list(string.ascii_lowercase), rng.integers(3, 8)))
            word = word.upper() if kind == 1 else word.capitalize() if kind == 2 else word
        if words and len(" ".join([*words, word])) > max_chars:
            break
        words.append(word)
    return " ".join(words)


def render_line(text: str, size: int = 32, margin: int = 4) -> np.ndarray:
    """``text`` black on white, cropped to its ink plus ``margin``: HxWx3 uint8."""
    f = font(size)
    left, top, right, bottom = f.getbbox(text)
    image = Image.new("RGB", (right - left + 2 * margin, bottom - top + 2 * margin), "white")
    ImageDraw.Draw(image).text((margin - left, margin - top), text, fill="black", font=f)
    return np.asarray(image)


def normalize_line(line: np.ndarray, height: int, width: int) -> np.ndarray:
    """PaddleOCR's ``resize_norm_img``: to ``height`` keeping the aspect (at most ``width``
    wide), ``(x / 255 - 0.5) / 0.5``, padded on the right with 0 to ``width``: (3, H, W)."""
    h, w = line.shape[:2]
    resized_w = min(width, math.ceil(height * w / h))
    resized = _resize(line, (resized_w, height)).astype(np.float32).transpose(2, 0, 1)
    out = np.zeros((3, height, width), np.float32)
    out[:, :, :resized_w] = (resized / 255.0 - 0.5) / 0.5
    return out


def text_lines(count: int = 30, seed: int = 0, max_chars: int = 14) -> tuple[np.ndarray, list[str]]:
    """``count`` rendered lines for the recognizer, ``(N, 3, 48, 320)``, and their texts."""
    rng = np.random.default_rng(seed)
    texts = [random_text(rng, max_chars) for _ in range(count)]
    return np.stack([normalize_line(render_line(t), 48, 320) for t in texts]), texts


def oriented_lines(count: int = 32, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``count`` lines for the orientation classifier, ``(N, 3, 48, 192)``, every other one
    turned by 180 degrees, and the labels (0: upright, 1: turned)."""
    rng = np.random.default_rng(seed)
    labels = np.arange(count) % 2
    lines = []
    for label in labels:
        line = render_line(random_text(rng, max_chars=10))
        lines.append(normalize_line(np.ascontiguousarray(line[::-1, ::-1]) if label else line, 48, 192))
    return np.stack(lines), labels


@dataclass
class Page:
    image: np.ndarray  # (3, H, W), normalized as PP-OCR's detector expects
    boxes: list[tuple[int, int, int, int]]  # each line's ink: left, top, right, bottom


def text_pages(count: int = 8, size: int = 320, seed: int = 2) -> list[Page]:
    """``count`` white pages of ``size`` x ``size`` with 3-5 text lines each (font 16-30 px),
    stacked top to bottom at random indents, and the lines' ink boxes."""
    rng = np.random.default_rng(seed)
    pages = []
    for _ in range(count):
        image = Image.new("RGB", (size, size), "white")
        draw, boxes, y = ImageDraw.Draw(image), [], int(rng.integers(8, 24))
        for _ in range(rng.integers(3, 6)):
            f = font(int(rng.integers(16, 31)))
            text = random_text(rng, max_chars=16)
            left, top, right, bottom = f.getbbox(text)
            if y + bottom - top + 8 > size or right - left + 16 > size:
                break
            x = int(rng.integers(8, size - (right - left) - 7))
            draw.text((x - left, y - top), text, fill="black", font=f)
            boxes.append((x, y, x + right - left, y + bottom - top))
            y += bottom - top + int(rng.integers(14, 40))
        rgb = np.asarray(image).astype(np.float32).transpose(2, 0, 1)
        pages.append(Page((rgb / 255.0 - 0.5) / 0.5, boxes))
    return pages


# ------------------------------------------------------------------ faces
def face_crops(count: int = 48, size: int = 48, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """``count`` crops ``(N, 3, size, size)`` scaled as MTCNN does (``(x - 127.5) / 128``),
    half of them faces (Grace Hopper's, shifted by up to 8 %, scaled 90-110 %, mirrored
    half the time), half not (random squares of the other photos and of the portrait's
    flag and uniform), and the labels (1: face)."""
    rng = np.random.default_rng(seed)
    images = photos()
    grace = images["grace_hopper"]
    left, top, right, bottom = FACE_BOX
    crops, labels = [], []
    for i in range(count):
        if i % 2 == 0:
            side = (right - left) * rng.uniform(0.9, 1.1)
            cx = (left + right) / 2 + rng.uniform(-0.08, 0.08) * side
            cy = (top + bottom) / 2 + rng.uniform(-0.08, 0.08) * side
            box = (cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2)
            source = grace
        else:
            source = images[["china", "flower", "grace_hopper"][i // 2 % 3]]
            h, w = source.shape[:2]
            side = rng.uniform(40, 200)
            while True:
                x, y = rng.uniform(0, w - side), rng.uniform(0, h - side)
                box = (x, y, x + side, y + side)
                if source is not grace or _overlap(box, FACE_BOX) < 0.1:
                    break
        crop = np.asarray(Image.fromarray(source).resize((size, size), Image.BILINEAR, box=box))
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        crops.append(crop)
        labels.append(1 - i % 2)
    x = (np.stack(crops).astype(np.float32).transpose(0, 3, 1, 2) - 127.5) * 0.0078125
    return x, np.array(labels)


def _overlap(a, b) -> float:
    """Intersection over the area of ``a``."""
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    return w * h / ((a[2] - a[0]) * (a[3] - a[1]))


# ------------------------------------------------------------------ tones
SAMPLE_RATE = 16000
FRAME = 1024


def tones(count: int = 64, seed: int = 4, noise: float = 0.02) -> tuple[np.ndarray, np.ndarray]:
    """``count`` frames ``(N, 1024)`` normalized per frame (zero mean, unit std, as
    torchcrepe does), each a tone of 100-1000 Hz (log-uniform) with 2-4 harmonics of
    random amplitude and phase plus white noise ``noise`` times the tone's peak, and the
    fundamentals in Hz."""
    rng = np.random.default_rng(seed)
    f0 = np.exp(rng.uniform(np.log(100), np.log(1000), count))
    t = np.arange(FRAME) / SAMPLE_RATE
    frames = []
    for f in f0:
        wave = np.zeros(FRAME)
        for k in range(1, rng.integers(2, 5) + 1):
            amplitude = 1.0 if k == 1 else rng.uniform(0.1, 0.6)
            wave += amplitude * np.sin(2 * np.pi * k * f * t + rng.uniform(0, 2 * np.pi))
        wave += noise * np.abs(wave).max() * rng.standard_normal(FRAME)
        frames.append((wave - wave.mean()) / max(wave.std(), 1e-10))
    return np.stack(frames).astype(np.float32), f0
