"""The float side of a comparison: the float model, its outputs on the first samples.

``statistics pass -> FloatReference.add -> chunks() -> quantized and local passes``; when
the outputs do not fit the memory cap, `float_chunks` runs the float model again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from model_compression_toolkit.core.backend import Backend
from model_compression_toolkit.core.data import RepresentativeData
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.similarity.plan import Comparison

Chunk = tuple[list[np.ndarray], dict[str, np.ndarray]]  # (model inputs, float-graph node -> output)


class FloatReference:
    """The first samples of the representative data and the float model's outputs on them.

    Recorded during the statistics pass, which runs the float model anyway, so that the
    similarity analysis and the mixed-precision search need no float pass of their own:
    ``statistics pass -> add(batch, outputs) -> chunks() -> quantized and local passes``.
    The batches are kept as they came (only the last one is cut), so nothing is copied.

    When the outputs do not fit the memory cap, ``keep=False`` keeps none of them, only the
    float histograms of the first samples and the statistics pass's model (``model``): the
    comparison then runs the float model again, on that model's layers, and does not bin
    its outputs.

    Args:
        names: the float-graph nodes whose outputs are kept.
        samples: how many samples to keep (fewer when the data holds fewer).
        keep: whether to keep the inputs and outputs, or only count the samples seen.
    """

    def __init__(self, names: list[str], samples: int, keep: bool = True) -> None:
        self.names, self.wanted, self.keep = list(names), int(samples), keep
        self.model: Any = None  # with keep=False: the float model the statistics pass ran
        self.samples = 0
        self._chunks: list[Chunk] = []
        # node -> (counts, edges): the histogram of its float output on exactly the kept
        # samples, on the statistics' bins (the float side of the comparison's histograms);
        # set by whoever feeds the batches
        self.histograms: dict[str, tuple[np.ndarray, np.ndarray]] | None = None

    @property
    def room(self) -> int:
        """Samples still wanted."""
        return self.wanted - self.samples

    def histograms_of(self, samples: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The float histograms of the first ``samples`` samples, when those are the samples
        the histograms were taken on (``keep`` or not): as many, or more when the data
        ran out before the samples wanted."""
        exact = samples == self.samples or self.samples < samples and self.room > 0
        return (self.histograms or {}) if exact else {}

    def add(self, inputs: list[np.ndarray], outputs: dict[str, np.ndarray]) -> None:
        """Keep the part of one batch that falls within the first ``samples`` samples (an
        output without a batch axis, a scalar, is kept whole)."""
        batch = len(inputs[0])
        take = min(self.room, batch)
        if take <= 0:
            return
        self.samples += take
        if not self.keep:
            return

        def cut(a: np.ndarray) -> np.ndarray:  # a copy, so that the rest of the batch is let go
            return np.array(a[:take]) if take < batch and has_batch_axis(a, batch) else a

        self._chunks.append(([cut(a) for a in inputs], {n: cut(outputs[n]) for n in self.names}))

    def covers(self, names: list[str], samples: int) -> bool:
        """Whether the first ``samples`` samples of the data and the outputs ``names`` are all here."""
        return self.keep and samples <= self.wanted and set(names) <= set(self.names)

    def chunks(self, samples: int, chunk: int | None = None) -> Iterator[Chunk]:
        """The kept batches, cut after the first ``samples`` samples and into pieces of at
        most ``chunk`` samples (views: nothing is copied). A batch holding an output without
        a batch axis is yielded whole, as that output's value is over the whole batch."""
        left = samples
        for inputs, outputs in self._chunks:
            if left <= 0:
                return
            batch = len(inputs[0])
            take = min(left, batch)
            whole = not all(has_batch_axis(v, batch) for v in outputs.values())
            step = take if whole or not chunk else max(1, int(chunk))
            for start in range(0, take, step):
                end = min(start + step, take)
                cut = {n: v[start:end] if has_batch_axis(v, batch) else v for n, v in outputs.items()}
                yield [a[start:end] for a in inputs], cut
            left -= take


def has_batch_axis(value: np.ndarray, batch: int) -> bool:
    """Whether ``value``'s first axis runs over a batch of ``batch`` samples (a scalar's does not)."""
    return np.ndim(value) > 0 and len(value) == batch


def sample_chunks(batches: Iterator[list[np.ndarray]], chunk: int) -> Iterator[list[np.ndarray]]:
    """Re-cut a stream of batches into chunks of ``chunk`` samples (the last may be smaller)."""
    pending: list[list[np.ndarray]] = []
    count = 0
    for batch in batches:
        pending.append(batch)
        count += len(batch[0])
        while count >= chunk:
            joined = [np.concatenate([b[i] for b in pending]) for i in range(len(pending[0]))]
            yield [a[:chunk] for a in joined]
            rest = [a[chunk:] for a in joined]
            count -= chunk
            pending = [rest] if count else []
    if count:
        yield [np.concatenate([b[i] for b in pending]) for i in range(len(pending[0]))]


@dataclass(frozen=True)
class FloatModel:
    """The float model a quantized graph is compared with.

    Attributes:
        backend: builds and runs models of its framework.
        graph: the user's model as read, before any transform.
        data: the representative data.
        reference: the float outputs the statistics pass kept, if any.
    """

    backend: Backend
    graph: Graph
    data: RepresentativeData
    reference: FloatReference | None = None


def float_chunks(float_model: FloatModel, plan: Comparison, samples: int, memory_cap: int) -> Iterator[Chunk]:
    """(inputs, float outputs at ``plan.float_names``) for the first ``samples`` samples,
    in chunks that keep the outputs held at once under ``memory_cap`` (`Comparison.chunk_size`).

    From ``reference`` when it holds them (no float pass at all), else from a float pass
    over a fresh iteration of the data (on the layers of the statistics pass's model, when
    ``reference`` kept it).
    """
    backend, float_graph, reference = float_model.backend, float_model.graph, float_model.reference
    names = plan.float_names
    if reference is not None and reference.covers(names, samples):
        held = min(samples, reference.samples)  # the data may hold fewer samples than wanted
        yield from reference.chunks(samples, plan.chunk_size(held, memory_cap, reference=True))
        return
    model = backend.build(
        float_graph,
        quantized=False,
        extra_outputs=names,
        share=reference.model if reference is not None else None,
    )
    skip = len(float_graph.outputs)
    for inputs in sample_chunks(float_model.data.samples(samples), plan.chunk_size(samples, memory_cap)):
        yield inputs, dict(zip(names, backend.forward(model, inputs)[skip:]))
