"""Accuracy-driven tuning in TensorBoard: one run per evaluated trial, as LPOT names them.

    <call folder>/tune_1_acc_61.4610/  Graphs      the trial's quantized graph, coloured by error
                                                   ("Color: Device"); `Resources` at its bit-widths
                                       Histograms  <compare point>: step 0 the float model's output,
                                                   step 1 this trial's, on the same bins
    <call folder>/tune_2_acc_96.9773/  ... the same tags, so trials compare tag by tag
    <call folder>/tuning/              Scalars     tuning/accuracy, tuning/drop (step = trial, 0 = float)
                                       Text        tuning/trials (trial, layers kept float, score, drop, memory)

The float model needs no run of its own: its graph is ``1_initial_graph`` and its outputs
are step 0 of every histogram. Every function takes the writer and the data; with logging
off the writer is disabled and nothing is built.
"""

from __future__ import annotations

from collections.abc import Mapping

from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.memory import NodeMemory
from model_compression_toolkit.core.numbers import format_bytes
from model_compression_toolkit.core.similarity.analysis import SimilarityResult
from model_compression_toolkit.core.tuning import TuningResult
from model_compression_toolkit.observers.event_file import RunWriter
from model_compression_toolkit.observers.similarity_view import histogram_titles, pair_histograms
from model_compression_toolkit.observers.stage_view import stage_run, write_graph
from model_compression_toolkit.observers.tables import code, markdown_table

ACCURACY_TAG = "tuning/accuracy"
DROP_TAG = "tuning/drop"
TRIALS_TAG = "tuning/trials"


def write_evaluation(
    writer: RunWriter, graph: Graph, memory: Mapping[str, NodeMemory], similarity: SimilarityResult
) -> None:
    """One evaluated trial: its graph coloured by error, `Resources` run metadata, and its
    compare points' histograms against the float model's.

    Args:
        writer: the trial's run (``tune_<n>_acc_<score>``).
        graph: the trial's quantized graph.
        memory: bytes per node at the graph's bit-widths.
        similarity: the trial's comparison with the float model.
    """
    if writer.disabled:
        return
    write_graph(writer, graph, memory, similarity.report)
    pairs = {name: protos for name, pair in similarity.histograms.items() if (protos := pair_histograms(pair))}
    writer.add_histogram_pairs(pairs, histogram_titles(similarity.report, pairs))
    writer.flush()


def trials_markdown(result: TuningResult) -> str:
    """The trials as a table, baseline first; the returned trial is marked."""
    rows = [
        [
            "0 (float)",
            "all",
            f"{result.baseline_score:.4f}",
            "-",
            format_bytes(result.baseline_weights_bytes),
            code(stage_run("initial_graph")),
        ]
    ]
    for t in result.trials:
        mark = " (returned)" if t.n == result.best_trial else ""
        kept = ", ".join(code(name) for name in t.kept_float) or "none"
        rows.append(
            [
                f"{t.n}{mark}",
                kept,
                f"{t.score:.4f}",
                result.format_drop(t.drop),
                format_bytes(t.weights_bytes),
                code(t.run_name),
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
