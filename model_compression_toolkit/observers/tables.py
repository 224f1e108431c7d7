"""Markdown tables for TensorBoard's Text dashboard: the stage summary, shared helpers."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.info import LayerCounts, float_layers
from model_compression_toolkit.core.memory import NodeMemory, total
from model_compression_toolkit.core.numbers import format_bytes

_BACKTICKS = re.compile("`+")


def code(text: Any) -> str:
    """``text`` as a Markdown code span: shown verbatim, never read as HTML or Markdown (a
    layer named ``<img src=x>`` or ``**x**`` shows as written). The fence is one backtick
    longer than the longest run of backticks in ``text``."""
    text = str(text).replace("\n", " ")
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


_MARKDOWN = re.compile(r"([\\`*_\[\]{}()#+!|~])")


def plain(text: Any) -> str:
    """Prose that may hold a user's names (a note, a reason) as Markdown that shows it as
    written: HTML characters as entities, Markdown's punctuation escaped."""
    escaped = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN.sub(r"\\\1", escaped).replace("\n", " ")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table; ``|`` in cells is escaped."""

    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def stage_markdown(
    run: str, graph: Graph, memory: Mapping[str, NodeMemory], kept: Mapping[str, str] | None = None
) -> str:
    """The stage summary: layer counts and memory totals (`core.info`'s definitions, the
    same numbers as ``mct.log`` and ``info``), then one row per layer. ``kept``:
    ``float_layers(graph)`` when the caller has it."""
    nodes = graph.nodes()
    kept = float_layers(graph) if kept is None else kept
    counts = LayerCounts.of(graph, kept)
    totals = total(dict(memory))
    totals_table = markdown_table(
        ["total", "value"],
        [
            ["layers", counts.layers],
            ["quantized layers (a quantizer of their own)", counts.quantized],
            ["layers kept in float", counts.kept_float],
            ["other layers (fused, moving values, no tensor)", counts.other],
            ["weights memory", format_bytes(totals.weights_bytes)],
            ["activation memory (one sample)", format_bytes(totals.activation_bytes)],
            ["total memory", format_bytes(totals.total_bytes)],
        ],
    )
    rows = []
    for n in nodes:
        q, mem = n.quant, memory.get(n.name, NodeMemory(0.0, 0.0))
        w_bits = ", ".join(f"{w}: {c.n_bits}" for w, c in q.weights.items()) or plain(q.weights_float_reason or "-")
        if q.activation:
            a_bits = str(q.activation.n_bits)
        elif q.fused_into:
            a_bits = f"after {code(q.fused_into)}"
        else:
            a_bits = "float" if n.name in kept else "-"
        rows.append([code(n.name), n.layer_type, w_bits, a_bits, format_bytes(mem.weights_bytes),
                     format_bytes(mem.activation_bytes)])  # fmt: skip
    layers = markdown_table(["layer", "type", "weight bits", "activation bits", "weights", "activation"], rows)
    reasons = "\n".join(f"- {code(name)}: {plain(reason)}" for name, reason in kept.items())  # reasons name layers
    kept_text = f"\n\nKept in float:\n\n{reasons}" if kept else ""
    return f"### {run}: {code(graph.name)} ({graph.framework})\n\n{totals_table}{kept_text}\n\n{layers}\n"
