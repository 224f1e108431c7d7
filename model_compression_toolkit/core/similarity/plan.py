"""Float vs quantized, layer by layer, on the first N representative samples.

Three models see the same samples, in chunks that keep the extra memory under a cap:

- the float model rebuilt from the user's original graph (before BN folding), with an
  extra output at every compare point's reference and at every local group's inputs.
  The statistics pass runs this model anyway: it keeps these outputs on the first N
  samples (`FloatReference`) when they fit under the cap, and the float model need
  not run again;
- the quantized model, with an extra output at every compare point (after its quantizer);
- a "local" model of single quantized layers, each fed the float model's inputs.

``float_ref -> metrics <- quantized_point`` gives the accumulated error (the quantized
model end to end); ``float_ref -> metrics <- local_point`` the local error (that layer alone
quantized), so the layer that breaks things stands out from those inheriting its damage.
Layer outputs are reduced to metrics and histograms as they are produced.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.core.preparation import KEPT_FLOAT

LOCAL_SUFFIX = "__local"
_NO_LOCAL = frozenset({OpKind.SHAPE, OpKind.UNKNOWN})


@dataclass
class ComparePoint:
    """Where the float and quantized models are compared.

    Attributes:
        name: node of the quantized graph (its output after the activation quantizer).
        reference: node of the float graph with the same output.
        position: index of the node in the quantized graph's topological order.
        is_output: whether it is a model output.
        local: name of the node in the local graph, or None when no local error is computed.
    """

    name: str
    reference: str
    position: int
    is_output: bool
    local: str | None = None


def compare_points(float_graph: Graph, q_graph: Graph) -> list[ComparePoint]:
    """Every quantized activation, every output the user kept float, and every model output."""
    points = []
    for position, node in enumerate(q_graph.nodes()):
        quantized = node.quant.activation is not None  # its grid may not be chosen yet
        kept = node.quant.activation_float_reason == KEPT_FLOAT
        is_output = q_graph.is_output(node.name)
        if (quantized or kept or is_output) and node.output_reference in float_graph and node.kind != OpKind.SHAPE:
            points.append(ComparePoint(node.name, node.output_reference, position, is_output))
    return points


def _local_group(graph: Graph, point: Node) -> list[Node]:
    """The point and the fused layers before it that have no quantizer of their own.

    ``conv -> relu(q)``: the local unit of ``relu`` is conv and relu together.
    """
    group, frontier = [point], [point]
    while frontier:
        node = frontier.pop()
        for prev in graph.predecessors(node.name):
            if (
                prev.quant.activation is None
                and prev.quant.weights
                and graph.consumers_count(prev.name) == 1
                and prev not in group
            ):
                group.append(prev)
                frontier.append(prev)
    return group


@dataclass
class LocalGraph:
    """The local model's graph and, for each of its inputs, where its data comes from.

    ``feeds[i]`` is ``("float", node)`` for an output of the float model or
    ``("data", k)`` for the k-th model input.
    """

    graph: Graph
    feeds: list[tuple[str, str | int]]

    def inputs(self, data: list[np.ndarray], float_outputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The local model's inputs for one chunk: its model inputs ``data`` and the float
        model's outputs on them."""
        return [float_outputs[ref] if kind == "float" else data[ref] for kind, ref in self.feeds]


def local_graph(q_graph: Graph, points: list[ComparePoint]) -> LocalGraph:
    """Copies of each compare point's local group, fed from placeholders.

    ``float(prev) -> [conv__local -> relu__local(q)]`` for every group, side by side.
    Sets ``point.local`` for the points that get a local error.
    """
    local = Graph(f"{q_graph.name}_local", q_graph.framework)
    feeds: list[tuple[str, str | int]] = []
    placeholders: dict[tuple[str, int], str] = {}
    for point in points:
        node = q_graph.node(point.name)
        group = _local_group(q_graph, node)
        members = {n.name for n in group}
        inputs = [e for n in group for e in q_graph.in_edges(n.name) if e.src not in members]
        if any(n.kind in _NO_LOCAL for n in group) or any(q_graph.node(e.src).kind == OpKind.SHAPE for e in inputs):
            continue
        for e in inputs:
            key = (e.src, e.src_index)
            if key in placeholders:
                continue
            src = q_graph.node(e.src)
            name = f"{e.src}__in{e.src_index}{LOCAL_SUFFIX}"
            if src.kind == OpKind.CONSTANT:
                local.add_node(dataclasses.replace(src, name=name, origin=[name]))
            else:
                local.add_node(_placeholder(name, src, e.src_index))
                local.inputs.append(name)
                feeds.append(("float", src.output_reference))
            placeholders[key] = name
        for member in reversed(group):  # producers first
            clone = dataclasses.replace(member, name=member.name + LOCAL_SUFFIX, origin=[member.name + LOCAL_SUFFIX])
            local.add_node(clone)
            if member.kind == OpKind.INPUT:
                local.inputs.append(clone.name)
                feeds.append(("data", q_graph.inputs.index(member.name)))
        for member in group:
            for e in q_graph.in_edges(member.name):
                src = e.src + LOCAL_SUFFIX if e.src in members else placeholders[(e.src, e.src_index)]
                src_index = e.src_index if e.src in members else 0
                local.add_edge(src, member.name + LOCAL_SUFFIX, src_index, e.dst_index)
        local.outputs.append((node.name + LOCAL_SUFFIX, 0))
        point.local = node.name + LOCAL_SUFFIX
    if local.outputs:
        local.validate()
    return LocalGraph(local, feeds)


def _placeholder(name: str, src: Node, index: int) -> Node:
    shape = src.output_shapes[index] if index < len(src.output_shapes) else src.output_shapes[0]
    return Node(
        name=name,
        kind=OpKind.INPUT,
        layer_type="Input",
        output_shapes=[shape],
        channel_axis=src.channel_axis,
        attrs={"dtype": src.attrs.get("dtype", "float32")},
    )


def float_names(points: list[ComparePoint], local: LocalGraph) -> list[str]:
    """The float-graph nodes whose outputs a comparison reads: every point's reference and
    every local group's float input, each once, in that order."""
    return list(dict.fromkeys([p.reference for p in points] + [ref for kind, ref in local.feeds if kind == "float"]))


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


def chunk_size(per_sample_bytes: float, samples: int, memory_cap: int) -> int:
    """Samples per chunk so that the layer outputs held at once stay under ``memory_cap``."""
    if per_sample_bytes <= 0:
        return samples
    return int(max(1, min(samples, memory_cap // per_sample_bytes)))
