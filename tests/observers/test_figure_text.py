"""`figure_text.stamp` draws a string where, and as, a matplotlib Text would."""

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from model_compression_toolkit.observers.figure_text import stamp

WIDTH, HEIGHT, DPI = 300, 40, 100


def _drawn(draw) -> np.ndarray:
    fig = Figure(figsize=(WIDTH / DPI, HEIGHT / DPI), dpi=DPI)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    draw(fig, canvas)
    return np.asarray(canvas.buffer_rgba())[..., :3].astype(int)


def _text(x, y, text, size_px, colour="black", **kw):
    def draw(fig, canvas):
        artist = fig.text(x / WIDTH, 1 - y / HEIGHT, text, fontsize=size_px * 72 / DPI, color=colour, **kw)
        artist.set_animated(True)
        fig.draw_artist(artist)

    return _drawn(draw)


def _stamped(x, y, text, size_px, colour="black", **kw):
    return _drawn(lambda fig, canvas: stamp(canvas, x, y, text, size_px, colour, **kw))


def _ink_box(pixels: np.ndarray) -> tuple[int, int, int, int]:
    rows, cols = np.nonzero((pixels < 200).any(axis=-1))
    return rows.min(), rows.max(), cols.min(), cols.max()


@pytest.mark.parametrize(
    ("text", "size", "weight", "colour"),
    [
        ("p2o/GlobalAveragePool/0 (OnnxGlobalAveragePool), 240 channels", 12, "normal", "black"),
        ("grid top 5.927, 255 steps", 10, "normal", "black"),
        ("Cosine similarity, sample 13", 12, "bold", "black"),
        ("lowest: …ock/conv2/Conv, 0.99871", 10, "normal", "tab:red"),
    ],
)
def test_a_title_at_a_whole_pixel_is_the_texts_pixels(text, size, weight, colour):
    want = _text(6, 4, text, size, colour, va="top", weight=weight)
    got = _stamped(6, 4, text, size, colour, weight=weight)
    ink = (want < 250).any(axis=-1).sum()
    off = (np.abs(want - got) > 2).any(axis=-1)  # beyond the blend's rounding
    assert off.sum() <= 0.02 * ink and np.abs(want - got).max() <= 32  # a glyph edge a shade apart, at most


@pytest.mark.parametrize(("ha", "va"), [("right", "top"), ("center", "center"), ("right", "center_baseline")])
def test_aligned_text_lands_within_a_pixel_of_the_texts(ha, va):
    for text, y in (("239", 20.0), ("…conv2/Conv", 17.3), ("gy|", 22.5)):
        want = _ink_box(_text(150, y, text, 11, ha=ha, va=va))
        got = _ink_box(_stamped(150, y, text, 11, ha=ha, va=va))
        assert max(abs(w - g) for w, g in zip(want, got)) <= 1, (text, want, got)


@pytest.mark.parametrize(("va", "y"), [("top", 2), ("bottom", 39), ("center", 20)])
def test_lines_are_a_line_gap_apart_as_matplotlib_stacks_them(va, y):
    text = "conv1: 16 of 16 filters\neach scaled by its float max |w|\nlargest error 0.78 %"
    want, got = _text(150, y, text, 10, ha="center", va=va), _stamped(150, y, text, 10, ha="center", va=va)
    rows = [np.nonzero((pixels < 200).any(axis=-1))[0] for pixels in (want, got)]
    starts = [r[np.r_[0, np.nonzero(np.diff(r) > 1)[0] + 1]] for r in rows]  # each line's first ink row
    assert len(starts[0]) == len(starts[1]) == 3
    assert np.abs(starts[0] - starts[1]).max() <= 1


@pytest.mark.filterwarnings("ignore:Glyph .* missing from font")
def test_a_character_the_font_lacks_is_drawn_by_matplotlib():
    text = "层 conv"  # no CJK in DejaVu Sans: matplotlib's own Text (its fallback fonts) draws it
    assert np.array_equal(_stamped(6, 4, text, 12), _text(6, 4, text, 12, va="top"))


def test_a_matplotlib_whose_freetype_calls_changed_still_gets_its_text(monkeypatch):
    from model_compression_toolkit.observers import figure_text

    def changed(*args, **kwargs):
        raise AttributeError("'FT2Font' object has no attribute 'draw_glyphs_to_bitmap'")

    monkeypatch.setattr(figure_text, "_ink", changed)
    assert np.array_equal(_stamped(6, 4, "conv1 (Conv2d)", 12), _text(6, 4, "conv1 (Conv2d)", 12, va="top"))


def test_the_typographic_metrics_are_read_where_matplotlib_leaves_them_out():
    """Matplotlib 3.9 (the package asks for >= 3.7) reads a font's OS/2 table without
    its typographic ascent, descent and line gap: they are then read from the font file, the
    same figures matplotlib 3.11 gives, and a logged call draws its pictures as on 3.11."""
    import matplotlib.font_manager as fm
    from matplotlib.ft2font import FT2Font

    from model_compression_toolkit.observers import figure_text

    path = fm.findfont("DejaVu Sans")
    font = FT2Font(path)
    table = font.get_sfnt_table("OS/2")
    assert table and "sTypoAscender" in table  # this environment's matplotlib (3.11) reads them
    scale = 12.0 / font.units_per_EM
    expected = figure_text._typo_metrics(font, path, scale)

    class Matplotlib39Font:  # what FT2Font.get_sfnt_table("OS/2") gives on matplotlib 3.9
        def get_sfnt_table(self, name: str) -> dict:
            return {key: value for key, value in table.items() if not key.startswith("sTypo")}

    assert figure_text._typo_metrics(Matplotlib39Font(), path, scale) == expected
    assert expected[0] > 0 and expected[1] > 0  # an ascent and a descent, in pixels
