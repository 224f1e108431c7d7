"""Accuracy-driven tuning in TensorBoard, inside the call's own runs: a tuned call writes
the same 8 runs as a plain one, so five calls, tuned or not, stay under TensorBoard's 40.

    <call folder>/5_quantized_graph/  Graphs      run graph: trial 1 (the plain PTQ, as staged);
                                                  Tag tune_<n>_acc_<score>: trial n's quantized
                                                  graph, coloured by error ("Color: Device")
                                      Histograms  <compare point>: step 0 the float model's output,
                                                  step n trial n's, so trials overlay in one card
                                      Scalars     tuning/accuracy, tuning/drop (step = trial, 0 = float)
                                      Text        tuning/trials (trial, what it changed, score, drop,
                                                  memory, graph tag)

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
from model_compression_toolkit.core.tuning import TuningResult, TuningTrial
from model_compression_toolkit.observers.event_file import RunWriter
from model_compression_toolkit.observers.similarity_view import pair_histograms
from model_compression_toolkit.observers.stage_view import stage_run, write_graph
from model_compression_toolkit.observers.tables import code, markdown_table

ACCURACY_TAG = "tuning/accuracy"
DROP_TAG = "tuning/drop"
TRIALS_TAG = "tuning/trials"


def write_evaluation(
    writer: RunWriter, trial: TuningTrial, graph: Graph, memory: Mapping[str, NodeMemory], similarity: SimilarityResult
) -> None:
    """One evaluated trial, into the call's ``5_quantized_graph`` run: its graph coloured by
    error under the tag ``trial.run_name``, and its compare points' quantized histograms at
    step ``trial.n`` beside the float model's (step 0). Called for trials 2 and later: trial 1
    is the staged PTQ, whose stage wrote both already.

    Args:
        writer: the ``5_quantized_graph`` run.
        trial: the trial (its number and its graph's tag).
        graph: the trial's quantized graph.
        memory: bytes per node at the graph's bit-widths.
        similarity: the trial's comparison with the float model.
    """
    if writer.disabled:
        return
    write_graph(writer, graph, memory, similarity.report, tag=trial.run_name)
    pairs = {name: protos for name, pair in similarity.histograms.items() if (protos := pair_histograms(pair))}
    writer.add_histograms({tag: pair[1] for tag, pair in pairs.items()}, step=trial.n)
    writer.flush()


def trials_markdown(result: TuningResult) -> str:
    """The trials as a table, baseline first; the returned trial is marked."""
    rows = [
        [
            "0 (float)",
            "all",
            "-",
            f"{result.baseline_score:.4f}",
            "-",
            format_bytes(result.baseline_weights_bytes),
            code(stage_run("initial_graph")),
        ]
    ]
    for t in result.trials:
        mark = " (returned)" if t.n == result.best_trial else ""
        kept = ", ".join(code(name) for name in t.kept_float) or "none"
        changed = ", ".join(code(c) for c in t.bit_changes()) or "-"
        rows.append(
            [
                f"{t.n}{mark}",
                kept,
                changed,
                f"{t.score:.4f}",
                result.format_drop(t.drop),
                format_bytes(t.weights_bytes),
                code(stage_run("quantized_graph")) if t.n == 1 else f"tag {code(t.run_name)}",
            ]
        )
    verdict = "met" if result.target_met else "**not met**"
    head = (
        f"allowed drop {result.format_drop(result.max_drop)}: {verdict}; "
        f"returned trial {result.best_trial}\n\n"
    )
    return head + markdown_table(
        ["trial", "layers kept float", "other changes", "score", "drop", "weights memory", "graph"], rows
    )


def write_tuning(writer: RunWriter, result: TuningResult) -> None:
    """Into the ``5_quantized_graph`` run: score and drop per trial (step 0 = the float
    model), and the table of trials."""
    if writer.disabled:
        return
    writer.add_scalar(ACCURACY_TAG, result.baseline_score, step=0)
    writer.add_scalar(DROP_TAG, 0.0, step=0)
    for t in result.trials:
        writer.add_scalar(ACCURACY_TAG, t.score, step=t.n)
        writer.add_scalar(DROP_TAG, t.drop, step=t.n)
    writer.add_text(TRIALS_TAG, trials_markdown(result))
    writer.flush()
