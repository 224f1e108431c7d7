"""Memory a node needs: its weights plus its output activation for one sample.

Before quantization everything counts as float32; once quantized, each quantized weight
tensor and activation counts at its chosen bit-width (biases and float layers stay 32-bit).
"""

from __future__ import annotations

from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.core.stage import NodeMemory

FLOAT_BITS = 32


def node_memory(node: Node, quantized: bool) -> NodeMemory:
    weights_bits = 0.0
    for wname, w in node.weights.items():
        cfg = node.quant.weights.get(wname) if quantized else None
        weights_bits += w.size * (cfg.n_bits if cfg is not None else FLOAT_BITS)
    act = node.quant.activation if quantized else None
    elements = 0 if node.kind == OpKind.SHAPE else node.output_size()
    act_bits = elements * (act.n_bits if act is not None else FLOAT_BITS)
    return NodeMemory(weights_bytes=weights_bits / 8, activation_bytes=act_bits / 8)


def graph_memory(graph: Graph, quantized: bool) -> dict[str, NodeMemory]:
    """Bytes per node, at the quantized bit-widths when ``quantized``, else float32."""
    return {node.name: node_memory(node, quantized) for node in graph.nodes()}


def total(memory: dict[str, NodeMemory]) -> NodeMemory:
    return NodeMemory(
        weights_bytes=sum(m.weights_bytes for m in memory.values()),
        activation_bytes=sum(m.activation_bytes for m in memory.values()),
    )
