"""The similarity analysis in TensorBoard, and the per-layer error for the graph view.

    <call folder>/similarity/               Images      cosine_similarity/sample_<i>  (x = layer names)
                                                    cosine_similarity/summary     (mean, min-max band)
                                                    filters/<conv>                (float | quantized)
                                        Histograms  <layer>/float, <layer>/quantized (same buckets)
                                        Text        similarity/causes (the quantizers to blame, the fix)
                                                    similarity/report (ranked table, worst first)
    <call folder>/similarity/accumulated/   Scalars     similarity/cosine, similarity/sqnr_db, similarity/mse
    <call folder>/similarity/local/         Scalars     the same tags: TensorBoard overlays both runs

Scalars use step = the layer's topological position. Nothing non-finite is written: a bad
number is left out of the scalars, drawn as a gap in the plots and shown as "n/a" in the
table. Figures use matplotlib's object API (no pyplot, no global state).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.transforms import ScaledTranslation
from tensorboard.compat.proto import summary_pb2

from model_compression_toolkit.core.calibration.quantizers import node_weight
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.core.numbers import finite_or_none
from model_compression_toolkit.core.similarity.analysis import PairHistogram, SimilarityResult
from model_compression_toolkit.core.similarity.causes import CAUSE_DB
from model_compression_toolkit.core.similarity.report import (
    ERROR_CLASS_THRESHOLDS_DB,
    LayerSimilarity,
    SimilarityReport,
)
from model_compression_toolkit.observers.event_file import RunWriter
from model_compression_toolkit.observers.protos import PaletteCanvas, canvas_png, histogram_proto

DPI = 90
MAX_FILTERS = 64
FILTER_PANEL_PX = 280  # about the width of one panel of filters
FILTER_LAYERS = 2
MAX_LABEL_CHARS = 28
CLASS_COLOURS = {"low": "tab:green", "medium": "tab:orange", "high": "tab:red"}
SCALARS = {  # tag -> (accumulated field, local field)
    "similarity/cosine": ("cosine_mean", "local_cosine_mean"),
    "similarity/sqnr_db": ("sqnr_db", "local_sqnr_db"),
    "similarity/mse": ("mse", "local_mse"),
}


def write_similarity(
    open_writer: Callable[[str], RunWriter],
    result: SimilarityResult,
    graph: Graph,
    quantized_weights: Mapping[str, Mapping[str, np.ndarray]] | None = None,
) -> None:
    """Write the similarity view into runs opened by ``open_writer(run_name)``; flush them.

    Args:
        open_writer: opens a TensorBoard run inside the PTQ call's folder; the caller
            closes the writers.
        result: the similarity analysis.
        graph: the quantized graph (its first convolutions' kernels are shown).
        quantized_weights: the quantized weights the call built its model with (node ->
            weight name -> array), reused for the filters; computed where missing.
    """
    report = result.report
    main = open_writer("similarity")
    runs = {"accumulated": open_writer("similarity/accumulated"), "local": open_writer("similarity/local")}
    for layer in report.layers:
        for tag, fields in SCALARS.items():
            for writer, name in zip(runs.values(), fields):
                value = finite_or_none(getattr(layer, name))
                if value is not None:
                    writer.add_scalar(tag, value, step=int(layer.position))
    main.add_text("similarity/causes", causes_markdown(report))
    main.add_text("similarity/report", report_markdown(report))
    for name, pair in result.histograms.items():
        protos = pair_histograms(pair)
        if protos is not None:
            main.add_histograms({f"{name}/float": protos[0], f"{name}/quantized": protos[1]})
    plots = CosinePlots(report)
    main.add_image("cosine_similarity/summary", plots.summary())
    for i, png in enumerate(plots.samples()):
        main.add_image(f"cosine_similarity/sample_{i}", png)
    for node in filter_nodes(graph):
        main.add_image(f"filters/{node.name}", filters_png(node, quantized_weights))
    for writer in (main, *runs.values()):
        writer.flush()


def error_devices(report: SimilarityReport) -> dict[str, str]:
    """Node name -> ``error:<low|medium|high>``: the GraphDef device, so "Color by device"
    paints the quantized graph by error. Layers with no finite SQNR are left out."""
    classes = {layer.name: _error_class(layer) for layer in report.layers}
    return {name: f"error:{cls}" for name, cls in classes.items() if cls is not None}


def metric_attrs(report: SimilarityReport) -> dict[str, dict[str, float | str]]:
    """Node name -> the metrics shown as GraphDef attributes (finite values only)."""
    names = (
        "cosine_mean", "cosine_min", "sqnr_db", "mse", "local_sqnr_db", "local_mse", "clipped_percent",
        "channel_sqnr_median_db", "channel_sqnr_worst_db", "high_error_channels_percent", "zero_rounded_percent",
        "channel_range_spread", "output_sqnr_db",
    )  # fmt: skip
    out: dict[str, dict[str, float | str]] = {}
    for layer in report.layers:
        attrs: dict[str, float | str] = {}
        for name in names:
            value = finite_or_none(getattr(layer, name))
            if value is not None:
                attrs[name] = value
        cls = _error_class(layer)
        if cls is not None:
            attrs["error_class"] = cls
        if layer.role:
            attrs["role"] = layer.role
        out[layer.name] = attrs
    for q in report.quantizers:  # the weights' own measures on their layer
        if q.kind == "weights":
            attrs = out.setdefault(q.name, {})
            for name in ("sqnr_db", "channel_sqnr_worst_db", "zero_rounded_percent", "lost_input_channels_percent",
                         "output_sqnr_db"):  # fmt: skip
                value = finite_or_none(getattr(q, name))
                if value is not None:
                    attrs[f"weights.{name}"] = value
            if q.cause:
                attrs["weights.role"] = "cause"
    return out


# ---------------------------------------------------------------- numbers
def _nan(value: object) -> float:
    number = finite_or_none(value)
    return np.nan if number is None else number


def _error_class(layer: LayerSimilarity) -> str | None:
    """The layer's error class, or None when its SQNR is not a number."""
    sqnr = layer.ranking_sqnr_db
    if sqnr is None or isinstance(sqnr, bool) or not isinstance(sqnr, (int, float)) or math.isnan(sqnr):
        return None
    return layer.error_class


def _fmt(value: object, spec: str) -> str:
    number = finite_or_none(value)
    return "n/a" if number is None else format(number, spec)


def cosine_matrix(report: SimilarityReport) -> np.ndarray:
    """(layers, samples) cosines in topological order; missing or non-finite values are NaN."""
    samples = report.samples or max((len(layer.cosine_per_sample) for layer in report.layers), default=0)
    matrix = np.full((len(report.layers), samples), np.nan)
    for row, layer in zip(matrix, _ordered(report)):
        values = np.array(
            [v if finite_or_none(v) is not None else np.nan for v in layer.cosine_per_sample[:samples]]
        )
        row[: values.size] = values
    return matrix


def _ordered(report: SimilarityReport) -> list[LayerSimilarity]:
    return sorted(report.layers, key=lambda layer: layer.position)


# ---------------------------------------------------------------- cosine plots
def _short(name: str) -> str:
    """The end of a long layer name (its most specific part)."""
    return name if len(name) <= MAX_LABEL_CHARS else "…" + name[-(MAX_LABEL_CHARS - 1) :]


def _layer_axes(names: list[str], height: float = 3.4, header: float = 0.9) -> tuple[Figure, object]:
    """A figure whose x axis names the layers: width, font and label thinning fit 1-300
    layers; ``header`` inches above the axes hold a title and a legend.

    The names are plain texts under one line of tick marks, not matplotlib ticks: a tick
    is five artists, and making some 60 of them took half of the figure's time.
    """
    n = max(len(names), 1)
    font = 8 if n <= 50 else 7 if n <= 90 else 6
    width = min(max(7.0, 1.6 + n * font * 1.25 / 72), 20.0)
    step = max(1, math.ceil(n * font * 1.25 / ((width - 1.6) * 72)))
    labels = [_short(s) for s in names]
    label_in = max((len(s) for s in labels), default=1) * font * 0.62 / 72 + 0.35
    total = height + label_in
    fig = Figure(figsize=(width, total), dpi=DPI)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=1.0 / width, right=1 - 0.6 / width, bottom=label_in / total, top=1 - header / total)
    ax = fig.add_subplot()
    ax.set_xticks([])
    below = ax.get_xaxis_transform()  # x in layers, y in axes fractions
    ax.plot(np.arange(len(names)), np.zeros(len(names)), ls="none", marker=3, ms=3, mew=0.6, color="0.2",
            transform=below, clip_on=False)  # fmt: skip
    at_labels = below + ScaledTranslation(0, -4 / 72, fig.dpi_scale_trans)
    for i in range(0, len(names), step):
        ax.text(i, 0, labels[i], transform=at_labels, rotation=90, ha="center", va="top", fontsize=font)
    ax.set_xlim(-0.5, max(len(names) - 0.5, 0.5))
    ax.set_ylabel("cosine similarity")
    fig.text(0.5, 0.06 / total, "layer (topological order)" + (f", 1 name in {step} shown" if step > 1 else ""),
             ha="center", va="bottom", fontsize=8)  # fmt: skip
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.grid(True, axis="y", alpha=0.3)
    return fig, ax


def _ylim(*arrays: np.ndarray) -> tuple[float, float]:
    """Limits showing every finite value and 1.0, zoomed so that small differences show."""
    values = np.concatenate([np.ravel(a) for a in arrays] + [np.array([1.0])])
    values = values[np.isfinite(values)]
    lo, hi = float(values.min()), float(values.max())
    pad = max(hi - lo, 1e-4) * 0.08
    return lo - pad, hi + pad


class CosinePlots:
    """The summary plot and the per-sample plots, drawn on one figure.

    The axes, layer names and grid are most of the drawing time; they are drawn once, at
    one y scale for all the plots (every sample's values, the means and the local
    cosines), so flipping between the summary and the samples compares them at one
    scale. Each plot then draws only its own lines and notes over that background.
    """

    def __init__(self, report: SimilarityReport) -> None:
        self.layers = _ordered(report)
        self.matrix = matrix = cosine_matrix(report)
        layers = self.layers
        has = np.isfinite(matrix).any(axis=1) if matrix.size else np.zeros(len(layers), bool)
        safe = np.where(np.isfinite(matrix), matrix, np.inf)
        self.lows = np.array([safe[i].min() if has[i] else _nan(lay.cosine_min) for i, lay in enumerate(layers)])
        self.highs = np.array([np.nanmax(matrix[i]) if has[i] else np.nan for i in range(len(layers))])
        means = np.array([_nan(lay.cosine_mean) for lay in layers])
        row_means = np.array([np.nanmean(matrix[i]) if has[i] else np.nan for i in range(len(layers))])
        self.means = np.where(np.isfinite(means), means, row_means)
        self.worst_sample = [
            int(np.argmin(safe[i])) if has[i] else layer.worst_sample for i, layer in enumerate(layers)
        ]
        self.local = np.array([_nan(lay.local_cosine_mean) for lay in layers])
        self.fig, self.ax = _layer_axes([layer.name for layer in layers])
        self.x = np.arange(len(layers))
        self.ax.axhline(1.0, color="0.4", lw=0.8, ls="--")
        self.ax.set_ylim(*_ylim(matrix, self.lows, self.highs, self.means, self.local))
        self.canvas = self.fig.canvas
        self.canvas.draw()
        self.axes_only = self.canvas.copy_from_bbox(self.fig.bbox)

    def _draw(self, background, *artists) -> None:
        """Draw ``artists`` over ``background``. They are made animated, so they stay out of
        any later background: each plot shows only its own."""
        self.canvas.restore_region(background)
        for artist in artists:
            artist.set_animated(True)
            self.fig.draw_artist(artist)

    def _header(self, title: str, handles: list) -> list:
        """The title and the legend above the axes."""
        height = self.fig.get_figheight()
        legend = self.ax.legend(
            handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=7, ncol=4, frameon=False
        )
        return [self.fig.text(0.5, 1 - 0.05 / height, title, ha="center", va="top", fontsize=10), legend]

    def summary(self) -> bytes:
        """Mean cosine per layer (coloured by error class), the min-max band across samples,
        each layer's worst sample, the local cosine, and the overall worst point annotated."""
        ax, x, layers, lows, highs, means = self.ax, self.x, self.layers, self.lows, self.highs, self.means
        ok = np.isfinite(lows) & np.isfinite(highs)
        band = ax.fill_between(x, np.where(ok, lows, 0), np.where(ok, highs, 0), where=ok, color="tab:blue",
                               alpha=0.2, lw=0, label=f"min-max over {self.matrix.shape[1]} samples")  # fmt: skip
        (mean,) = ax.plot(x, means, "-", lw=1, color="tab:blue", label="mean (accumulated)")
        colours = [CLASS_COLOURS.get(_error_class(layer) or "", "0.5") for layer in layers]
        dots = ax.scatter(x, means, c=colours, s=14, zorder=3)
        (low,) = ax.plot(x, lows, "v", ms=3, color="0.3", label="worst sample per layer")
        artists = [band, mean, dots, low]
        handles = [band, mean, low]
        if np.isfinite(self.local).any():
            (local,) = ax.plot(x, self.local, "--", lw=0.8, color="tab:purple", label="mean (local: float input)")
            artists.append(local)
            handles.append(local)
        if np.isfinite(lows).any():
            k = int(np.nanargmin(lows))
            artists += ax.plot([k], [lows[k]], "v", ms=9, color="tab:red", zorder=4)
            note = ax.annotate("", (0, 1), xytext=(8, 4), textcoords="offset points", fontsize=8, color="tab:red",
                               zorder=5)  # fmt: skip
            _place(note, k, lows[k], len(layers), f"worst: {layers[k].name}, sample {self.worst_sample[k]}: {lows[k]:.5f}")
            artists.append(note)
        handles += [ax.scatter([], [], c=colour, s=14, label=f"error {cls}") for cls, colour in CLASS_COLOURS.items()]
        artists += self._header(
            f"cosine similarity per layer over {self.matrix.shape[1]} samples, quantized vs float model", handles
        )
        self._draw(self.axes_only, *artists)
        return canvas_png(self.canvas)

    def samples(self) -> list[bytes]:
        """One plot per sample: its cosine at every layer, its lowest point noted, the mean
        over the samples in grey behind it."""
        ax, x, layers, matrix = self.ax, self.x, self.layers, self.matrix
        if not layers or matrix.shape[1] == 0:
            return []
        (mean,) = ax.plot(x, self.means, "-", lw=1, color="0.7", label=f"mean over {matrix.shape[1]} samples")
        (line,) = ax.plot(x, matrix[:, 0], "-o", ms=3, lw=1, color="tab:blue", label="this sample")
        (worst,) = ax.plot([], [], "v", ms=8, color="tab:red", label="its lowest layer")
        note = ax.annotate("", (0, 1), xytext=(8, 4), textcoords="offset points", fontsize=8, color="tab:red")
        static = [mean, *self._header("cosine similarity of one sample, quantized vs float model", [line, mean, worst])]
        self._draw(self.axes_only, *static)
        background = self.canvas.copy_from_bbox(self.fig.bbox)  # of every sample plot
        encoder = PaletteCanvas(self.canvas)
        pngs = []
        for i in range(matrix.shape[1]):
            values = matrix[:, i]
            line.set_ydata(values)
            if np.isfinite(values).any():
                k = int(np.nanargmin(values))
                worst.set_data([k], [values[k]])
                _place(note, k, values[k], len(layers), f"sample {i}, lowest: {layers[k].name}, {values[k]:.5f}")
            else:
                worst.set_data([], [])
                note.set_text(f"sample {i}: no finite value")
            self._draw(background, line, worst, note)
            pngs.append(encoder.png())
        return pngs


def _place(note, k: int, y: float, n: int, text: str) -> None:
    """Put an annotation just above point ``k``, on the side where there is room."""
    right = k > 0.6 * n
    note.xy = (k, y)
    note.set_position((-10 if right else 10, 5))
    note.set_horizontalalignment("right" if right else "left")
    note.set_text(text)


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
    node: Node, quantized_weights: Mapping[str, Mapping[str, np.ndarray]] | None = None, max_filters: int = MAX_FILTERS
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
    panels = [("float" if quantize else "float (weights not quantized)", filter_tiles(kernel, out_axes))]
    if quantize:
        quantized = np.nan_to_num(
            np.asarray(node_weight(node, "kernel", True, quantized_weights), dtype=np.float64), posinf=0.0, neginf=0.0
        )
        peak = float(np.max(np.abs(kernel))) or 1.0
        error = float(np.max(np.abs(quantized - kernel))) / peak
        title = f"quantized ({wq.n_bits} bit), max |error| {100 * error:.2g}% of max |w|"
        panels.append((title, filter_tiles(quantized, out_axes)))
    total = panels[0][1].shape[0]
    scale = np.max(np.abs(panels[0][1][:max_filters]), axis=(1, 2), keepdims=True)
    scale = np.where(scale > 0, scale, 1.0)
    cmap = _diverging()
    images = [cmap((tile_grid(tiles[:max_filters] / scale) + 1) / 2, bytes=True) for _, tiles in panels]
    rows, cols = images[0].shape[:2]
    zoom = max(1, FILTER_PANEL_PX // max(rows, cols))
    images = [np.repeat(np.repeat(image, zoom, axis=0), zoom, axis=1) for image in images]
    panel_w, panel_h = cols * zoom, rows * zoom
    margin, header, label = 12, 44, 20  # pixels: border, the two title lines, a panel's title
    panels_w = len(images) * panel_w + (len(images) - 1) * 2 * margin
    width, height = max(panels_w + 2 * margin, 320), header + label + panel_h + margin
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI)
    canvas = FigureCanvasAgg(fig)
    shown = min(total, max_filters)
    fig.text(0.5, 1 - 6 / height, f"{_short(node.name)}: {shown} of {total} filters, input channel 0\n"
             "each filter scaled by its float max |w|", ha="center", va="top", fontsize=8)  # fmt: skip
    left = (width - panels_w) // 2
    for i, ((title, _), image) in enumerate(zip(panels, images)):
        x = left + i * (panel_w + 2 * margin)
        fig.figimage(image, xo=x, yo=margin, origin="upper")
        fig.text((x + panel_w / 2) / width, (margin + panel_h + 4) / height, title, ha="center", va="bottom",
                 fontsize=8)  # fmt: skip
    canvas.draw()
    return canvas_png(canvas)  # a 256-colour map and black text: the palette loses nothing


def _diverging():
    from matplotlib import colormaps

    return colormaps["RdBu_r"].with_extremes(bad="0.2")


# ---------------------------------------------------------------- histograms and table
def pair_histograms(
    pair: PairHistogram,
) -> tuple[summary_pb2.HistogramProto, summary_pb2.HistogramProto] | None:
    """Float and quantized histograms on identical buckets (the pair's non-empty range).

    `histogram_proto` drops each tensor's own empty end buckets; here both keep the
    buckets of the union range, so the two charts line up. None if nothing to show.
    """
    edges = np.asarray(pair.edges, dtype=np.float64)
    counts = [np.asarray(c, dtype=np.float64) for c in (pair.float_counts, pair.quantized_counts)]
    if edges.ndim != 1 or not np.isfinite(edges).all() or any(c.shape != (edges.size - 1,) for c in counts):
        return None
    counts = [np.where(np.isfinite(c) & (c > 0), c, 0.0) for c in counts]
    nonzero = np.flatnonzero(counts[0] + counts[1])
    if nonzero.size == 0:
        return None
    lo, hi = int(nonzero[0]), int(nonzero[-1])
    sub_edges = edges[lo : hi + 2]
    protos = []
    for c in counts:
        sub = c[lo : hi + 1]
        proto = histogram_proto(sub, sub_edges, min=sub_edges[0], max=sub_edges[-1])
        proto.min, proto.max = float(sub_edges[0]), float(sub_edges[-1])  # also when ``sub`` is all zero
        proto.ClearField("bucket_limit")
        proto.ClearField("bucket")
        proto.bucket_limit.extend(sub_edges[1:].tolist())
        proto.bucket.extend(sub.tolist())
        protos.append(proto)
    return protos[0], protos[1]


def _name(name: str) -> str:
    return "`" + name.replace("`", "'").replace("|", "\\|") + "`"


def _bits(layer: LayerSimilarity) -> str:
    return f"{layer.weights_bits or '-'}/{layer.activation_bits or '-'}"


def causes_markdown(report: SimilarityReport) -> str:
    """The causes and the suggested fix, then every quantizer ranked by what it alone does
    to the model output: the first thing the Text dashboard shows."""
    causes = report.causes()
    if causes:
        head = [
            f"**{len(causes)} quantizer(s) damage the output on their own** (output SQNR with that quantizer "
            f"alone under {CAUSE_DB:g} dB, on {report.impact_samples} samples). Suggested fix, which "
            "`CoreConfig(keep_float=info.similarity.suggested_fix())` applies:",
            "",
            "```",
            report.fix.code(),
            "```",
            "",
            report.fix.summary().split("\n", 1)[-1].strip().replace("\n  ", "; "),
        ]
    else:
        head = [f"**No quantizer damages the output on its own** (every output SQNR alone ≥ {CAUSE_DB:g} dB)."]
    rows = [
        "| rank | quantizer | type | bits | output SQNR alone dB | own SQNR dB | median channel dB | worst channel dB "
        "| channels < 15 dB % | rounded to 0 % | clipped % | range spread | lost inputs % | cause |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for q in report.quantizers:
        cells = [
            str(q.rank), _name(f"{q.name} ({q.kind})"), _name(q.layer_type), str(q.bits),
            _fmt(q.output_sqnr_db, ".1f"), _fmt(q.sqnr_db, ".1f"), _fmt(q.channel_sqnr_median_db, ".1f"),
            _fmt(q.channel_sqnr_worst_db, ".1f"), _fmt(q.high_error_channels_percent, ".0f"),
            _fmt(q.zero_rounded_percent, ".1f"), _fmt(q.clipped_percent, ".2f"), _fmt(q.channel_range_spread, ".3g"),
            _fmt(q.lost_input_channels_percent, ".1f"), "**yes**" if q.cause else "",
        ]  # fmt: skip
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join([*head, "", *rows])


def report_markdown(report: SimilarityReport) -> str:
    """The ranked table, worst layer first, for the Text dashboard."""
    low, medium = ERROR_CLASS_THRESHOLDS_DB["low"], ERROR_CLASS_THRESHOLDS_DB["medium"]
    lines = [
        f"**{len(report.layers)} layers compared on {report.samples} samples, worst first** "
        "(by the output SQNR with the layer's own quantizers alone where measured, then by local SQNR). "
        "*Accumulated*: quantized model vs float model at this layer; *local*: this layer "
        f"alone quantized, fed the float input. Error class: low ≥ {low:g} dB, medium "
        f"{medium:g}–{low:g} dB, high < {medium:g} dB.",
        "",
        "| rank | layer | type | role | cosine mean | cosine min | SQNR dB | local SQNR dB | output SQNR alone dB "
        "| median channel dB | rounded to 0 % | MSE | local MSE | weight threshold max | activation threshold "
        "| % clipped | bits W/A | error |",
        "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|---|",
    ]
    ranked = sorted(report.ranked(), key=lambda layer: _error_class(layer) is None)  # unknown SQNR last
    for rank, layer in enumerate(ranked, start=1):
        cells = [
            str(rank), _name(layer.name), _name(layer.layer_type), layer.role or "",
            _fmt(layer.cosine_mean, ".5f"), _fmt(layer.cosine_min, ".5f"),
            _fmt(layer.sqnr_db, ".1f"), _fmt(layer.local_sqnr_db, ".1f"), _fmt(layer.output_sqnr_db, ".1f"),
            _fmt(layer.channel_sqnr_median_db, ".1f"), _fmt(layer.zero_rounded_percent, ".1f"),
            _fmt(layer.mse, ".3g"), _fmt(layer.local_mse, ".3g"),
            _fmt(layer.weights_threshold_max, ".4g"), _fmt(layer.activation_threshold, ".4g"),
            _fmt(layer.clipped_percent, ".2f"), _bits(layer),
            _error_class(layer) or "n/a",
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
