"""Memory a node needs: its weights plus its output activation for one sample.

Before quantization everything counts as float32; once quantized, each quantized weight
tensor and activation counts at its chosen bit-width (biases and float layers stay 32-bit).

A layer called twice (a PyTorch module reused, a Keras layer called on two inputs) is two
nodes holding the same weight arrays (the readers give both calls the same array
objects): a model holds that tensor once, so `graph_memory` counts it at its first call.
A transform that changes one call's weights (batch-norm folding) gives it new arrays,
which then count as its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from model_compression_toolkit.core.graph import VALUE_PRESERVING, Graph, Node, OpKind

FLOAT_BITS = 32


@dataclass
class NodeMemory:
    """Bytes a node needs at a stage: its weights and its output activation (one sample)."""

    weights_bytes: float
    activation_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.activation_bytes


def node_memory(
    node: Node, activation_bits: int = FLOAT_BITS, quantized: bool = False, counted: set[int] | None = None
) -> NodeMemory:
    """``counted``: ids of weight arrays already counted at another node (a shared layer's
    earlier call), left out here; the arrays counted here are added to it."""
    weights_bits = 0.0
    for wname, w in node.weights.items():
        if counted is not None:
            if id(w) in counted:
                continue
            counted.add(id(w))
        cfg = node.quant.weights.get(wname) if quantized else None
        weights_bits += w.size * (cfg.n_bits if cfg is not None else FLOAT_BITS)
    elements = 0 if node.kind == OpKind.SHAPE else node.output_size()
    return NodeMemory(weights_bytes=weights_bits / 8, activation_bytes=elements * activation_bits / 8)


def activation_bits(graph: Graph) -> dict[str, int]:
    """Bits each node's output is stored with once quantized.

    A layer fused with the activation after it (``conv -> relu``) and an op that only
    moves its input's values (``flatten``) hold their output at the bits of the
    quantizer that carries it; anything else without a quantizer stays float32.
    """
    bits: dict[str, int] = {}
    for node in graph.nodes():
        act = node.quant.activation
        if act is not None:
            bits[node.name] = act.n_bits
        elif node.kind in VALUE_PRESERVING and graph.in_edges(node.name):
            bits[node.name] = bits.get(graph.in_edges(node.name)[0].src, FLOAT_BITS)
        else:
            bits[node.name] = FLOAT_BITS
    for node in reversed(graph.nodes()):  # fused producers take their activation's bits
        if node.quant.fused_into in bits:
            bits[node.name] = bits[node.quant.fused_into]
    return bits


def graph_memory(graph: Graph, quantized: bool) -> dict[str, NodeMemory]:
    """Bytes per node, at the quantized bit-widths when ``quantized``, else float32."""
    bits = activation_bits(graph) if quantized else {}
    counted: set[int] = set()  # a shared layer's weights count at its first call only
    return {
        node.name: node_memory(node, bits.get(node.name, FLOAT_BITS), quantized, counted)
        for node in graph.nodes()
    }


def shared_weights(graph: Graph) -> dict[str, str]:
    """Node -> the earlier node whose weight arrays it holds (a shared layer's later calls)."""
    holder: dict[int, str] = {}
    shared: dict[str, str] = {}
    for node in graph.nodes():
        for w in node.weights.values():
            first = holder.setdefault(id(w), node.name)
            if first != node.name:
                shared.setdefault(node.name, first)
    return shared


def total(memory: dict[str, NodeMemory]) -> NodeMemory:
    """The sum over nodes: a model's weights and activation (one sample) memory."""
    return NodeMemory(
        weights_bytes=sum(m.weights_bytes for m in memory.values()),
        activation_bytes=sum(m.activation_bytes for m in memory.values()),
    )
