"""What the pipeline tells its observer, and the observer it tells.

    pipeline --progress(Progress)-----------> observer   as a long step advances
             --stage_finished(StageReport)-->             after each stage of a PTQ call
             --trial_finished(TrialReport)-->             after each tuning trial is evaluated
             --tuning_finished(TuningResult)->            when tuning has chosen its trial
             --export_finished(ExportReport)->            when an export's file is written and
                                                          compared (`pipeline.export`)

The pipeline calls these and never asks who listens, whether logging is on or whether
anyone shows progress: with no log folder the observer shows progress only (see
`observers.call`), and a `NullObserver` hears nothing. An observer only reads what it is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from model_compression_toolkit.core.calibration.statistics import NodeStatistics
from model_compression_toolkit.core.export.report import ExportReport
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.memory import NodeMemory
from model_compression_toolkit.core.mixed_precision.result import MixedPrecisionResult
from model_compression_toolkit.core.similarity.analysis import SimilarityResult
from model_compression_toolkit.core.tuning import TuningResult, TuningTrial

STAGES = (
    "initial_graph",
    "after_graph_preparation",
    "after_statistics_collection",
    "thresholds_selection",
    "quantized_graph",
)


@dataclass(frozen=True)
class Progress:
    """How far one step of a call has got: ``done`` of ``total`` (None: not known) ``unit``.

    Steps: ``statistics`` (batches), ``thresholds`` (layers), ``similarity`` (samples),
    ``output impact`` (quantizers), ``tuning`` (trials).
    """

    step: str
    done: int
    total: int | None = None
    unit: str = ""


@dataclass
class StageReport:
    """The state of the quantization when a stage completes.

    Attributes:
        name: one of STAGES.
        graph: the graph at that stage (read only for the observer).
        memory: bytes per node at the stage's bit-widths.
        statistics: per-node activation statistics (statistics stages only).
        quantized_weights: node -> weight name -> quantized weights (quantized_graph only).
        similarity: the float vs quantized comparison (quantized_graph, when it ran).
        mixed_precision: the bit-widths chosen under a memory budget (quantized_graph,
            when a budget was given).
    """

    name: str
    graph: Graph
    memory: Mapping[str, NodeMemory]
    statistics: Mapping[str, NodeStatistics] | None = None
    quantized_weights: Mapping[str, Mapping[str, np.ndarray]] = field(default_factory=dict)
    similarity: SimilarityResult | None = None
    mixed_precision: MixedPrecisionResult | None = None


@dataclass
class TrialReport:
    """One tuning trial, evaluated.

    Attributes:
        trial: its number, score, drop and the layers it kept float.
        graph: its quantized graph.
        memory: bytes per node at its bit-widths.
        similarity: its comparison with the float model (the activation histograms).
        float_graph: the float model's graph (the baseline the trials are compared with).
        baseline_score: the float model's score.
    """

    trial: TuningTrial
    graph: Graph
    memory: Mapping[str, NodeMemory]
    similarity: SimilarityResult
    float_graph: Graph
    baseline_score: float


class Observer(Protocol):
    """Whoever listens to a PTQ or export call: the log folder's TensorBoard observer, the
    console's progress display, or nobody."""

    def progress(self, progress: Progress) -> None: ...

    def stage_finished(self, report: StageReport) -> None: ...

    def trial_finished(self, report: TrialReport) -> None: ...

    def tuning_finished(self, result: TuningResult) -> None: ...

    def export_finished(self, report: ExportReport) -> None: ...


class NullObserver:
    """An observer that hears everything and does nothing."""

    def progress(self, progress: Progress) -> None:
        pass

    def stage_finished(self, report: StageReport) -> None:
        pass

    def trial_finished(self, report: TrialReport) -> None:
        pass

    def tuning_finished(self, result: TuningResult) -> None:
        pass

    def export_finished(self, report: ExportReport) -> None:
        pass


class Fanout:
    """Tells every one of ``observers`` each event, in order."""

    def __init__(self, *observers: Observer) -> None:
        self.observers = observers

    def progress(self, progress: Progress) -> None:
        for observer in self.observers:
            observer.progress(progress)

    def stage_finished(self, report: StageReport) -> None:
        for observer in self.observers:
            observer.stage_finished(report)

    def trial_finished(self, report: TrialReport) -> None:
        for observer in self.observers:
            observer.trial_finished(report)

    def tuning_finished(self, result: TuningResult) -> None:
        for observer in self.observers:
            observer.tuning_finished(result)

    def export_finished(self, report: ExportReport) -> None:
        for observer in self.observers:
            observer.export_finished(report)
