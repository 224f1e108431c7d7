"""Markdown tables for TensorBoard's Text dashboard: the stage summary, shared helpers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.memory import NodeMemory


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table; ``|`` in cells is escaped."""

    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if abs(n) < 1024 or unit == "MiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def stage_markdown(name: str, graph: Graph, memory: Mapping[str, NodeMemory]) -> str:
    """The stage summary: layer counts, memory totals, then one row per layer."""
    nodes = graph.nodes()
    quantized = [n for n in nodes if n.quant.is_quantized]
    w_total = sum(m.weights_bytes for m in memory.values())
    a_total = sum(m.activation_bytes for m in memory.values())
    totals = markdown_table(
        ["total", "value"],
        [
            ["layers", len(nodes)],
            ["quantized layers", len(quantized)],
            ["float layers", len(nodes) - len(quantized)],
            ["weights memory", _bytes(w_total)],
            ["activation memory (one sample)", _bytes(a_total)],
            ["total memory", _bytes(w_total + a_total)],
        ],
    )
    rows = []
    for n in nodes:
        q, mem = n.quant, memory.get(n.name, NodeMemory(0.0, 0.0))
        w_bits = ", ".join(f"{w}: {c.n_bits}" for w, c in q.weights.items()) or (
            q.weights_float_reason or "-"
        )
        a_bits = str(q.activation.n_bits) if q.activation else (q.activation_float_reason or "float")
        rows.append(
            [
                f"`{n.name}`",
                n.layer_type,
                w_bits,
                a_bits,
                _bytes(mem.weights_bytes),
                _bytes(mem.activation_bytes),
            ]
        )
    layers = markdown_table(
        ["layer", "type", "weight bits", "activation bits", "weights", "activation"], rows
    )
    return f"### {name}: `{graph.name}` ({graph.framework})\n\n{totals}\n\n{layers}\n"
