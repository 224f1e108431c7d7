"""The TensorBoard sink: writes each stage the runner reports as TensorBoard runs.

Layout inside a run folder (the one `logger.ptq_run` creates)::

    <stage>/                      graph, "Resources" run metadata, text "summary",
                                  one activation histogram per node (statistics stages),
                                  "<node>/weights/float" and "<node>/weights/quantized"
                                  on the same bins (quantized_graph)
    <stage>/min_per_channel/      scalars, tag = node name, step = channel index
    <stage>/max_per_channel/
    <stage>/mean_per_channel/

A write failure (disk full) never reaches the quantization: the sink warns once, naming
the file that failed, stops writing to this run folder and leaves what was written
readable.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.observers.event_file import NullRunWriter, RunWriter
from model_compression_toolkit.observers.log_folder import safe_run_path
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
from model_compression_toolkit.pipeline.events import NodeMemory, StageReport

PER_CHANNEL = ("min_per_channel", "max_per_channel", "mean_per_channel")
WEIGHT_BINS = 256
SUMMARY_TAG = "summary"
logger = logging.getLogger("model_compression_toolkit")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table; ``|`` in cells is escaped."""

    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if abs(n) < 1024 or unit == "MiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def stage_markdown(name: str, graph: Graph, memory: Mapping[str, NodeMemory]) -> str:
    """The stage summary: layer counts, memory totals, then one row per layer."""
    nodes = graph.nodes()
    quantized = [n for n in nodes if n.quant.is_quantized]
    w_total = sum(m.weights_bytes for m in memory.values())
    a_total = sum(m.activation_bytes for m in memory.values())
    totals = markdown_table(
        ["total", "value"],
        [
            ["layers", len(nodes)],
            ["quantized layers", len(quantized)],
            ["float layers", len(nodes) - len(quantized)],
            ["weights memory", _bytes(w_total)],
            ["activation memory (one sample)", _bytes(a_total)],
            ["total memory", _bytes(w_total + a_total)],
        ],
    )
    rows = []
    for n in nodes:
        q, mem = n.quant, memory.get(n.name, NodeMemory(0.0, 0.0))
        w_bits = ", ".join(f"{w}: {c.n_bits}" for w, c in q.weights.items()) or (
            q.weights_float_reason or "-"
        )
        a_bits = str(q.activation.n_bits) if q.activation else (q.activation_float_reason or "float")
        rows.append(
            [
                f"`{n.name}`",
                n.layer_type,
                w_bits,
                a_bits,
                _bytes(mem.weights_bytes),
                _bytes(mem.activation_bytes),
            ]
        )
    layers = markdown_table(
        ["layer", "type", "weight bits", "activation bits", "weights", "activation"], rows
    )
    return f"### {name}: `{graph.name}` ({graph.framework})\n\n{totals}\n\n{layers}\n"


def _weight_pair(float_weights: np.ndarray, quantized: np.ndarray) -> tuple | None:
    """Histograms of a weight, float and quantized, on the same uniform bins (None if no finite value)."""
    finite = [finite_values(float_weights), finite_values(quantized)]
    if not any(v.size for v in finite):
        return None
    lo = float(min(v.min() for v in finite if v.size))
    hi = float(max(v.max() for v in finite if v.size))
    bins = (WEIGHT_BINS, (lo, hi if hi > lo else lo + 1.0))
    return histogram_from_values(finite[0], *bins), histogram_from_values(finite[1], *bins)


class TensorBoardSink:
    """A `StageSink` writing every reported stage under ``run_folder`` at once."""

    def __init__(self, run_folder: str | Path) -> None:
        self.run_folder = Path(run_folder)
        self.failed = False
        self._writers: list[RunWriter] = []

    # -------------------------------------------------------------- writers
    def _on_error(self, path: Path, exc: OSError) -> None:
        if not self.failed:
            self.failed = True
            warnings.warn(
                f"TensorBoard logging stopped: writing {path} failed ({exc}). Quantization "
                f"goes on; what was already written under {self.run_folder} stays readable.",
                RuntimeWarning,
                stacklevel=4,
            )
        for w in self._writers:
            w.disable()

    def writer(self, run_name: str) -> RunWriter:
        """Open the run ``<run_folder>/<run_name>`` (``/`` nests); closed by `close`."""
        path = safe_run_path(self.run_folder, run_name)
        if self.failed:
            return NullRunWriter(path)
        w = RunWriter(path, on_error=self._on_error)
        self._writers.append(w)
        return w

    def _finish(self, writers: list[RunWriter]) -> None:
        for w in writers:
            w.close()
            if w in self._writers:
                self._writers.remove(w)

    # -------------------------------------------------------------- stages
    def stage(self, report: StageReport) -> None:
        if self.failed:
            return
        graph, name = report.graph, report.name
        start = time.perf_counter()
        main = self.writer(name)
        opened = [main]
        devices = attrs = None
        if report.similarity is not None:  # colour the graph by error, show the metrics on nodes
            devices = error_devices(report.similarity.report)
            for node in graph.nodes():  # a conv fused with its activation shares the activation's error
                if node.quant.fused_into in devices:
                    devices.setdefault(node.name, devices[node.quant.fused_into])
            attrs = metric_attrs(report.similarity.report)
        try:
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
                    w = self.writer(f"{name}/{field}")
                    opened.append(w)
                    w.add_scalar_series({node: getattr(s, field) for node, s in stats.items()})
            if report.quantized_weights:
                main.add_histograms(self._weight_histograms(graph, report.quantized_weights))
            if report.mixed_precision is not None:
                write_bit_widths(main, report.mixed_precision)
            if report.similarity is not None:

                def open_writer(run_name: str) -> RunWriter:
                    opened.append(self.writer(run_name))
                    return opened[-1]

                write_similarity(open_writer, report.similarity, graph)
        finally:
            self._finish(opened)
        if not self.failed:
            logger.info(
                "stage %s: %d layers written to %s in %.3f s",
                name,
                len(graph),
                main.path,
                time.perf_counter() - start,
            )

    @staticmethod
    def _weight_histograms(graph: Graph, quantized: Mapping[str, Mapping[str, np.ndarray]]) -> dict:
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

    def close(self) -> None:
        writers, self._writers = self._writers, []
        for w in writers:
            w.close()
