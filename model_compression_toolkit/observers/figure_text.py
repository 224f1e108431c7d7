"""Text stamped onto an Agg canvas, one bitmap per string: what a matplotlib Text would
draw there, in a third of the time.

Matplotlib 3.11 lays out and renders a Text glyph by glyph, about 70 µs a character: the
per-layer pictures draw a few short strings each, and that was most of their time. `stamp`
renders the whole string with the same FreeType font, size and hinting in one call
(``FT2Font.set_text`` and ``draw_glyphs_to_bitmap``, as matplotlib's Agg did up to 3.10) and
blends it into the canvas's buffer where the Text would have put it (``va="top"``: its box's
top at ``y``; the box's ascent at least the font's, as matplotlib's layout has it).

    canvas.restore_region(background); fig.draw_artist(line)    the plot, by matplotlib
    stamp(canvas, 6, 4, "conv1 (Conv2d)", 12)                   the text, into its pixels
    canvas_png(canvas)

A string with a character the font lacks is drawn by matplotlib itself (its fallback fonts).
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np

_LOCK = threading.Lock()


def stamp(
    canvas: Any,
    x: float,
    y: float,
    text: str,
    size_px: float,
    colour: Any = "black",
    ha: str = "left",
    va: str = "top",
    weight: str = "normal",
) -> None:
    """Draw ``text`` on ``canvas`` (a drawn ``FigureCanvasAgg``) at (``x``, ``y``) pixels from
    the canvas's top left, in ``size_px`` pixels, aligned as a matplotlib Text: ``ha`` (which
    side of the box ``x`` is: ``left``, ``center`` or ``right``; each line's, as matplotlib
    aligns lines) and ``va`` (what ``y`` is: the box's ``top``, ``bottom`` or ``center``, or
    ``center_baseline``, half the last baseline's depth below the top)."""
    from matplotlib import colors, rcParams

    path, dpi, antialiased = _font_path(weight), float(canvas.figure.dpi), rcParams["text.antialiased"]
    try:
        drawn = [_ink(path, float(size_px), dpi, line, antialiased) for line in text.split("\n")]
    except (AttributeError, TypeError, ValueError, RuntimeError):  # a FreeType API another matplotlib
        drawn = [None]  # changed: the text is drawn by matplotlib itself, as the pictures were before
    if any(line is None for line in drawn):
        _matplotlib_text(canvas, x, y, text, size_px, colour, ha, va, weight)
        return
    # matplotlib's layout: a line's box reaches at least the font's ascent and descent, and
    # lines (of a text of several) are a line gap apart
    ascent, descent, gap = drawn[0][-1]
    gap = gap if len(drawn) > 1 else 0.0
    boxes = [(max(h - d, ascent) + gap / 2, max(d, descent) + gap / 2) for _, _, h, d, _, _ in drawn]
    baselines = np.cumsum([0.0] + [below + above for (_, below), (above, _) in zip(boxes, boxes[1:])])
    baselines += boxes[0][0]  # from the box's top
    height = baselines[-1] + boxes[-1][1]
    top = y - {"top": 0.0, "bottom": height, "center": height / 2, "center_baseline": baselines[-1] / 2}[va]
    rgba, rgb = np.asarray(canvas.buffer_rgba()), colors.to_rgb(colour)
    for (ink, width, _, below, offset, _), baseline in zip(drawn, baselines):
        left = round(
            x - {"left": 0.0, "center": width / 2, "right": width}[ha] + offset
        )  # nearest to matplotlib
        bottom = round(top + baseline + below) + 1  # matplotlib's Agg: the bitmap's bottom row, exclusive
        _blend(rgba, ink, left, bottom - ink.shape[0], rgb)


def _blend(rgba: np.ndarray, ink: np.ndarray, left: int, top: int, rgb: tuple[float, ...]) -> None:
    """``rgb`` over ``rgba`` (the canvas's pixels, in place) with ``ink`` as coverage, clipped."""
    h, w = rgba.shape[:2]
    y0, x0 = max(top, 0), max(left, 0)
    y1, x1 = min(top + ink.shape[0], h), min(left + ink.shape[1], w)
    if y1 <= y0 or x1 <= x0:
        return
    cover = ink[y0 - top : y1 - top, x0 - left : x1 - left, None].astype(np.float32) / 255
    pixels = rgba[y0:y1, x0:x1, :3]
    colour = np.asarray(rgb, dtype=np.float32) * 255
    pixels[...] = np.rint(pixels + (colour - pixels) * cover).astype(np.uint8)


def _font_path(weight: str) -> str:
    """The file matplotlib draws a Text of this weight from (as rcParams stand now)."""
    from matplotlib import font_manager

    return font_manager.findfont(font_manager.FontProperties(weight=weight))


@functools.lru_cache(maxsize=512)
def _ink(path: str, size_px: float, dpi: float, text: str, antialiased: bool) -> tuple | None:
    """(the string's bitmap, its width, height and descent, the bitmap's x offset, in pixels,
    and the font's ascent, descent and line gap) or None where the font lacks a character; a
    string drawn again (a first or last channel's number) is rendered once."""
    from matplotlib.backends.backend_agg import get_hinting_flag

    font, typo = _font(path, size_px, dpi)
    if not text:
        return np.zeros((0, 0), np.uint8), 0.0, 0.0, 0.0, 0.0, typo
    if any(font.get_char_index(ord(c)) == 0 for c in text):
        return None
    with _LOCK:  # one font object per size: one string at a time
        font.set_text(text, 0.0, flags=get_hinting_flag())
        font.draw_glyphs_to_bitmap(antialiased=antialiased)
        ink = np.array(font.get_image())  # a copy: the font's own image is redrawn by the next string
        width, height = (v / 64 for v in font.get_width_height())
        return ink, width, height, font.get_descent() / 64, font.get_bitmap_offset()[0] / 64, typo


@functools.lru_cache(maxsize=32)
def _font(path: str, size_px: float, dpi: float) -> tuple[Any, tuple[float, float, float]]:
    """(a font of its own, sized, so that no matplotlib Text resizes it; its ascent and
    descent in pixels, the least matplotlib's layout gives a line, and its line gap)."""
    from matplotlib.ft2font import FT2Font

    font = FT2Font(path)
    font.set_size(size_px * 72 / dpi, dpi)
    return font, _typo_metrics(font, path, size_px / font.units_per_EM)


_TYPO = ("sTypoAscender", "sTypoDescender", "sTypoLineGap")


def _typo_metrics(font: Any, path: str, scale: float) -> tuple[float, float, float]:
    """The font's typographic ascent, descent and line gap (its OS/2 table) times
    ``scale``; zeros for a font without the table. Matplotlib 3.9 reads the OS/2 table
    without these three fields (3.9.4 checked; 3.11 has them; the package asks for
    ``matplotlib>=3.7``): there fontTools, which matplotlib requires, reads them from the file."""
    os2 = font.get_sfnt_table("OS/2")
    if os2 and not all(key in os2 for key in _TYPO):
        os2 = _typo_from_file(path)
    if not os2:
        return 0.0, 0.0, 0.0
    return os2["sTypoAscender"] * scale, -os2["sTypoDescender"] * scale, os2["sTypoLineGap"] * scale


def _typo_from_file(path: str) -> dict[str, int] | None:
    from fontTools.ttLib import TTFont

    try:
        with TTFont(path, lazy=True, fontNumber=0) as face:
            table = face["OS/2"] if "OS/2" in face else None
            return None if table is None else {key: int(getattr(table, key)) for key in _TYPO}
    except Exception:  # noqa: BLE001 - a font fontTools cannot read: no typographic metrics
        return None


def _matplotlib_text(canvas: Any, x: float, y: float, text: str, size_px: float, colour: Any, ha: str, va: str,
                     weight: str) -> None:  # fmt: skip
    fig = canvas.figure
    width, height = fig.bbox.width, fig.bbox.height
    artist = fig.text(x / width, 1 - y / height, text, fontsize=size_px * 72 / fig.dpi, color=colour, ha=ha,
                      va=va, weight=weight)  # fmt: skip
    artist.set_animated(True)
    fig.draw_artist(artist)
    artist.remove()
