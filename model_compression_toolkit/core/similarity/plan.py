"""What a float vs quantized comparison compares, and what it runs to do so.

The comparison (`core.similarity.analysis`) runs three models on the first N samples, in chunks that keep the extra memory under a cap:

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
from collections.abc import Mapping
from dataclasses import dataclass

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
        if (
            (quantized or kept or is_output)
            and node.output_reference in float_graph
            and node.kind != OpKind.SHAPE
        ):
            points.append(ComparePoint(node.name, node.output_reference, position, is_output))
    return points


def local_group(graph: Graph, point: Node) -> list[Node]:
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
        return [float_outputs[ref] if isinstance(ref, str) else data[ref] for _, ref in self.feeds]


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
        group = local_group(q_graph, node)
        members = {n.name for n in group}
        inputs = [e for n in group for e in q_graph.in_edges(n.name) if e.src not in members]
        # the float model's values are read at each node's first output: a group fed by
        # another output of its producer (Keras' split, a layer returning its state) gets no
        # local error rather than one measured on the wrong input
        if any(n.kind in _NO_LOCAL for n in group) or any(
            q_graph.node(e.src).kind == OpKind.SHAPE or e.src_index > 0
            for e in inputs
        ):
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
            clone = dataclasses.replace(
                member, name=member.name + LOCAL_SUFFIX, origin=[member.name + LOCAL_SUFFIX]
            )
            local.add_node(clone)
            if member.kind == OpKind.INPUT:
                local.inputs.append(clone.name)
                feeds.append(("data", q_graph.inputs.index(member.name)))
        for member in group:
            for e in q_graph.in_edges(member.name):
                source = e.src + LOCAL_SUFFIX if e.src in members else placeholders[(e.src, e.src_index)]
                src_index = e.src_index if e.src in members else 0
                local.add_edge(source, member.name + LOCAL_SUFFIX, src_index, e.dst_index)
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
    return list(
        dict.fromkeys(
            [p.reference for p in points]
            + [ref for kind, ref in local.feeds if kind == "float" and isinstance(ref, str)]
        )
    )


def chunk_size(per_sample_bytes: float, samples: int, memory_cap: int) -> int:
    """Samples per chunk so that the layer outputs held at once stay under ``memory_cap``."""
    if per_sample_bytes <= 0:
        return samples
    return int(max(1, min(samples, memory_cap // per_sample_bytes)))


BYTES_PER_VALUE = 4


def _bytes_per_sample(graph: Graph, names: list[str]) -> float:
    return float(sum(graph.node(n).output_size() for n in names) * BYTES_PER_VALUE)


@dataclass
class Comparison:
    """What comparing a float graph with a quantized one runs and reads.

    Attributes:
        points: the compare points (``point.local`` set where a local error is computed).
        local: the local model's graph and feeds.
        float_names: the float-graph nodes whose outputs are read.
        float_bytes: bytes per sample of those float outputs.
        other_bytes: bytes per sample of the larger of the quantized and local models'
            outputs at the compare points: a bound on what one of their runs holds of
            them (PyTorch lets each go once reduced; a Keras call holds all until it
            returns).
    """

    points: list[ComparePoint]
    local: LocalGraph
    float_names: list[str]
    float_bytes: float
    other_bytes: float

    @classmethod
    def of(cls, float_graph: Graph, q_graph: Graph) -> Comparison:
        points = compare_points(float_graph, q_graph)
        local = local_graph(q_graph, points)
        names = float_names(points, local)
        other = max(
            _bytes_per_sample(q_graph, [p.name for p in points]),
            _bytes_per_sample(local.graph, [name for name, _ in local.graph.outputs]),
        )
        return cls(points, local, names, _bytes_per_sample(float_graph, names), other)

    def keeps_reference(self, samples: int, memory_cap: int) -> bool:
        """Whether the float outputs of all ``samples`` fit under ``memory_cap`` with room
        left for one sample of the quantized or local model's outputs."""
        return samples * self.float_bytes + self.other_bytes <= memory_cap

    def chunk_size(self, samples: int, memory_cap: int, reference: bool = False) -> int:
        """Samples per chunk so that the outputs held at once stay under ``memory_cap``:
        the float ones of the chunk and one model's; with ``reference``, the float ones of
        all the samples (kept by the statistics pass) and one model's on the chunk."""
        if reference:
            return chunk_size(self.other_bytes, samples, int(memory_cap - samples * self.float_bytes))
        return chunk_size(self.float_bytes + self.other_bytes, samples, memory_cap)
