"""Resource utilization of a graph, as MCT's ``ResourceUtilization`` counts it, and the
weights budget a `ResourceUtilization` target leaves.

- weights memory: weights of quantized layers at their bit-width, others at 32 bits;
- activation memory: the peak, over the graph's topological order, of the bytes of the
  tensors alive at once for one sample (a tensor lives from the node that produces it to
  its last user; graph outputs to the end), each at the bits it is stored with;
- total memory: the two added;
- bops: per conv or dense layer, its multiply-accumulates for one sample x its weight
  bits x its input's bits (32 for float).

::

    target(weights, activation, total) --activation bits are fixed--> weights budget
        = min(weights_memory, total_memory - activation memory); activation_memory checked
"""

from __future__ import annotations

import math

import numpy as np

from model_compression_toolkit.core.config import ResourceUtilization
from model_compression_toolkit.core.graph import VALUE_PRESERVING, WEIGHTED, Graph, Node, OpKind
from model_compression_toolkit.core.memory import FLOAT_BITS, graph_memory, total
from model_compression_toolkit.errors import ResourceBudgetError


def activation_peak_bytes(graph: Graph, quantized: bool) -> float:
    """The most bytes of activations alive at once (one sample) in topological order."""
    order = graph.topological_order()
    position = {name: i for i, name in enumerate(order)}
    memory = graph_memory(graph, quantized)
    end = len(order)
    last_use = {}
    for name in order:
        users = [position[e.dst] for e in graph.out_edges(name)]
        last_use[name] = end if graph.is_output(name) else max(users, default=position[name])
    freed: dict[int, list[str]] = {}
    for name in order:
        freed.setdefault(last_use[name], []).append(name)
    alive = peak = 0.0
    for i, name in enumerate(order):  # a node's output joins the tensors alive, then the last-used leave
        alive += memory[name].activation_bytes
        peak = max(peak, alive)
        alive -= sum(memory[n].activation_bytes for n in freed.get(i, ()))
    return peak


def _macs(node: Node) -> int:
    kernel = node.weights.get("kernel")
    if kernel is None or not node.output_shapes or not node.kernel_axes.get("kernel"):
        return 0
    out_channels = int(np.prod([kernel.shape[a] for a in node.kernel_axes["kernel"]]))
    if node.kind == OpKind.CONV_TRANSPOSE and node.input_shapes and node.channel_axis is not None:
        shape = node.input_shapes[0]
        channels = shape[node.channel_axis] if shape and None not in shape[1:] else None
        if channels:
            return int(np.prod(shape[1:])) * kernel.size // int(channels)
    return node.output_size() * kernel.size // max(out_channels, 1)


def _input_bits(graph: Graph, node: Node, quantized: bool) -> int:
    edges = [e for e in graph.in_edges(node.name) if e.dst_index == 0]
    while quantized and edges:
        src = graph.node(edges[0].src)
        if src.quant.activation is not None:
            return src.quant.activation.n_bits
        if src.kind not in VALUE_PRESERVING:
            break
        edges = [e for e in graph.in_edges(src.name) if e.dst_index == 0]
    return FLOAT_BITS


def bops(graph: Graph, quantized: bool) -> float:
    """Bit operations of the conv and dense layers for one sample."""
    out = 0.0
    for node in graph.nodes():
        if node.kind not in WEIGHTED:
            continue
        cfg = node.quant.weights.get("kernel") if quantized else None
        w_bits = cfg.n_bits if cfg is not None else FLOAT_BITS
        out += float(_macs(node)) * w_bits * _input_bits(graph, node, quantized)
    return out


def resource_utilization(graph: Graph, quantized: bool = True) -> ResourceUtilization:
    """The graph's `ResourceUtilization` at its bit-widths (``quantized``) or all float."""
    weights = total(graph_memory(graph, quantized)).weights_bytes
    activation = activation_peak_bytes(graph, quantized)
    return ResourceUtilization(weights, activation, weights + activation, bops(graph, quantized))


def weights_target(graph: Graph, target: ResourceUtilization) -> ResourceUtilization:
    """The weights budget ``target`` leaves on ``graph`` (its activation bit-widths set).

    Raises:
        ResourceBudgetError: the activations alone do not fit ``activation_memory`` or
            ``total_memory``.
    """
    activation = activation_peak_bytes(graph, quantized=True)
    budget = target.weights_memory
    if math.isfinite(target.activation_memory) and activation > target.activation_memory:
        raise ResourceBudgetError(
            f"activation_memory={target.activation_memory:.0f} bytes cannot be met: with the configured activation "
            f"bit-widths the activations alive at once take {math.ceil(activation)} bytes, and activation bit-widths "
            "are not searched here. Lower the bits of the largest activations with "
            "mct.core.BitWidthConfig.set_manual_activation_bit_width, or give a larger activation_memory"
        )
    if math.isfinite(target.total_memory):
        left = target.total_memory - activation
        if left <= 0:
            raise ResourceBudgetError(
                f"total_memory={target.total_memory:.0f} bytes cannot be met: the activations alone take "
                f"{math.ceil(activation)} bytes (activation bit-widths are not searched here). Give a larger "
                "total_memory, or lower activation bits with mct.core.BitWidthConfig"
            )
        budget = min(budget, left)
    return ResourceUtilization(weights_memory=budget)
