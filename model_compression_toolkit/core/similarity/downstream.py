"""Run only what one quantizer can change: its layer and the layers after it.

A variant of the float model with a single quantizer switched on computes the float
model's values everywhere but at that quantizer's layer and downstream of it. So its
output impact needs only that part of the graph, fed the float values that cross into it
(kept once from one float pass over the impact samples)::

    float model --extra outputs--> values on the edges into the cut (a, skip)
    cut:  a(placeholder) -> conv(q) -> relu -> add -> out      skip(placeholder) -> add

A quantizer near the output (a detection head's concatenation) then costs a few layers,
not the whole network. Where a cut cannot be fed (an edge from a non-tensor value, or from
a second output of a layer) there is no cut, and the variant runs whole.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from model_compression_toolkit.core.graph import Graph, Node, OpKind

CUT_SUFFIX = "__cut"


@dataclass
class Cut:
    """The part of a graph from one node on.

    Attributes:
        keep: what the cut computes: the node, every node its output reaches, and the
            values from shapes and the model inputs those read.
        edges: (source node, placeholder name) of each float value that crosses into it.
        outputs: for each of the cut's outputs, the index of the model output it is.
        inputs: the model inputs (their index) the cut reads directly.
    """

    keep: frozenset[str]
    edges: list[tuple[str, str]]
    outputs: list[int]
    inputs: list[int]

    @property
    def sources(self) -> list[str]:
        """The float-model nodes whose outputs feed the cut."""
        return [src for src, _ in self.edges]

    def graph(self, variant: Graph) -> Graph:
        """The cut of ``variant`` (the graph this cut was made from, with other quantizers
        switched on or off) as a graph of its own: placeholders first, then the model
        inputs it reads, as inputs."""
        out = Graph(f"{variant.name}{CUT_SUFFIX}", variant.framework)
        for src, name in self.edges:
            out.add_node(_placeholder(name, variant.node(src)))
            out.inputs.append(name)
        for index in self.inputs:
            out.inputs.append(variant.inputs[index])  # added below, in topological order
        placeholder = dict(self.edges)
        for name in variant.topological_order():
            if name in self.keep:
                out.add_node(dataclasses.replace(variant.node(name)))
        for name in variant.topological_order():
            if name not in self.keep:
                continue
            for e in variant.in_edges(name):
                found = e.src if e.src in self.keep else placeholder.get(e.src)
                src = e.src if found is None else found  # none: a constant, copied as it is
                if found is None:
                    if src not in out:
                        out.add_node(dataclasses.replace(variant.node(src)))
                out.add_edge(src, name, e.src_index if e.src in self.keep or src == e.src else 0, e.dst_index)
        out.outputs = [variant.outputs[i] for i in self.outputs]
        out.validate()
        return out


def cut_after(graph: Graph, name: str) -> Cut | None:
    """The cut of ``graph`` from node ``name`` on; None where it cannot be fed from float
    values (see the module doc) or would be the whole graph anyway.

    A value computed from shapes alone (a SHAPE node: ``x.size(0)``, a converted model's
    Shape -> Gather -> Concat chain) is computed again inside the cut from the tensors it
    reads, which cross in as float values like any other; a model input read inside the
    cut is read from the data."""
    keep = {name} | graph.descendants(name)
    compute, edges, stack = set(keep), {}, list(keep)
    while stack:
        member = stack.pop()
        for e in graph.in_edges(member):
            if e.src in compute or e.src in edges:
                continue
            src = graph.node(e.src)
            if src.kind == OpKind.CONSTANT:
                continue
            if src.kind in (OpKind.SHAPE, OpKind.INPUT):  # computed again / read from the data
                compute.add(e.src)
                stack.append(e.src)
                continue
            if e.src_index != 0 or not src.output_shapes or len(src.output_shapes) != 1:
                return None
            edges[e.src] = f"{e.src}{CUT_SUFFIX}"
    inputs = [i for i, n in enumerate(graph.inputs) if n in compute]
    if len(inputs) == len(graph.inputs) and not edges:
        return None
    outputs = [i for i, (n, _) in enumerate(graph.outputs) if n in keep]
    order = {n: i for i, n in enumerate(graph.topological_order())}
    ordered = sorted(edges.items(), key=lambda item: order[item[0]])
    return Cut(frozenset(compute), ordered, outputs, inputs)


def _placeholder(name: str, src: Node) -> Node:
    return Node(
        name=name,
        kind=OpKind.INPUT,
        layer_type="Input",
        output_shapes=[src.output_shapes[0]],
        channel_axis=src.channel_axis,
        attrs={"dtype": src.attrs.get("dtype", "float32")},
    )
