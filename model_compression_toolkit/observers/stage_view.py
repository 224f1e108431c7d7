"""One PTQ stage in TensorBoard: one run per stage, numbered so they sort in pipeline order.

    1_initial_graph/                 Graphs      the graph; "Resources" run metadata (memory per node)
    2_after_graph_preparation/       Text        summary (layer counts, memory, a row per layer)
    3_after_statistics_collection/   ...         (every stage run holds these three)
        min_per_channel/             Scalars     tag = layer, step = channel (MCT's layout),
        max_per_channel/                         written once: the statistics do not change
        mean_per_channel/                        at thresholds_selection
    4_thresholds_selection/          Histograms  <layer>: step 0 its float output over all the
                                                 data, step 1 the same values through its grid
                                     Images      Per-channel ranges/<k>_<layer> (`channel_view`)
    5_quantized_graph/               Histograms  <layer>/weights (and .../bias): step 0 float,
                                                 step 1 quantized, on the same bins
                                     and, with the similarity analysis, the graph coloured by
                                     error and the `similarity_view`; with a memory budget,
                                     the `mixed_precision_view`

Every histogram has two steps, float (0) and quantized (1), on the same bins: TensorBoard's
"overlay" histogram mode draws both in one card, and Distributions shows how quantization
moves each percentile. Five stage runs and three per-channel runs: at most 8 per call, so
5 calls stay under the 40 runs above which TensorBoard selects none.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from model_compression_toolkit.core.calibration.quantizers import histogram_through_grid
from model_compression_toolkit.core.calibration.statistics import NodeStatistics
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.info import float_layers
from model_compression_toolkit.observers.channel_view import channel_images
from model_compression_toolkit.observers.event_file import RunWriter
from model_compression_toolkit.observers.graph_view import error_devices, graph_attrs
from model_compression_toolkit.observers.mixed_precision_view import write_bit_widths
from model_compression_toolkit.observers.protos import (
    RESOURCES_TAG,
    finite_values,
    graph_def,
    graph_node_names,
    histogram_from_values,
    histogram_proto,
    run_metadata,
)
from model_compression_toolkit.observers.similarity_view import write_similarity
from model_compression_toolkit.observers.tables import stage_markdown
from model_compression_toolkit.pipeline.events import STAGES, StageReport

STAGE_RUNS = {stage: f"{i}_{stage}" for i, stage in enumerate(STAGES, start=1)}
STATISTICS_STAGE, THRESHOLDS_STAGE, QUANTIZED_STAGE = STAGES[2], STAGES[3], STAGES[4]
PER_CHANNEL = ("min_per_channel", "max_per_channel", "mean_per_channel")
WEIGHT_BINS = 256
SUMMARY_TAG = "summary"
HistogramPair = tuple  # (float HistogramProto, quantized HistogramProto)


def stage_run(stage: str) -> str:
    """The run of a stage: ``3_after_statistics_collection`` for ``after_statistics_collection``."""
    return STAGE_RUNS[stage]


def write_graph(
    writer: RunWriter,
    graph: Graph,
    memory: Mapping,
    report=None,
    tag: str | None = None,
    kept: Mapping[str, str] | None = None,
) -> None:
    """The graph, its ``Resources`` and, with a similarity report, its colours by error.
    With ``tag``: a second graph of the run, under that tag (no ``Resources`` of its own).
    ``kept``: ``float_layers(graph)`` when the caller has it."""
    devices, legend = error_devices(graph, report) if report is not None else (None, ())
    names = graph_node_names(graph)
    proto = graph_def(graph, graph_attrs(graph, memory, report, kept), devices, legend, names=names)
    if tag is not None:
        writer.add_tagged_graph(tag, proto)
        return
    writer.add_graph(proto)
    writer.add_run_metadata(RESOURCES_TAG, run_metadata(graph, memory, devices, legend=legend, names=names))


def write_stage(open_writer: Callable[[str], RunWriter], report: StageReport) -> None:
    """Write ``report`` into runs opened by ``open_writer(run_name)`` (the caller closes them)."""
    graph, name = report.graph, report.name
    run = stage_run(name)
    main = open_writer(run)
    similarity = report.similarity.report if report.similarity is not None else None
    kept = float_layers(graph)  # the graph panels and the summary read it (find_composites: once)
    write_graph(main, graph, report.memory, similarity, kept=kept)
    main.add_text(SUMMARY_TAG, stage_markdown(run, graph, report.memory, kept))
    stats = report.statistics
    if stats is not None and name == STATISTICS_STAGE:
        for field in PER_CHANNEL:
            open_writer(f"{run}/{field}").add_scalar_series(
                {node: getattr(s, field) for node, s in stats.items()}
            )
    if stats is not None and name == THRESHOLDS_STAGE:
        pairs, titles = grid_histograms(graph, stats)
        main.add_histogram_pairs(pairs, titles)
        for tag, png, title in channel_images(graph, dict(stats)):
            main.add_image(tag, png, display_name=title)
    if report.quantized_weights:
        main.add_histogram_pairs(weight_histograms(graph, report.quantized_weights))
    if report.mixed_precision is not None:
        write_bit_widths(main, report.mixed_precision)
    if report.similarity is not None:
        write_similarity(main, report.similarity, graph, report.quantized_weights)


def grid_histograms(
    graph: Graph, stats: Mapping[str, NodeStatistics]
) -> tuple[dict[str, HistogramPair], dict[str, str]]:
    """Tag = layer -> (its float output over all the data, those values through its grid),
    for every activation whose grid is chosen; and the cards' titles."""
    pairs, titles = {}, {}
    for node in graph.nodes():
        s, act = stats.get(node.name), node.quant.activation
        if s is None or act is None or act.grid is None or s.count == 0:
            continue
        through = histogram_through_grid(s.counts, s.edges, act.grid)
        pairs[node.name] = (
            histogram_proto(s.counts, s.edges, s.count, s.sum, s.sum_squares, s.min, s.max),
            histogram_proto(through, s.edges),
        )
        step = float(np.max(act.grid.scale))
        titles[node.name] = (
            f"{node.name}: float (step 0) and through its {act.n_bits}-bit grid, step {step:.4g} (step 1)"
        )
    return pairs, titles


def _weight_pair(float_weights: np.ndarray, quantized: np.ndarray) -> tuple | None:
    """Histograms of a weight, float and quantized, on the same uniform bins (None if no finite value)."""
    finite = [finite_values(float_weights), finite_values(quantized)]
    if not any(v.size for v in finite):
        return None
    lo = float(min(v.min() for v in finite if v.size))
    hi = float(max(v.max() for v in finite if v.size))
    bins = (WEIGHT_BINS, (lo, hi if hi > lo else lo + 1.0))
    return histogram_from_values(finite[0], *bins), histogram_from_values(finite[1], *bins)


def weight_histograms(
    graph: Graph, quantized: Mapping[str, Mapping[str, np.ndarray]]
) -> dict[str, HistogramPair]:
    """Tag ``<layer>/weights`` (other weights: ``<layer>/weights/<name>``) -> float and
    quantized histograms on the same bins.

    The layers are binned by a small thread pool: numpy releases the GIL while it
    counts, so the cores the model build leaves idle share the work.
    """
    pairs = [
        (
            f"{name}/weights" if wname == "kernel" else f"{name}/weights/{wname}",
            graph.node(name).weights[wname],
            q,
        )
        for name, weights in quantized.items()
        if name in graph
        for wname, q in weights.items()
        if wname in graph.node(name).weights
    ]
    with ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
        done = pool.map(lambda pair: _weight_pair(*pair[1:]), pairs)
        return {tag: hists for (tag, _, _), hists in zip(pairs, done) if hists is not None}
