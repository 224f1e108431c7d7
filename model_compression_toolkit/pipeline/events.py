"""What the pipeline tells its observer, and the observer it tells.

    pipeline --stage_finished(StageReport)---> observer   after each stage of a PTQ call
             --trial_finished(TrialReport)-->             after each tuning trial is evaluated
             --tuning_finished(TuningResult)->            when tuning has chosen its trial

The pipeline calls these and never asks who listens or whether logging is on: with no log
folder the observer is a `NullObserver`. An observer only reads what it is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from model_compression_toolkit.core.calibration.statistics import NodeStatistics
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
    """Whoever listens to a PTQ call: the log folder's TensorBoard observer, or nobody."""

    def stage_finished(self, report: StageReport) -> None: ...

    def trial_finished(self, report: TrialReport) -> None: ...

    def tuning_finished(self, result: TuningResult) -> None: ...


class NullObserver:
    """The observer of a call with no log folder: hears everything, does nothing."""

    def stage_finished(self, report: StageReport) -> None:
        pass

    def trial_finished(self, report: TrialReport) -> None:
        pass

    def tuning_finished(self, result: TuningResult) -> None:
        pass
