"""The impact probe of one analysis: what the comparison already ran is not run again.

The comparison runs the quantized model on the first samples; the impact probe
(`causes.ImpactProbe`) runs variants of that model on the same samples, in the same
chunks. One of those variants is the quantized model itself (the suggested fix measures
the output before any fix), and its outputs are the ones the comparison saw::

    comparison: quantized model --tap--> its outputs on the impact chunks (kept, copied)
    probe.impact(quantized graph) -> parts.measure(float outputs, kept outputs)

so that variant costs no model run.
"""

from __future__ import annotations

import numpy as np

from model_compression_toolkit.core.backend import Backend
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.similarity.causes import ImpactProbe
from model_compression_toolkit.core.similarity.parts import OutputImpact, measure


class ComparedProbe(ImpactProbe):
    """An `ImpactProbe` that holds the quantized graph's own outputs on its chunks.

    Args:
        backend, graph, chunks, memory_cap: as `ImpactProbe`'s.
        quantized_outputs: for each chunk, the outputs of the model built from ``graph``
            (quantized) on it, in the order of ``graph.outputs``; None when the comparison
            could not keep them.
    """

    def __init__(
        self,
        backend: Backend,
        graph: Graph,
        chunks: list[list[np.ndarray]],
        memory_cap: int = 1 << 30,
        quantized_outputs: list[list[np.ndarray]] | None = None,
    ) -> None:
        super().__init__(backend, graph, chunks, memory_cap)
        if quantized_outputs is not None and len(quantized_outputs) != len(chunks):
            raise ValueError(f"{len(quantized_outputs)} chunks of quantized outputs for {len(chunks)} chunks")
        self.quantized_outputs = quantized_outputs
        self.runs_saved = 0  # how many runs of the quantized graph the kept outputs replaced

    def impact(self, variant: Graph, at: str | None = None) -> OutputImpact:
        """As `ImpactProbe.impact`; the quantized graph itself (the very object this probe
        was made with) is measured on the outputs the comparison kept."""
        if variant is self.graph and at is None and self.quantized_outputs is not None:
            self.runs_saved += 1
            return measure(self.parts, self.reference, self.quantized_outputs)
        return super().impact(variant, at)
