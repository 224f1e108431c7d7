"""The similarity pictures, drawn to be read in TensorBoard's image card (350 px wide).

    Cosine similarity/0_summary     one row per compare point, top to bottom in topological
                                    order: the mean cosine coloured by the accumulated error,
                                    the min-max band over the samples, the worst sample, the
                                    local cosine; the worst *cause* and the row where the
                                    accumulated error starts are marked
    Cosine similarity/1_samples     the same rows for one sample, the mean in grey behind;
                                    one card, a step per sample (step = the sample's index),
                                    the SAMPLE_STEPS samples with the lowest cosine
    Filters/<conv>                  float filters beside their quantized version

Layer names run down the left, so a picture grows taller, never narrower, with the model;
every text is 10 px or more at the card's width. Figures use matplotlib's object API (no
pyplot, no global state); the rows, names and grid are drawn once and every plot only
draws its own points over them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from model_compression_toolkit.core.calibration.quantizers import node_weight
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.core.numbers import finite_or_none
from model_compression_toolkit.core.similarity.report import (
    ERROR_CLASS_THRESHOLDS_DB,
    LayerSimilarity,
    SimilarityReport,
)
from model_compression_toolkit.observers.figure_text import stamp
from model_compression_toolkit.observers.protos import PaletteCanvas, canvas_png

CARD_PX = 350  # TensorBoard's image card: a wider image is shrunk to this width
DPI = 100
FONT_PX = 11  # the smallest text is FONT_PX - 1
ROW_PX = 16
HEADER_PX = 58
FOOTER_PX = 104
RIGHT_PX = 90  # room for the notes right of the rows
MAX_LABEL_CHARS = 16
CLASS_COLOURS = {"low": "tab:blue", "medium": "tab:orange", "high": "tab:red"}
MAX_FILTERS = 64
FILTER_PANEL_PX = 150
FILTER_LAYERS = 2
SUMMARY_TAG = "Cosine similarity/0_summary"
SAMPLES_TAG = "Cosine similarity/1_samples"
# TensorBoard keeps 10 images per tag by default (--samples_per_plugin): with more steps it
# would drop some at random, so the 10 samples with the lowest cosine are written.
SAMPLE_STEPS = 10


def worst_samples(matrix: np.ndarray, count: int = SAMPLE_STEPS) -> list[int]:
    """The ``count`` samples (columns of ``matrix``) whose lowest cosine over the layers is
    lowest, in sample order; samples with no finite value come last."""
    if matrix.size == 0:
        return []
    lowest = np.where(np.isfinite(matrix), matrix, np.inf).min(axis=0)
    return sorted(np.argsort(lowest, kind="stable")[:count].tolist())


def _pt(px: float) -> float:
    """Points for a size in pixels at DPI (matplotlib sizes text in points)."""
    return px * 72 / DPI


def _short(name: str, chars: int = MAX_LABEL_CHARS) -> str:
    """The end of a long layer name (its most specific part)."""
    return name if len(name) <= chars else "…" + name[-(chars - 1) :]


def _nan(value: object) -> float:
    number = finite_or_none(value)
    return np.nan if number is None else number


def ordered(report: SimilarityReport) -> list[LayerSimilarity]:
    return sorted(report.layers, key=lambda layer: layer.position)


def cosine_matrix(report: SimilarityReport) -> np.ndarray:
    """(layers, samples) cosines in topological order; missing or non-finite values are NaN."""
    samples = report.samples or max((len(layer.cosine_per_sample) for layer in report.layers), default=0)
    matrix = np.full((len(report.layers), samples), np.nan)
    for row, layer in zip(matrix, ordered(report)):
        values = np.array([_nan(v) for v in layer.cosine_per_sample[:samples]])
        row[: values.size] = values
    return matrix


def _xlim(*arrays: np.ndarray) -> tuple[float, float]:
    """Limits showing every finite value and 1.0, zoomed so that small differences show."""
    values = np.concatenate([np.ravel(a) for a in arrays] + [np.array([1.0])])
    values = values[np.isfinite(values)]
    lo, hi = float(values.min()), float(values.max())
    pad = max(hi - lo, 1e-4) * 0.06
    return lo - pad, hi + pad


class CosinePlots:
    """The summary plot and the per-sample plots, drawn on one figure (see the module doc)."""

    def __init__(self, report: SimilarityReport) -> None:
        self.report = report
        self.layers = layers = ordered(report)
        self.matrix = matrix = cosine_matrix(report)
        has = np.isfinite(matrix).any(axis=1) if matrix.size else np.zeros(len(layers), bool)
        safe = np.where(np.isfinite(matrix), matrix, np.inf)
        self.lows = np.array(
            [safe[i].min() if has[i] else _nan(lay.cosine_min) for i, lay in enumerate(layers)]
        )
        self.highs = np.array([np.nanmax(matrix[i]) if has[i] else np.nan for i in range(len(layers))])
        means = np.array([_nan(lay.cosine_mean) for lay in layers])
        row_means = np.array([np.nanmean(matrix[i]) if has[i] else np.nan for i in range(len(layers))])
        self.means = np.where(np.isfinite(means), means, row_means)
        self.local = np.array([_nan(lay.local_cosine_mean) for lay in layers])
        self.y = np.arange(len(layers))
        n = max(len(layers), 1)
        height = HEADER_PX + n * ROW_PX + FOOTER_PX
        label_px = 14 + 0.6 * FONT_PX * max((len(_short(lay.name)) for lay in layers), default=4)
        self.fig = fig = Figure(figsize=(CARD_PX / DPI, height / DPI), dpi=DPI)
        self.canvas = FigureCanvasAgg(fig)
        fig.subplots_adjust(left=label_px / CARD_PX, right=1 - RIGHT_PX / CARD_PX, top=1 - HEADER_PX / height,
                            bottom=FOOTER_PX / height)  # fmt: skip
        self.ax = ax = fig.add_subplot()
        ax.set_yticks([])  # the rows' ticks are one line, their names stamped (`_row_names`)
        ax.add_line(_row_ticks(ax, self.y))
        ax.set_ylim(n - 0.5, -0.5)
        ax.set_xlim(*_xlim(matrix, self.lows, self.highs, self.means, self.local))
        ax.ticklabel_format(axis="x", useOffset=False)
        ax.tick_params(axis="x", labelsize=_pt(FONT_PX - 1))
        ax.xaxis.set_major_locator(_ticks())
        ax.set_xlabel("cosine similarity (1 = same direction)", fontsize=_pt(FONT_PX))
        ax.grid(True, axis="x", alpha=0.3)
        ax.axvline(1.0, color="0.4", lw=0.8, ls="--")
        self.canvas.draw()
        self._row_names([_short(lay.name) for lay in layers])
        self.axes_only = self.canvas.copy_from_bbox(fig.bbox)

    def _row_names(self, names: list[str]) -> None:
        """Each row's name left of its tick, as matplotlib draws a y tick label (right-aligned,
        ``center_baseline``, the tick's length and pad away), stamped: a Text each costs ten times."""
        from matplotlib import rcParams

        ax, height = self.ax, self.fig.bbox.height
        right = ax.bbox.x0 - (rcParams["ytick.major.size"] + rcParams["ytick.major.pad"]) * DPI / 72
        colour = (
            rcParams["ytick.labelcolor"]
            if rcParams["ytick.labelcolor"] != "inherit"
            else rcParams["ytick.color"]
        )
        rows = ax.transData.transform(np.stack([np.zeros(len(names)), self.y[: len(names)]], 1))[:, 1]
        for name, row in zip(names, rows):
            stamp(self.canvas, right, height - row, name, FONT_PX, colour, ha="right", va="center_baseline")

    def _text(self, x: float, y: float, text: str, size: float = FONT_PX, **kw) -> None:
        """A text at (x, y) in pixels from the top left (its top), stamped on the canvas."""
        stamp(self.canvas, x, y, text, size, **kw)

    def _draw(self, background, *artists) -> None:
        """Draw ``artists`` over ``background``; they stay out of any later background."""
        self.canvas.restore_region(background)
        for artist in artists:
            artist.set_animated(True)
            self.fig.draw_artist(artist)

    def _legend(self, handles: list, ncol: int = 2) -> object:
        return self.fig.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=ncol,
                               fontsize=_pt(FONT_PX - 1), frameon=False, handlelength=1.3, columnspacing=0.9)  # fmt: skip

    def _mark(self, row: int, text: str, colour: str) -> None:
        """A note right of the axes, level with ``row`` (stamped)."""
        y = self.fig.bbox.height - self.ax.transData.transform((0.0, row))[1]
        stamp(self.canvas, self.ax.bbox.x1 + 4 * DPI / 72, y, text, FONT_PX - 1, colour, va="center")

    def summary(self) -> bytes:
        """The mean per layer coloured by its accumulated error, the band, the worst sample,
        the local cosine, the worst cause and the start of the drop marked."""
        ax, y, layers = self.ax, self.y, self.layers
        ok = np.isfinite(self.lows) & np.isfinite(self.highs)
        band = ax.hlines(y[ok], self.lows[ok], self.highs[ok], color="tab:blue", alpha=0.25, lw=7)
        (line,) = ax.plot(self.means, y, "-", lw=1, color="0.55")
        colours = [CLASS_COLOURS[layer.accumulated_class] for layer in layers]
        dots = ax.scatter(self.means, y, c=colours, s=22, zorder=3)
        (worst,) = ax.plot(self.lows, y, "|", ms=8, mew=1.2, color="0.2")
        (local,) = ax.plot(self.local, y, "o", ms=5, mfc="none", mec="tab:purple", mew=1)
        artists = [band, line, dots, worst, local]
        names = [layer.name for layer in layers]
        start = self.report.drop_start()
        marks = []  # (row, text, colour), stamped once the artists are drawn
        if start is not None:
            row = names.index(start.name)
            artists.append(ax.axhline(row - 0.5, color="tab:red", lw=1, ls=":"))
            marks.append((row, "drift starts", "tab:red"))
        causes = [q for q in self.report.causes() if q.name in names]
        if causes:
            marks.append((names.index(causes[0].name), "◀ worst cause", "darkred"))
        low, medium = ERROR_CLASS_THRESHOLDS_DB["low"], ERROR_CLASS_THRESHOLDS_DB["medium"]
        handles = [
            Line2D([], [], ls="none", marker="o", color=CLASS_COLOURS["low"], label=f"accumulated error low (≥ {low:g} dB)"),
            Line2D([], [], ls="none", marker="o", color=CLASS_COLOURS["medium"], label=f"medium ({medium:g}-{low:g} dB)"),
            Line2D([], [], ls="none", marker="o", color=CLASS_COLOURS["high"], label=f"high (< {medium:g} dB)"),
            Line2D([], [], color="tab:blue", alpha=0.35, lw=6, label=f"min-max, {self.matrix.shape[1]} samples"),
            Line2D([], [], ls="none", marker="|", color="0.2", label="worst sample"),
            Line2D([], [], ls="none", marker="o", mfc="none", mec="tab:purple", label="local: layer alone"),
        ]  # fmt: skip
        artists.append(self._legend(handles))
        self._draw(self.axes_only, *artists)
        for row, text, colour in marks:
            self._mark(row, text, colour)
        self._text(8, 6, "Cosine similarity, quantized vs float model", FONT_PX + 1, weight="bold")
        sub = f"mean over {self.matrix.shape[1]} samples, per layer; colour: accumulated error"
        self._text(8, 26, sub, FONT_PX - 1)
        if causes:
            text = f"worst cause: {_short(causes[0].name, 24)} ({causes[0].kind}), output {causes[0].output_sqnr_db:.1f} dB alone"
            self._text(8, 41, text, FONT_PX - 1, colour="darkred")
        return canvas_png(self.canvas)

    def samples(self, indices: list[int] | None = None) -> list[bytes]:
        """One plot per sample (of ``indices``; default: every sample): its cosine at every
        layer, its lowest layer named, the mean over the samples in grey behind it."""
        ax, y, layers, matrix = self.ax, self.y, self.layers, self.matrix
        if not layers or matrix.shape[1] == 0:
            return []
        (mean,) = ax.plot(self.means, y, "-", lw=1.5, color="0.75")
        (line,) = ax.plot(matrix[:, 0], y, "-o", ms=3, lw=1, color="tab:blue")
        (low,) = ax.plot([], [], "o", ms=7, mfc="none", mec="tab:red", mew=1.5)
        handles = [Line2D([], [], color="tab:blue", marker="o", ms=3, label="this sample"),
                   Line2D([], [], color="0.75", lw=1.5, label=f"mean of {matrix.shape[1]}"),
                   Line2D([], [], ls="none", marker="o", mfc="none", mec="tab:red", label="its lowest layer")]  # fmt: skip
        static = [mean, self._legend(handles, ncol=3)]
        self._draw(self.axes_only, *static)
        background = self.canvas.copy_from_bbox(self.fig.bbox)
        encoder = PaletteCanvas(self.canvas)
        pngs = []
        for i in range(matrix.shape[1]) if indices is None else indices:
            values = matrix[:, i]
            line.set_xdata(values)
            if np.isfinite(values).any():
                k = int(np.nanargmin(values))
                low.set_data([values[k]], [k])
                note = f"lowest: {_short(layers[k].name, 24)}, {values[k]:.5f}"
            else:
                low.set_data([], [])
                note = "no finite value"
            self._draw(background, line, low)
            self._text(8, 6, f"Cosine similarity, sample {i}", FONT_PX + 1, weight="bold")
            self._text(8, 26, note, FONT_PX - 1, colour="tab:red")
            pngs.append(encoder.png())
        return pngs


def _row_ticks(ax, rows: np.ndarray) -> Line2D:
    """Every row's y tick mark as one line of markers, as matplotlib draws a tick (``tick1line``)."""
    from matplotlib import rcParams
    from matplotlib.lines import TICKLEFT

    size, width, colour = rcParams["ytick.major.size"], rcParams["ytick.major.width"], rcParams["ytick.color"]
    return Line2D(np.zeros(len(rows)), rows, transform=ax.get_yaxis_transform(which="tick1"), ls="none",
                  marker=TICKLEFT, ms=size, mew=width, color=colour, zorder=1.5, clip_on=False)  # fmt: skip


def _ticks():
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(nbins=4)


# ---------------------------------------------------------------- filters
def filter_nodes(graph: Graph, limit: int = FILTER_LAYERS) -> list[Node]:
    """The first ``limit`` convolutions with a 4-D kernel, in topological order."""
    convs = [n for n in graph.find([OpKind.CONV]) if np.ndim(n.weights.get("kernel")) == 4]
    return convs[:limit]


def filter_tiles(kernel: np.ndarray, out_axes: tuple[int, ...]) -> np.ndarray:
    """(filters, kh, kw): the first input channel of each output channel's filter.

    PyTorch kernels are (out, in, kh, kw) with ``out_axes`` (0,); Keras kernels are
    (kh, kw, in, out) with (3,) (depthwise (kh, kw, in, mult) with (2, 3)).
    """
    k = np.asarray(kernel, dtype=np.float64)
    axes = tuple(a % 4 for a in out_axes) or (0,)
    spatial = (0, 1) if min(axes) >= 2 else (2, 3)
    rest = tuple(a for a in range(4) if a not in axes and a not in spatial)
    moved = np.transpose(k, axes + rest + spatial)
    n_out = int(np.prod([k.shape[a] for a in axes]))
    return moved.reshape(n_out, -1, k.shape[spatial[0]], k.shape[spatial[1]])[:, 0]


def tile_grid(tiles: np.ndarray) -> np.ndarray:
    """Tiles (n, h, w) laid out in a near-square grid, separated by NaN (drawn as background)."""
    n, h, w = tiles.shape
    cols = max(1, math.ceil(math.sqrt(n)))
    rows = max(1, math.ceil(n / cols))
    grid = np.full((rows * (h + 1) - 1, cols * (w + 1) - 1), np.nan)
    for i, tile in enumerate(tiles):
        r, c = divmod(i, cols)
        grid[r * (h + 1) : r * (h + 1) + h, c * (w + 1) : c * (w + 1) + w] = tile
    return grid


def filters_png(
    node: Node,
    quantized_weights: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    max_filters: int = MAX_FILTERS,
) -> bytes:
    """Float filters beside their quantized version; each filter pair is scaled by the
    float filter's max |w|, so rounding and clipping show as colour changes.

    Each weight is a square of whole pixels (`figimage`, no resampling), so every filter
    and every gap between filters has the same size; only the titles are drawn as text.
    """
    kernel = np.nan_to_num(np.asarray(node.weights["kernel"], dtype=np.float64), posinf=0.0, neginf=0.0)
    out_axes = tuple(node.kernel_axes.get("kernel", (0,)))
    wq = node.quant.weights.get("kernel")
    quantize = wq is not None and wq.grid is not None
    panels = [("float" if quantize else "float (not quantized)", filter_tiles(kernel, out_axes))]
    error = 0.0
    if quantize:
        quantized = np.nan_to_num(
            np.asarray(node_weight(node, "kernel", True, quantized_weights), dtype=np.float64),
            posinf=0.0,
            neginf=0.0,
        )
        peak = float(np.max(np.abs(kernel))) or 1.0
        error = float(np.max(np.abs(quantized - kernel))) / peak
        panels.append((f"quantized, {wq.n_bits} bit", filter_tiles(quantized, out_axes)))
    total = panels[0][1].shape[0]
    scale = np.max(np.abs(panels[0][1][:max_filters]), axis=(1, 2), keepdims=True)
    scale = np.where(scale > 0, scale, 1.0)
    cmap = _diverging()
    images = [cmap((tile_grid(tiles[:max_filters] / scale) + 1) / 2, bytes=True) for _, tiles in panels]
    rows, cols = images[0].shape[:2]
    zoom = max(1, FILTER_PANEL_PX // max(rows, cols))
    images = [np.repeat(np.repeat(image, zoom, axis=0), zoom, axis=1) for image in images]
    panel_w, panel_h = cols * zoom, rows * zoom
    margin, header, label = 10, 62, 20  # pixels: border, the title lines, a panel's title
    gap = CARD_PX - 2 * margin - len(images) * panel_w
    width, height = CARD_PX, header + label + panel_h + margin
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI)
    canvas = FigureCanvasAgg(fig)
    shown = min(total, max_filters)
    lines = [f"{_short(node.name, 24)}: {shown} of {total} filters, input channel 0",
             "each scaled by its float max |w|"]  # fmt: skip
    if quantize:
        lines.append(f"largest error {100 * error:.2g} % of max |w|")
    lefts = [
        margin + i * (panel_w + max(gap, 0)) if len(images) > 1 else (width - panel_w) // 2
        for i in range(len(images))
    ]
    for x, image in zip(lefts, images):
        fig.figimage(image, xo=x, yo=margin, origin="upper")
    canvas.draw()
    stamp(canvas, width / 2, 4, "\n".join(lines), FONT_PX - 1, ha="center")  # the texts over the panels
    for x, (title, _) in zip(lefts, panels):
        stamp(
            canvas,
            x + panel_w / 2,
            height - margin - panel_h - 4,
            title,
            FONT_PX - 1,
            ha="center",
            va="bottom",
        )
    return canvas_png(canvas)  # a 256-colour map and black text: the palette loses nothing


def _diverging():
    from matplotlib import colormaps

    return colormaps["RdBu_r"].with_extremes(bad="0.2")
