"""The mixed-precision choice in TensorBoard (written into the quantized_graph run).

    Images  Weights final bit-width config   bar chart: weight bits per layer (MCT's tag)
    Text    mixed_precision/report           budget, memory, and per layer: bits, size,
                                             sensitivity at every candidate bit-width

Only finite numbers are drawn or written (a missing one shows as "n/a"). The figure uses
matplotlib's object API (no pyplot, no global state).
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from model_compression_toolkit.core.mixed_precision.result import MixedPrecisionResult
from model_compression_toolkit.observers.event_file import RunWriter
from model_compression_toolkit.observers.protos import figure_to_png
from model_compression_toolkit.observers.tables import code

BITS_TAG = "Weights final bit-width config"
REPORT_TAG = "mixed_precision/report"
DPI = 90
MAX_LABEL_CHARS = 28


def write_bit_widths(writer: RunWriter, result: MixedPrecisionResult) -> None:
    """Add the bit-width bar chart and the report table to ``writer``'s run."""
    writer.add_image(BITS_TAG, bit_widths_png(result))
    writer.add_text(REPORT_TAG, report_markdown(result))


def _short(name: str) -> str:
    return name if len(name) <= MAX_LABEL_CHARS else "…" + name[-(MAX_LABEL_CHARS - 1) :]


def bit_widths_png(result: MixedPrecisionResult) -> bytes:
    """Bars of the chosen weight bits per layer (topological order), candidates as grid lines."""
    names = [layer.name for layer in result.layers]
    bits = np.array([layer.bits for layer in result.layers], dtype=float)
    n = max(len(names), 1)
    font = 8 if n <= 50 else 7 if n <= 90 else 6
    width = min(max(6.0, 1.6 + n * font * 1.4 / 72), 20.0)
    step = max(1, math.ceil(n * font * 1.4 / ((width - 1.6) * 72)))
    label_in = max((len(_short(s)) for s in names), default=1) * font * 0.62 / 72 + 0.35
    height = 3.2
    fig = Figure(figsize=(width, height + label_in), dpi=DPI)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=0.9 / width, right=1 - 0.4 / width, bottom=label_in / (height + label_in), top=0.86)
    ax = fig.add_subplot()
    x = np.arange(len(names))
    top = max(result.candidate_bits, default=8)
    colours = [("tab:blue" if b >= top else "tab:orange" if b > min(result.candidate_bits) else "tab:red") for b in bits]
    ax.bar(x, bits, color=colours, width=0.7)
    ticks = np.arange(0, len(names), step)
    ax.set_xticks(ticks, [_short(names[i]) for i in ticks], rotation=90, fontsize=font)
    ax.set_xlim(-0.5, max(len(names) - 0.5, 0.5))
    ax.set_yticks(sorted(set(result.candidate_bits)))
    ax.set_ylim(0, top * 1.1)
    ax.set_ylabel("weight bits")
    ax.grid(True, axis="y", alpha=0.3)
    memory = f"{result.weights_memory:.0f} B"
    budget = f" / budget {result.budget:.0f} B" if math.isfinite(result.budget) else ""
    ax.set_title(f"weights final bit-width config: {memory}{budget} (all 8-bit: {result.weights_memory_8bit:.0f} B)",
                 fontsize=10)  # fmt: skip
    return figure_to_png(fig, dpi=DPI)


def _num(value: float | None, spec: str) -> str:
    return format(value, spec) if value is not None and math.isfinite(value) else "n/a"


def report_markdown(result: MixedPrecisionResult) -> str:
    """The budget and memory totals, then one row per layer."""
    totals = [
        ("budget", _num(result.budget, ".0f") + " B"),
        ("weights memory", _num(result.weights_memory, ".0f") + " B"),
        ("all 8-bit", _num(result.weights_memory_8bit, ".0f") + " B"),
        ("smallest reachable", _num(result.weights_memory_min, ".0f") + " B"),
        ("weights kept at 32 bits", _num(result.fixed_memory, ".0f") + " B"),
        ("total sensitivity", _num(result.objective, ".4g")),
        ("solver", result.solver),
        ("samples", str(result.samples)),
    ]
    lines = ["| total | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in totals]
    head = ["layer", "bits", "weights", "bytes", "measured"] + [f"sensitivity @{b}" for b in result.candidate_bits]
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for layer in result.layers:
        cells = [code(layer.name).replace("|", "\\|"), str(layer.bits), str(layer.weights),
                 _num(layer.bytes, ".0f"), layer.measured]  # fmt: skip
        cells += [_num(layer.sensitivity.get(b), ".3g") for b in result.candidate_bits]
        lines.append("| " + " | ".join(cells) + " |")
    return "### mixed precision\n\n" + "\n".join(lines) + "\n"
