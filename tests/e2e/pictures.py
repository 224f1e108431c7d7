"""Reading colours and layout off pixels: screenshots, and the PNGs the page shows.

Nothing here knows how the library draws its figures: the plot's frame is found as the
longest dark vertical lines, its rows of text as bands of dark pixels.
"""

from __future__ import annotations

import colorsys
import re
from dataclasses import dataclass

import numpy as np

DARK = 110  # a pixel darker than this (every channel) is ink: text
SPINE = 170  # a plot's frame, anti-aliased over two columns of pixels, is at least this dark


def rgb(css: str) -> tuple[int, int, int]:
    """``rgb(245, 190, 163)`` or ``#f5bea3`` as a tuple."""
    if css.startswith("#"):
        return tuple(int(css[i : i + 2], 16) for i in (1, 3, 5))
    r, g, b = (int(v) for v in re.findall(r"\d+", css)[:3])
    return r, g, b


def hue(colour: tuple[int, int, int]) -> tuple[float, float]:
    """(hue in degrees, saturation) of an RGB colour."""
    h, _, s = colorsys.rgb_to_hls(*(c / 255 for c in colour))
    return 360 * h, s


def warm(colour: tuple[int, int, int]) -> bool:
    """Red through orange to yellow, and not grey."""
    h, s = hue(colour)
    return s > 0.15 and (h <= 60 or h >= 330)


def cool(colour: tuple[int, int, int]) -> bool:
    """Cyan through blue, or a blue-grey."""
    h, s = hue(colour)
    return s > 0.05 and 180 <= h <= 270


def reddish(pixels: np.ndarray) -> np.ndarray:
    """Mask of the pixels that are clearly red, from dark red to matplotlib's red (not orange)."""
    r, g, b = (pixels[..., i].astype(int) for i in range(3))
    return (r > 120) & (g < 70) & (b < 70)


def bluish(pixels: np.ndarray) -> np.ndarray:
    r, g, b = (pixels[..., i].astype(int) for i in range(3))
    return (b > 120) & (b - r > 70)


@dataclass
class Frame:
    """A plot's axes frame in a picture: its spines' pixel columns and rows."""

    left: int
    right: int
    top: int
    bottom: int


def ink(image) -> np.ndarray:
    """Boolean (height, width): the dark pixels of a PIL image."""
    a = np.asarray(image.convert("RGB"), dtype=np.int16)
    return (a < DARK).all(axis=2)


def _longest_run(column: np.ndarray) -> int:
    """The longest run of dark pixels in a column."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], column.astype(np.int8), [0]))))
    return int((edges[1::2] - edges[::2]).max()) if len(edges) else 0


def plot_frame(image) -> Frame:
    """The axes frame: the columns with the most dark pixels (the left and right spines, which
    what is drawn over the plot may interrupt), and the rows dark from one to the other (the
    top and bottom spines). A line drawn between two pixel columns is grey in both, so the
    threshold is lighter than ink's."""
    dark = (np.asarray(image.convert("RGB"), dtype=np.int16) < SPINE).all(axis=2)
    counts = np.array([_longest_run(column) for column in dark.T])  # a column of dots is no spine
    spines = np.flatnonzero(counts >= 0.6 * counts.max())
    left, right = int(spines.min()), int(spines.max())
    across = np.flatnonzero(dark[:, left : right + 1].sum(axis=1) >= 0.9 * (right - left + 1))
    return Frame(left, right, int(across.min()), int(across.max()))


def text_bands(image, x0: int, x1: int, y0: int, y1: int, min_gap: int = 3) -> list[tuple[int, int]]:
    """The rows of text between columns x0..x1 and rows y0..y1: (first row, last row) of each
    band of rows holding ink, bands closer than ``min_gap`` rows merged."""
    dark = ink(image)[y0 : y1 + 1, x0 : x1 + 1].any(axis=1)
    bands: list[list[int]] = []
    for i, row in enumerate(dark):
        if row:
            if bands and i - bands[-1][1] <= min_gap:
                bands[-1][1] = i
            else:
                bands.append([i, i])
    return [(y0 + a, y0 + b) for a, b in bands]


def pixels(image) -> np.ndarray:
    return np.asarray(image.convert("RGB"))
