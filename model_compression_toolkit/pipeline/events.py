"""What the runner tells its observer when a stage completes.

The runner calls ``sink.stage(report)`` after every stage; the sink (the TensorBoard
logger, or nothing when no log folder is set) only reads the report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from model_compression_toolkit.core.calibration.statistics import NodeStatistics
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.similarity.analysis import SimilarityResult

STAGES = (
    "initial_graph",
    "after_graph_preparation",
    "after_statistics_collection",
    "thresholds_selection",
    "quantized_graph",
)


@dataclass
class NodeMemory:
    """Bytes a node needs at a stage: its weights and its output activation (one sample)."""

    weights_bytes: float
    activation_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.activation_bytes


@dataclass
class StageReport:
    """The state of the quantization when a stage completes.

    Attributes:
        name: one of STAGES.
        graph: the graph at that stage (read only for the sink).
        memory: bytes per node at the stage's bit-widths.
        statistics: per-node activation statistics (statistics stages only).
        quantized_weights: node -> weight name -> quantized weights (quantized_graph only).
        similarity: the float vs quantized comparison (quantized_graph, when it ran).
        mixed_precision: the bit-widths chosen under a memory budget (quantized_graph,
            when a budget was given): a `core.mixed_precision.MixedPrecisionResult`.
    """

    name: str
    graph: Graph
    memory: Mapping[str, NodeMemory]
    statistics: Mapping[str, NodeStatistics] | None = None
    quantized_weights: Mapping[str, Mapping[str, np.ndarray]] = field(default_factory=dict)
    similarity: SimilarityResult | None = None
    mixed_precision: Any = None


class StageSink(Protocol):
    def stage(self, report: StageReport) -> None: ...

    def close(self) -> None: ...


class NullSink:
    """The sink used when no log folder is set: does nothing, costs nothing."""

    def stage(self, report: StageReport) -> None:
        pass

    def close(self) -> None:
        pass
