"""The similarity analysis in TensorBoard, written into the ``5_quantized_graph`` run.

    Text        similarity/causes               the quantizers to blame and the fix
                similarity/report               every compare point, worst first
    Histograms  <layer>                         step 0 the float model's output, step 1 the
                                                quantized model's, on the same bins; the card's
                                                title gives the share rounded to 0 and clipped
    Scalars     similarity/<metric> (accumulated), similarity/<metric> (local)
                                                step = the layer's topological position
    Images      Cosine similarity/0_summary, Cosine similarity/1_samples (a step per
                                                sample), Filters/<conv> (`cosine_plots`)

Nothing non-finite is written: a bad number is left out of the scalars, drawn as a gap in
the plots and shown as "n/a" in the tables. The graph's colours and node attributes are
`graph_view`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from tensorboard.compat.proto import summary_pb2

from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.numbers import finite_or_none
from model_compression_toolkit.core.similarity.analysis import PairHistogram, SimilarityResult
from model_compression_toolkit.core.similarity.causes import CANDIDATE_DB, CAUSE_DB
from model_compression_toolkit.core.similarity.report import (
    ERROR_CLASS_THRESHOLDS_DB,
    LayerSimilarity,
    SimilarityReport,
)
from model_compression_toolkit.observers.cosine_plots import (
    SAMPLES_TAG,
    SUMMARY_TAG,
    CosinePlots,
    filter_nodes,
    filters_png,
    worst_samples,
)
from model_compression_toolkit.observers.event_file import RunWriter
from model_compression_toolkit.observers.protos import histogram_proto
from model_compression_toolkit.observers.tables import plain

METRICS = {"cosine": ("cosine_mean", "local_cosine_mean"), "sqnr_db": ("sqnr_db", "local_sqnr_db"),
           "mse": ("mse", "local_mse")}  # fmt: skip
KINDS = ("accumulated", "local")


def scalar_tag(metric: str, kind: str) -> str:
    """``similarity/sqnr_db (local)``: the two kinds of one metric sort side by side."""
    return f"similarity/{metric} ({kind})"


def write_similarity(
    writer: RunWriter,
    result: SimilarityResult,
    graph: Graph,
    quantized_weights: Mapping[str, Mapping[str, np.ndarray]] | None = None,
) -> None:
    """Write the similarity view into ``writer``'s run (the quantized graph's) and flush it.

    Args:
        writer: the ``5_quantized_graph`` run.
        result: the similarity analysis.
        graph: the quantized graph (its first convolutions' kernels are shown).
        quantized_weights: the quantized weights the call built its model with (node ->
            weight name -> array), reused for the filters; computed where missing.
    """
    report = result.report
    for layer in report.layers:
        for metric, fields in METRICS.items():
            for kind, name in zip(KINDS, fields):
                value = finite_or_none(getattr(layer, name))
                if value is not None:
                    writer.add_scalar(scalar_tag(metric, kind), value, step=int(layer.position))
    writer.add_text("similarity/causes", causes_markdown(report))
    writer.add_text("similarity/report", report_markdown(report))
    pairs = {name: protos for name, pair in result.histograms.items() if (protos := pair_histograms(pair))}
    writer.add_histogram_pairs(pairs, histogram_titles(report, pairs))
    plots = CosinePlots(report)
    writer.add_image(SUMMARY_TAG, plots.summary(), display_name="cosine similarity per layer: summary")
    steps = worst_samples(plots.matrix)
    title = f"cosine similarity per layer, one sample per step: the {len(steps)} lowest of {plots.matrix.shape[1]}"
    for step, png in zip(steps, plots.samples(steps)):
        writer.add_image(SAMPLES_TAG, png, step=step, display_name=title)
    for node in filter_nodes(graph):
        writer.add_image(f"Filters/{node.name}", filters_png(node, quantized_weights))
    writer.flush()


def histogram_titles(report: SimilarityReport, tags) -> dict[str, str]:
    """Each compare point's card title: what its grid rounds to zero and clips (of the values
    not zero in float; measured on the float output), first, then what steps 0 and 1 are.

    TensorBoard's Histograms and Distributions dashboards show the title above the tag; Time
    Series shows the tag alone, which stays the layer's name (the same card across calls,
    trials and the tag filter)."""
    entries = {q.name: q for q in report.quantizers if q.kind == "activation"}
    titles = {}
    for name in tags:
        entry = entries.get(name)
        shares = []
        if entry is not None:
            zero = finite_or_none(entry.zero_rounded_percent)
            clipped = finite_or_none(entry.clipped_percent)
            shares += [f"rounded to 0: {zero:.1f} %"] if zero is not None else []
            shares += [f"clipped: {clipped:.2f} %"] if clipped is not None else []
        steps = "step 0 float model, step 1 quantized"
        titles[name] = f"{name}: {', '.join(shares)} ({steps})" if shares else f"{name}: {steps}"
    return titles


# ---------------------------------------------------------------- numbers
def _error_class(layer: LayerSimilarity) -> str | None:
    """The layer's error class, or None when its SQNR is not a number."""
    sqnr = layer.ranking_sqnr_db
    if sqnr is None or isinstance(sqnr, bool) or not isinstance(sqnr, (int, float)) or math.isnan(sqnr):
        return None
    return layer.error_class


def _fmt(value: object, spec: str) -> str:
    number = finite_or_none(value)
    return "n/a" if number is None else format(number, spec)


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


NAME_CHARS = 28  # longer names are cut in the middle in the tables: a column stays narrow


def _name(name: str, limit: int | None = NAME_CHARS) -> str:
    """A code span (never read as HTML or Markdown); past ``limit`` characters its middle is cut
    to "…" (the node panel and ``similarity_report.json`` keep the full name)."""
    text = str(name)
    if limit is not None and len(text) > limit:
        head = (limit - 1) // 2
        text = text[:head] + "…" + text[len(text) - (limit - 1 - head) :]
    return "`" + text.replace("`", "'").replace("|", "\\|") + "`"


def _bits(layer: LayerSimilarity) -> str:
    return f"{layer.weights_bits or '-'}/{layer.activation_bits or '-'}"


def _table(header: list[str], align: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(align) + "|",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


# The tables fit TensorBoard's Text card (about 940 px at a 1400 px window). Its table takes
# the card's width and shares it out by each column's one-line width, breaking words anywhere
# ("p o o l") once the one-line widths add up to more: so every header and cell is short on
# one line, a header's words on lines of their own (<br>), a layer's type under its name.
CAUSES_HEADER = ["#", "quantizer<br>type", "bits", "alone<br>SQNR dB", "own<br>SQNR dB", "worst<br>channel dB",
                 "rounded<br>to 0 %", "clipped<br>%", "cause"]  # fmt: skip
REPORT_HEADER = ["#", "layer<br>type", "SQNR<br>dB", "local<br>SQNR dB", "alone<br>SQNR dB", "rounded<br>to 0 %",
                 "clipped<br>%", "bits<br>W/A", "own<br>error", "accum.<br>error"]  # fmt: skip
CAUSES_ALIGN = ["---:", "---", "---:", "---:", "---:", "---:", "---:", "---:", ":---:"]
REPORT_ALIGN = ["---:", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---", "---"]


def header_text(header: str) -> str:
    """A header as one line (the tables' headers break their words with ``<br>``)."""
    return header.replace("<br>", " ")


def causes_markdown(report: SimilarityReport) -> str:
    """The causes and the suggested fix, then every quantizer ranked by what it alone does
    to the model output: the first thing the Text dashboard shows."""
    causes, fix = report.causes(), report.fix
    if causes:
        title = (
            f"**{len(causes)} quantizer(s) damage the output on their own** (output SQNR with that quantizer "
            f"alone under {CAUSE_DB:g} dB, on {report.impact_samples} samples)."
        )
    else:
        title = f"**No quantizer damages the output on its own** (every output SQNR alone ≥ {CAUSE_DB:g} dB)."
    head = [title]
    if report.impacts_skipped:
        head += ["", report.skip_note()[0].upper() + report.skip_note()[1:] + "."]
    lands = [q for q in causes if q.output_part]
    if lands:
        head += [""] + [
            f"- {_name(q.name, None)} ({q.kind}) harms {_name(q.output_part, None)} most: "
            f"{q.output_part_distinct} distinct values"
            for q in lands
        ]
    if fix.spread:
        head += ["", "The loss is spread: " + plain(fix.spread)]
    if fix:
        head += [
            "",
            "Suggested fix, which `CoreConfig(keep_float=info.similarity.suggested_fix())` applies, or paste:",
            "",
            "```",
            fix.code(),
            "```",
            "",
            "It " + plain("; ".join(fix.effects())) + ".",
        ]
    elif fix.note:  # causes, and nothing the target allows restores: said, not hidden
        head += ["", plain(fix.note)]  # it names layers
    note = (
        "*SQNR alone*: the model output's SQNR with this quantizer alone quantized. The channels' "
        "median, range spread and lost inputs are in the node's panel (Graphs) and in similarity_report.json."
    )
    rows = [_quantizer_cells(q) for q in report.quantizers]
    return "\n".join([*head, "", note, "", *_table(CAUSES_HEADER, CAUSES_ALIGN, rows)])


def _quantizer_cells(q) -> list[str]:
    return [
        str(q.rank), f"{_name(q.name)}<br>{_name(q.layer_type)} {q.kind}", str(q.bits),
        _fmt(q.output_sqnr_db, ".1f"), _fmt(q.sqnr_db, ".1f"), _fmt(q.channel_sqnr_worst_db, ".1f"),
        _fmt(q.zero_rounded_percent, ".1f"), _fmt(q.clipped_percent, ".2f"), "**yes**" if q.cause else "",
    ]  # fmt: skip


def report_markdown(report: SimilarityReport) -> str:
    """The ranked table, worst layer first, for the Text dashboard."""
    low, medium = ERROR_CLASS_THRESHOLDS_DB["low"], ERROR_CLASS_THRESHOLDS_DB["medium"]
    lines = [
        f"**{len(report.layers)} layers compared on {report.samples} samples, worst first** "
        "(by the output SQNR with the layer's own quantizers alone where measured, then by local SQNR). "
        "*SQNR*: quantized model vs float model at this layer; *local*: this layer "
        "alone quantized, fed the float input; *alone*: the model output with only this layer's quantizers. "
        f"*Own error*, the graph's colour: high, a cause, under {CAUSE_DB:g} dB alone; medium under "
        f"{CANDIDATE_DB:g} dB. *Accumulated error*, the summary plot's colour: low {low:g} dB or more, medium "
        f"{medium:g}–{low:g} dB, high under {medium:g} dB. Cosine, MSE and thresholds are in the node's panel "
        "(Graphs) and the Scalars.",
        "",
    ]
    ranked = sorted(report.ranked(), key=lambda layer: _error_class(layer) is None)  # unknown SQNR last
    rows = [_layer_cells(rank, layer) for rank, layer in enumerate(ranked, start=1)]
    return "\n".join([*lines, *_table(REPORT_HEADER, REPORT_ALIGN, rows)])


def _layer_cells(rank: int, layer: LayerSimilarity) -> list[str]:
    known = _error_class(layer) is not None
    return [
        str(rank), f"{_name(layer.name)}<br>{_name(layer.layer_type)}",
        _fmt(layer.sqnr_db, ".1f"), _fmt(layer.local_sqnr_db, ".1f"), _fmt(layer.output_sqnr_db, ".1f"),
        _fmt(layer.zero_rounded_percent, ".1f"), _fmt(layer.clipped_percent, ".2f"), _bits(layer),
        layer.damage_class if known else "n/a", layer.accumulated_class if known else "n/a",
    ]  # fmt: skip
