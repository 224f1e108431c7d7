"""The impact probe of one analysis: what the comparison already ran is not run again.

The comparison runs the quantized model on the first samples; the impact probe
(`causes.ImpactProbe`) runs variants of that model on the same samples, in the same
chunks. One of those variants is the quantized model itself (the suggested fix measures
the output before any fix), and its outputs are the ones the comparison saw::

    comparison: quantized model --tap--> its outputs on the impact chunks (kept, copied)
    probe.impact(quantized graph) -> parts.measure(float outputs, kept outputs)

so that variant costs no model run. And the chunks the comparison cut small (its memory
cap) are joined again for the probe (`joined`), up to the size of a batch the model
already ran: every variant then runs once per batch, not once per piece.
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
        float_outputs: the float model's outputs on each chunk, alike (the comparison's
            reference): the quantized graph is then measured with no run at all, until
            `prepare` runs the float model for the cuts (None: `prepare` gives them).
    """

    def __init__(
        self,
        backend: Backend,
        graph: Graph,
        chunks: list[list[np.ndarray]],
        memory_cap: int = 1 << 30,
        quantized_outputs: list[list[np.ndarray]] | None = None,
        float_outputs: list[list[np.ndarray]] | None = None,
    ) -> None:
        super().__init__(backend, graph, chunks, memory_cap)
        for kind, given in (("quantized", quantized_outputs), ("float", float_outputs)):
            if given is not None and len(given) != len(chunks):
                raise ValueError(f"{len(given)} chunks of {kind} outputs for {len(chunks)} chunks")
        self.quantized_outputs = quantized_outputs
        self._measured: tuple[list[list[np.ndarray]], OutputImpact] | None = None
        if float_outputs is not None and quantized_outputs is not None:
            self._reference = float_outputs
        self.runs_saved = 0  # how many runs of the quantized graph the kept outputs replaced

    def impact(self, variant: Graph, at: str | None = None) -> OutputImpact:
        """As `ImpactProbe.impact`; the quantized graph itself (the very object this probe
        was made with) is measured on the outputs the comparison kept."""
        if variant is self.graph and at is None and self.quantized_outputs is not None:
            if _same_shapes(self.reference, self.quantized_outputs):
                self.runs_saved += 1
                if self._measured is None or self._measured[0] is not self.reference:  # once a reference
                    self._measured = (self.reference, measure(self.parts, self.reference, self.quantized_outputs))
                return self._measured[1]
            # a model that mixes the samples of a batch (an ONNX file's fixed batch of 1 in a
            # reshape: (2, n, c) in, (1, 2n, c) out) gives on a joined chunk no concatenation of
            # what it gave on the pieces: the quantized graph runs like any other variant
            self.quantized_outputs = None
        return super().impact(variant, at)


def joined(
    chunks: list[list[np.ndarray]], outputs: list[list[np.ndarray]] | None, batch: int
) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]] | None]:
    """Consecutive ``chunks`` (model inputs) joined into chunks of at most ``batch``
    samples, and ``outputs`` (each chunk's model outputs, or None) alike.

    ``chunk(2) + chunk(2) + chunk(2) + chunk(2) -> chunk(8)`` when ``batch`` is 8 (the size
    of a batch the model ran). Nothing is joined where a chunk holds an array without a
    batch axis (a scalar input or output): its value is over that chunk only.
    """
    sizes = [len(chunk[0]) if chunk and np.ndim(chunk[0]) else 0 for chunk in chunks]
    per_sample = _per_sample(chunks, sizes) and (outputs is None or _per_sample(outputs, sizes))
    if len(chunks) < 2 or not per_sample or not all(sizes):
        return chunks, outputs
    groups: list[list[int]] = []
    for index, size in enumerate(sizes):
        if groups and sum(sizes[i] for i in groups[-1]) + size <= batch:
            groups[-1].append(index)
        else:
            groups.append([index])

    def join(parts: list[list[np.ndarray]], group: list[int]) -> list[np.ndarray]:
        if len(group) == 1:
            return parts[group[0]]
        return [np.concatenate([parts[i][k] for i in group]) for k in range(len(parts[group[0]]))]

    return [join(chunks, g) for g in groups], None if outputs is None else [join(outputs, g) for g in groups]


def _per_sample(parts: list[list[np.ndarray]], sizes: list[int]) -> bool:
    """Whether every array of each part runs over that part's samples (axis 0)."""
    return all(np.ndim(a) > 0 and len(a) == size for size, arrays in zip(sizes, parts) for a in arrays)


def _same_shapes(reference: list[list[np.ndarray]], outputs: list[list[np.ndarray]]) -> bool:
    """Whether each chunk's kept outputs have the float reference's shapes."""
    return len(reference) == len(outputs) and all(
        len(r) == len(o) and all(np.shape(a) == np.shape(b) for a, b in zip(r, o)) for r, o in zip(reference, outputs)
    )
