"""One PTQ stage in TensorBoard: its graph, memory, summary, statistics and weights.

    <stage>/                      Graphs      the graph; "Resources" run metadata (memory per node)
                                  Text        summary (layer counts, memory, a row per layer)
                                  Histograms  one activation histogram per node (statistics stages);
                                              "<node>/weights/float" and ".../quantized" on the
                                              same bins (quantized_graph)
    <stage>/min_per_channel/      Scalars     tag = node name, step = channel index
    <stage>/max_per_channel/
    <stage>/mean_per_channel/

The quantized_graph stage also holds the mixed-precision view and, with the similarity
analysis, the graph coloured by error and the ``similarity`` runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.observers.event_file import RunWriter
from model_compression_toolkit.observers.mixed_precision_view import write_bit_widths
from model_compression_toolkit.observers.protos import (
    RESOURCES_TAG,
    finite_values,
    graph_def,
    histogram_from_values,
    histogram_proto,
    run_metadata,
)
from model_compression_toolkit.observers.similarity_view import error_devices, metric_attrs, write_similarity
from model_compression_toolkit.observers.tables import stage_markdown
from model_compression_toolkit.pipeline.events import StageReport

PER_CHANNEL = ("min_per_channel", "max_per_channel", "mean_per_channel")
WEIGHT_BINS = 256
SUMMARY_TAG = "summary"


def write_stage(open_writer: Callable[[str], RunWriter], report: StageReport) -> None:
    """Write ``report`` into runs opened by ``open_writer(run_name)`` (the caller closes them)."""
    graph, name = report.graph, report.name
    main = open_writer(name)
    devices = attrs = None
    if report.similarity is not None:  # colour the graph by error, show the metrics on nodes
        devices = error_devices(report.similarity.report)
        for node in graph.nodes():  # a conv fused with its activation shares the activation's error
            if node.quant.fused_into in devices:
                devices.setdefault(node.name, devices[node.quant.fused_into])
        attrs = metric_attrs(report.similarity.report)
    main.add_graph(graph_def(graph, report.memory, devices, attrs))
    main.add_run_metadata(RESOURCES_TAG, run_metadata(graph, report.memory, devices))
    main.add_text(SUMMARY_TAG, stage_markdown(name, graph, report.memory))
    if report.statistics is not None:
        stats = report.statistics
        main.add_histograms(
            {
                node: histogram_proto(s.counts, s.edges, s.count, s.sum, s.sum_squares, s.min, s.max)
                for node, s in stats.items()
            }
        )
        for field in PER_CHANNEL:
            open_writer(f"{name}/{field}").add_scalar_series({node: getattr(s, field) for node, s in stats.items()})
    if report.quantized_weights:
        main.add_histograms(weight_histograms(graph, report.quantized_weights))
    if report.mixed_precision is not None:
        write_bit_widths(main, report.mixed_precision)
    if report.similarity is not None:
        write_similarity(open_writer, report.similarity, graph, report.quantized_weights)


def _weight_pair(float_weights: np.ndarray, quantized: np.ndarray) -> tuple | None:
    """Histograms of a weight, float and quantized, on the same uniform bins (None if no finite value)."""
    finite = [finite_values(float_weights), finite_values(quantized)]
    if not any(v.size for v in finite):
        return None
    lo = float(min(v.min() for v in finite if v.size))
    hi = float(max(v.max() for v in finite if v.size))
    bins = (WEIGHT_BINS, (lo, hi if hi > lo else lo + 1.0))
    return histogram_from_values(finite[0], *bins), histogram_from_values(finite[1], *bins)


def weight_histograms(graph: Graph, quantized: Mapping[str, Mapping[str, np.ndarray]]) -> dict:
    """Float and quantized weights of each node on the same bins.

    The layers are binned by a small thread pool: numpy releases the GIL while it
    counts, so the cores the model build leaves idle share the work.
    """
    pairs = [
        (f"{name}/weights" if wname == "kernel" else f"{name}/weights/{wname}", graph.node(name).weights[wname], q)
        for name, weights in quantized.items()
        if name in graph
        for wname, q in weights.items()
        if wname in graph.node(name).weights
    ]
    with ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
        done = pool.map(lambda pair: _weight_pair(*pair[1:]), pairs)
        return {
            f"{base}/{kind}": h
            for (base, _, _), hists in zip(pairs, done)
            if hists is not None
            for kind, h in zip(("float", "quantized"), hists)
        }
