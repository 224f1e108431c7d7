"""Per-channel ranges as a picture: what the Scalars' per-channel series hide.

    Images  Per-channel ranges/<k>_<layer>   x = channel, a bar from min to max, the mean as
                                            a dot, y = the value over the grid's top (dashed
                                            at 1), the band that rounds to zero in grey,
                                            outlier channels in red and named

Drawn for TensorBoard's image card (350 px wide) with text of 10 px or more. Outliers
(`core.calibration.statistics.outlier_channels`) come first in the tags, widest first.
One figure is redrawn for every layer (matplotlib's object API, no pyplot): one axis
scale for all, so a layer costs a few milliseconds, not a whole figure.
"""

from __future__ import annotations

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from model_compression_toolkit.core.calibration.statistics import (
    NodeStatistics,
    outlier_channels,
    range_spread,
)
from model_compression_toolkit.core.graph import Graph, Node
from model_compression_toolkit.observers.figure_text import stamp
from model_compression_toolkit.observers.protos import canvas_png

MAX_IMAGES = 48  # pictures of layers without outlier channels, at most

CARD_PX = 350  # the width of TensorBoard's image card: images drawn wider are shrunk
HEIGHT_PX = 290
DPI = 100
FONT_PX = 11
TAG = "Per-channel ranges"
LINTHRESH = 0.01  # the y axis is linear within a hundredth of the grid's top, logarithmic beyond
TICKS = (-1.0, -0.1, -0.01, 0.0, 0.01, 0.1, 1.0)
MAX_NAMED = 3


def _pt(px: float) -> float:
    return px * 72 / DPI


def grid_range(node: Node) -> tuple[float, float] | None:
    """The values the activation's grid can represent, (lowest, highest), or None."""
    grid = node.quant.activation.grid if node.quant.activation is not None else None
    if grid is None:
        return None
    scale, zp = float(np.max(grid.scale)), float(np.max(grid.zero_point))
    return (grid.qmin - zp) * scale, (grid.qmax - zp) * scale


def ordered(graph: Graph, stats: dict[str, NodeStatistics]) -> list[tuple[str, np.ndarray]]:
    """(layer, its outlier channels) for every quantized activation with statistics: layers
    with outliers first (widest spread first), then the others in topological order."""
    rows = []
    for position, node in enumerate(graph.nodes()):
        s = stats.get(node.name)
        if s is None or node.quant.activation is None or s.min_per_channel.size == 0:
            continue
        outliers = outlier_channels(s.min_per_channel, s.max_per_channel)
        spread = range_spread(s.min_per_channel, s.max_per_channel) or 0.0
        rows.append(((0, -spread) if outliers.size else (1, position), node.name, outliers))
    return [(name, outliers) for _, name, outliers in sorted(rows, key=lambda row: row[0])]


def title(node: Node, outliers: np.ndarray) -> str:
    """The card's title: the layer and its outlier channels."""
    if not outliers.size:
        return f"{node.name} ({node.layer_type}): no outlier channel"
    named = ", ".join(str(int(c)) for c in outliers[:MAX_NAMED]) + (
        ", ..." if outliers.size > MAX_NAMED else ""
    )
    return f"{node.name} ({node.layer_type}): {outliers.size} outlier channel(s): {named}"


class ChannelPlots:
    """One figure for every layer: the axes, y scale, grid and legend are drawn once and
    each layer only draws its own channels over them (a figure per layer costs ten times).

    The y axis is the value over the grid's largest value, symmetric-log: the grid's top
    is 1, a channel spanning a hundredth of the grid shows at 0.01, and the band around 0
    holds what rounds to zero.

    A layer's lines are the same few artists, given its data (creating matplotlib artists
    costs more than drawing them), and its texts are stamped (`figure_text.stamp`).
    """

    def __init__(self) -> None:
        self.fig = fig = Figure(figsize=(CARD_PX / DPI, HEIGHT_PX / DPI), dpi=DPI)
        self.canvas = FigureCanvasAgg(fig)
        fig.subplots_adjust(left=0.2, right=0.97, top=1 - 62 / HEIGHT_PX, bottom=38 / HEIGHT_PX)
        self.ax = ax = fig.add_subplot()
        ax.set_yticks(_y(np.array(TICKS)), [f"{t:g}" for t in TICKS], fontsize=_pt(FONT_PX - 1))
        ax.set_xticks([])
        ax.set_xlim(0, 1)
        ax.grid(True, axis="y", alpha=0.3)
        ax.axhline(_y(1.0), color="tab:orange", ls="--", lw=1)
        ax.set_ylabel("value / grid's top (symlog)", fontsize=_pt(FONT_PX))
        ax.set_xlabel("channel", fontsize=_pt(FONT_PX), labelpad=12)
        handles = [Line2D([], [], color="tab:blue", lw=1.5, label="min to max"),
                   Line2D([], [], ls="none", marker=".", color="0.15", label="mean"),
                   Line2D([], [], color="tab:red", lw=1.5, label="outlier"),
                   Line2D([], [], color="tab:orange", ls="--", label="grid"),
                   Patch(color="0.85", label="rounds to 0")]  # fmt: skip
        ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.42, 1.0), ncol=5, frameon=False,
                  fontsize=_pt(FONT_PX - 2), handlelength=1.0, columnspacing=0.6, handletextpad=0.3)  # fmt: skip
        self.backgrounds: dict[bool, object] = {}
        # the layer's own artists, animated: left out of the backgrounds, drawn in this order
        rows = ax.get_yaxis_transform(which="grid")  # x over the axes, y in data
        self.zero_band = ax.add_patch(Rectangle((0, 0), 1, 0, transform=rows, color="0.85", lw=0))
        self.grid_bottom = ax.add_line(
            Line2D([0, 1], [0, 0], transform=rows, color="tab:orange", ls="--", lw=1)
        )
        # a colour's bars: one line broken by NaN (a collection would make a path for each bar)
        self.bars = [ax.add_line(Line2D([], [], color=colour, lw=width, solid_capstyle="butt"))
                     for colour, width in (("tab:blue", 1.2), ("tab:red", 1.6))]  # fmt: skip
        self.means = ax.add_line(Line2D([], [], ls="none", marker=".", ms=3, color="0.15"))
        for artist in (self.zero_band, self.grid_bottom, *self.bars, self.means):
            artist.set_animated(True)

    def _background(self, signed: bool):
        """The axes drawn once for each y range: both signs, or zero and above."""
        if signed not in self.backgrounds:
            self.ax.set_ylim(_y(-1.4) if signed else _y(-0.03), _y(1.4))
            self.canvas.draw()
            self.backgrounds[signed] = self.canvas.copy_from_bbox(self.fig.bbox)
        self.ax.set_ylim(_y(-1.4) if signed else _y(-0.03), _y(1.4))
        return self.backgrounds[signed]

    def _draw_lines(self, node: Node, stats: NodeStatistics, outliers: np.ndarray, top: float) -> None:
        """The zero band and the grid's bottom (with a grid), each channel's bar, the means."""
        low, high = stats.min_per_channel, stats.max_per_channel
        rng, n = grid_range(node), low.size
        x = np.arange(n)
        wide = np.zeros(n, bool)
        wide[outliers] = True
        drawn = []
        if rng is not None:
            step = (rng[1] - rng[0]) / max(1, _levels(node))
            self.zero_band.set_y(_y(-step / 2 / top))
            self.zero_band.set_height(_y(step / 2 / top) - _y(-step / 2 / top))
            drawn.append(self.zero_band)
            if rng[0] < 0:
                self.grid_bottom.set_ydata([_y(rng[0] / top)] * 2)
                drawn.append(self.grid_bottom)
        lo, hi = _y(low / top), _y(high / top)
        for keep, bars in zip((~wide, wide), self.bars):
            gaps = np.full(int(keep.sum()), np.nan)
            bars.set_data(
                np.stack([x[keep], x[keep], gaps], 1).ravel(), np.stack([lo[keep], hi[keep], gaps], 1).ravel()
            )
            drawn += [bars] if keep.any() else []
        self.means.set_data(x, _y(stats.mean_per_channel / top))
        for artist in (*drawn, self.means):
            self.fig.draw_artist(artist)

    def _draw_texts(self, node: Node, stats: NodeStatistics, outliers: np.ndarray, top: float) -> None:
        """The outliers named by their bars, the first and last channel, the title lines."""
        ax, canvas, height = self.ax, self.canvas, self.fig.bbox.height
        n, hi = stats.min_per_channel.size, _y(stats.max_per_channel / top)
        named = outliers[:MAX_NAMED]
        points = ax.transData.transform(np.stack([named, hi[named]], 1)) if named.size else np.zeros((0, 2))
        for c, (px, py) in zip(named, points):
            if ax.contains_point((px, py)):  # as an annotation at a data point: hidden outside the axes
                x, y = px + 3 * DPI / 72, height - py + 2 * DPI / 72  # 3 pt right of the bar's top, 2 pt down
                stamp(canvas, x, y, f"ch {int(c)}", FONT_PX - 1, "tab:red")
        below = height - ax.bbox.y0 + 3 * DPI / 72
        ends = ((0, "left"), (n - 1, "right"))[: 1 if n == 1 else 2]
        for (pos, ha), px in zip(ends, ax.transData.transform([(pos, 0.0) for pos, _ in ends])[:, 0]):
            stamp(canvas, px, below, str(pos), FONT_PX - 1, ha=ha)
        name = node.name if len(node.name) <= 26 else "…" + node.name[-25:]
        stamp(canvas, 6, 4, f"{name} ({node.layer_type}), {n} channels", FONT_PX + 1)
        grid = f"grid top {top:.4g}" + (
            f", {_levels(node)} steps" if grid_range(node) is not None else " (no grid: the largest value)"
        )
        stamp(canvas, 6, 22, grid, FONT_PX - 1)

    def png(self, node: Node, stats: NodeStatistics, outliers: np.ndarray) -> bytes:
        low, high = stats.min_per_channel, stats.max_per_channel
        rng = grid_range(node)
        top = max(abs(rng[0]), abs(rng[1])) if rng is not None else float(np.nanmax(np.abs([low, high])))
        top = top if top > 0 and np.isfinite(top) else 1.0
        background = self._background(bool(np.nanmin(low) < 0) or (rng is not None and rng[0] < 0))
        self.ax.set_xlim(-0.6, low.size - 0.4)
        self.canvas.restore_region(background)
        self._draw_lines(node, stats, outliers, top)
        self._draw_texts(node, stats, outliers, top)
        return canvas_png(self.canvas)


def _y(values):
    """The y axis's scale: linear within LINTHRESH of zero, logarithmic beyond, 1 at 1."""
    v = np.asarray(values, dtype=np.float64)
    return np.sign(v) * np.log10(1 + np.abs(v) / LINTHRESH) / np.log10(1 + 1 / LINTHRESH)


def _levels(node: Node) -> int:
    grid = node.quant.activation.grid
    return int(grid.qmax - grid.qmin)


def channel_images(graph: Graph, stats: dict[str, NodeStatistics]) -> list[tuple[str, bytes, str]]:
    """(tag, PNG, title) of the quantized activations' per-channel ranges, outliers first:
    every layer with outlier channels, then the others in order up to `MAX_IMAGES` (a
    600-layer network would otherwise spend half a minute drawing pictures no one pages
    through; the Scalars' per-channel series keep every layer)."""
    plots, out = ChannelPlots(), []
    rows = ordered(graph, stats)
    others = [row for row in rows if not row[1].size][:MAX_IMAGES]
    rows = [row for row in rows if row[1].size] + others
    for k, (name, outliers) in enumerate(rows, start=1):
        node = graph.node(name)
        out.append((f"{TAG}/{k:03d}_{name}", plots.png(node, stats[name], outliers), title(node, outliers)))
    return out
