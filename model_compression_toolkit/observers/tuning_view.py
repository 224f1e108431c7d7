"""Accuracy-driven tuning in TensorBoard: one run per evaluation, compared in the run selector.

    <ptq run>/baseline_acc_97.2292/   Graphs      the float model's graph; `Resources` at float32
                                      Histograms  <compare point>: float activations
    <ptq run>/tune_1_acc_61.4610/     Graphs      the trial's quantized graph, coloured by error
                                                  ("Color by device"); `Resources` at its bit-widths
                                      Histograms  <compare point>: quantized activations
    <ptq run>/tune_2_acc_96.9773/     ... the same tags, so each layer's fp32 and int8
                                      histograms sit side by side
    <ptq run>/tuning/                 Scalars     tuning/accuracy, tuning/drop (step = trial, 0 = baseline)
                                      Text        tuning/trials (trial, layers kept float, score, drop, memory)

Every function takes the writer and the data; with logging off the writer is disabled and
nothing is built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tensorboard.compat.proto import summary_pb2

from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.memory import NodeMemory
from model_compression_toolkit.core.similarity.analysis import PairHistogram
from model_compression_toolkit.core.similarity.report import SimilarityReport
from model_compression_toolkit.core.tuning import TuningResult
from model_compression_toolkit.observers.event_file import RunWriter
from model_compression_toolkit.observers.protos import (
    RESOURCES_TAG,
    graph_def,
    histogram_proto,
    run_metadata,
)
from model_compression_toolkit.observers.similarity_view import error_devices, metric_attrs
from model_compression_toolkit.observers.tables import markdown_table

ACCURACY_TAG = "tuning/accuracy"
DROP_TAG = "tuning/drop"
TRIALS_TAG = "tuning/trials"


def activation_histograms(
    histograms: Mapping[str, PairHistogram], tags: Sequence[str], quantized: bool
) -> dict[str, summary_pb2.HistogramProto]:
    """Tag = compare point name -> its float or quantized activation histogram (the pair's edges).

    Only ``tags`` are written, so every evaluation run holds the same tags.
    """
    out = {}
    for tag in tags:
        pair = histograms.get(tag)
        if pair is not None:
            out[tag] = histogram_proto(pair.quantized_counts if quantized else pair.float_counts, pair.edges)
    return out


def write_evaluation(
    writer: RunWriter,
    graph: Graph,
    memory: Mapping[str, NodeMemory],
    histograms: Mapping[str, summary_pb2.HistogramProto],
    similarity: SimilarityReport | None = None,
) -> None:
    """One evaluated model: its graph, `Resources` run metadata and activation histograms.

    Args:
        writer: the evaluation's run (``baseline_acc_<score>`` or ``tune_<n>_acc_<score>``).
        graph: the float graph (baseline) or the trial's quantized graph.
        memory: bytes per node at the graph's bit-widths.
        histograms: from `activation_histograms`.
        similarity: the trial's report: nodes are coloured by error and carry its metrics.
    """
    if writer.disabled:
        return
    devices = error_devices(similarity) if similarity is not None else None
    attrs = metric_attrs(similarity) if similarity is not None else None
    writer.add_graph(graph_def(graph, memory, devices, attrs))
    writer.add_run_metadata(RESOURCES_TAG, run_metadata(graph, memory, devices))
    writer.add_histograms(histograms)
    writer.flush()


def _kib(n: float) -> str:
    return f"{n / 1024:.1f} KiB"


def trials_markdown(result: TuningResult) -> str:
    """The trials as a table, baseline first; the returned trial is marked."""
    rows = [
        [
            "0 (float)",
            "all",
            f"{result.baseline_score:.4f}",
            "-",
            _kib(result.baseline_weights_bytes),
            f"`{result.baseline_run}`",
        ]
    ]
    for t in result.trials:
        mark = " (returned)" if t.n == result.best_trial else ""
        kept = ", ".join(f"`{name}`" for name in t.kept_float) or "none"
        rows.append(
            [
                f"{t.n}{mark}",
                kept,
                f"{t.score:.4f}",
                result.format_drop(t.drop),
                _kib(t.weights_bytes),
                f"`{t.run_name}`",
            ]
        )
    verdict = "met" if result.target_met else "**not met**"
    head = (
        f"allowed drop {result.format_drop(result.max_drop)}: {verdict}; "
        f"returned trial {result.best_trial}\n\n"
    )
    return head + markdown_table(
        ["trial", "layers kept float", "score", "drop", "weights memory", "run"], rows
    )


def write_tuning(writer: RunWriter, result: TuningResult) -> None:
    """The ``tuning`` run: score and drop per trial (step 0 = the float model), and the table."""
    if writer.disabled:
        return
    writer.add_scalar(ACCURACY_TAG, result.baseline_score, step=0)
    writer.add_scalar(DROP_TAG, 0.0, step=0)
    for t in result.trials:
        writer.add_scalar(ACCURACY_TAG, t.score, step=t.n)
        writer.add_scalar(DROP_TAG, t.drop, step=t.n)
    writer.add_text(TRIALS_TAG, trials_markdown(result))
    writer.flush()
