"""The export run: what ships, next to what was debugged.

Written into the export's own call folder, beside the PTQ calls' (`observers.call.observe_call`)::

    <log folder>/<Model>_export_<YYYYmmdd-HHMMSS>/
        <format>/             the exported graph as the runtime reads the file, nodes coloured
                              by the type of the tensor they write ("Color by device": int8,
                              uint8, float32); text "parity" (one row per output, quantized
                              model vs runtime), "parity_layers" (one row per quantized
                              layer: float -> quantized -> runtime, the first departing
                              layer named) and "summary"; scalars parity/<output>/*
        <format>/runtime/     the graph the runtime runs after its own optimizations
                              (onnxruntime: QLinearConv, QLinearAdd ...), when it tells
        export_report.json    the same as JSON
        mct.log

Pure builders (`exported_graph_def`, `parity_markdown`, `layers_markdown`, `summary_markdown`), then
`write_export` and `write_export_report`, which the TensorBoard observer calls when the
export step reports ``export_finished`` (`observers.tensorboard`); with no log folder there
is no such observer and nothing is written.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from tensorboard.compat.proto import graph_pb2, node_def_pb2, tensor_shape_pb2

from model_compression_toolkit.core.export.report import (
    FLOOR_REACH,
    PARITY_MIN_COSINE,
    ExportedGraph,
    ExportedTensor,
    ExportReport,
)
from model_compression_toolkit.observers.protos import attr_value, device_name
from model_compression_toolkit.observers.tables import code, markdown_table, plain

REPORT_FILE = "export_report.json"
PARITY_TAG, LAYERS_TAG, SUMMARY_TAG = "parity", "parity_layers", "summary"


def run_name(report: ExportReport) -> str:
    return f"{report.serialization_format}_{report.quantization_format}".lower()


# ------------------------------------------------------------------ graph
def _shape_proto(shape: tuple) -> tensor_shape_pb2.TensorShapeProto:
    dims = [
        tensor_shape_pb2.TensorShapeProto.Dim(size=int(d) if d is not None and d >= 0 else -1) for d in shape
    ]
    return tensor_shape_pb2.TensorShapeProto(dim=dims)


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


def _clean(name: str) -> str:
    """A node name TensorBoard parses back unchanged (no ``:``, ``^``, ``;`` or empty ``/`` parts)."""
    text = name.replace(":", "_").replace(";", "_").lstrip("^")
    return "/".join(p for p in text.split("/") if p) or "_"


def _tensor_text(t: ExportedTensor | None, name: str) -> str:
    if t is None:
        return name
    text = f"{t.dtype or '?'} {list(t.shape)}"
    if t.scale:
        text += f", scale {_values(t.scale)}"
    if t.zero_point:
        text += f", zero point {_values(t.zero_point)}"
    return text


def _values(values: list) -> str:
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 1:
        return f"{arr[0]:.6g}"
    return f"{arr.min():.6g}..{arr.max():.6g} ({arr.size} channels)"


def exported_graph_def(graph: ExportedGraph) -> graph_pb2.GraphDef:
    """One NodeDef per op (and per graph input), edges from the op writing each input tensor.

    Constant inputs (weights, scales) are not nodes: each is an attribute ``in<k>`` of the
    op reading it (type, shape, scale). The device is the type of the op's first output, so
    "Color by device" shows which ops run on integers.
    """
    used: set[str] = set()

    def unique(name: str) -> str:
        base = _clean(name)
        for k in itertools.count():
            candidate = base if k == 0 else f"{base}_{k}"
            if candidate not in used:
                used.add(candidate)
                return candidate
        raise AssertionError  # pragma: no cover

    producer: dict[str, str] = {}
    nodes = []
    for name in graph.inputs:
        node_name = unique(f"input/{name}")
        producer[name] = node_name
        t = graph.tensors.get(name)
        nd = node_def_pb2.NodeDef(name=node_name, op="Input", device=device_name(t.dtype if t else "input"))
        nd.attr["tensor"].CopyFrom(attr_value(_tensor_text(t, name)))
        if t is not None:
            nd.attr["_output_shapes"].list.shape.extend([_shape_proto(t.shape)])
        nodes.append(nd)
    for op in graph.ops:
        node_name = unique(op.name or op.op_type)
        outputs = [graph.tensors.get(o) for o in op.outputs]
        dtype = next((t.dtype for t in outputs if t is not None and t.dtype), "unknown")
        nd = node_def_pb2.NodeDef(name=node_name, op=op.op_type, device=device_name(dtype))
        for k, name in enumerate(op.inputs):
            if not name:
                continue
            if name in producer:
                nd.input.append(producer[name])
            else:
                nd.attr[f"in{k}"].CopyFrom(attr_value(_tensor_text(graph.tensors.get(name), name)))
        for k, name in enumerate(op.outputs):
            nd.attr[f"out{k}"].CopyFrom(attr_value(_tensor_text(graph.tensors.get(name), name)))
            producer.setdefault(name, node_name)
        for key, value in op.attrs.items():
            nd.attr[f"attr.{key}"].CopyFrom(attr_value(value))
        shapes = [_shape_proto(t.shape) for t in outputs if t is not None]
        if shapes:
            nd.attr["_output_shapes"].list.shape.extend(shapes)
        nodes.append(nd)
    return graph_pb2.GraphDef(node=nodes)


# ------------------------------------------------------------------ text
def _num(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{digits}g}"


def parity_markdown(report: ExportReport) -> str:
    """One row per output: the quantized model (simulation) against the runtime."""
    head = (
        f"### Parity: the quantized model against {report.runtime} running {code(report.path)}\n\n"
        f"Inputs: {report.data}. An output matches when it is within one quantization step everywhere, "
        f"or at a cosine of at least {PARITY_MIN_COSINE} where the runtime rounds in another order; on a network "
        f"whose own float32 rounding already moves it further (its floor under {PARITY_MIN_COSINE}), when no layer "
        f"departs on its own and the output is within {FLOOR_REACH:g}x the floor's distance (*within its floor*).\n\n"
    )
    if not report.parity:
        return head + "Not compared: no inputs.\n"
    rows = [
        [
            code(p.name),
            p.samples,
            _num(p.step),
            _num(p.max_abs),
            _num(p.max_steps, 3),
            f"{100 * p.equal_fraction:.2f} %",
            f"{p.cosine:.6f}",
            _num(p.sqnr_db, 4),
            "-" if p.top1_agreement is None else f"{100 * p.top1_agreement:.2f} %",
            "yes" if p.ok else ("within its floor" if report.parity_ok and p.within_floor else "**NO**"),
            "-" if p.bias_cosine is None else f"{p.bias_cosine:.6f}",
            "-" if p.floor_cosine is None else f"{p.floor_cosine:.6f}",
        ]  # fmt: skip
        for p in report.parity
    ]
    table = markdown_table(
        ["output", "samples", "step", "max abs diff", "max diff (steps)", "equal values", "cosine", "SQNR (dB)",
         "same top-1", "matches", "int32 bias alone: cosine", "floor: cosine"], rows,
    )  # fmt: skip
    floor = (
        "\n*int32 bias alone*: the quantized model with each bias rounded as the runtime adds it (int32 on the "
        "scale input x weight) against the quantized model: what that documented difference does by itself. "
        "*Floor*: the quantized model against itself, its inputs multiplied by 1 + 1e-6 u (u uniform in [-1, 1]), "
        "about the float32 rounding by which a runtime's arithmetic differs. A runtime landing near these "
        "differs by them, amplified by the network, not by what it computes.\n"
    )
    return head + table + "\n" + floor


def layers_markdown(report: ExportReport) -> str:
    """One row per quantized layer, in topological order: what quantization costs it (float ->
    quantized) and how far the runtime's tensor is from the quantized model's (quantized ->
    runtime, in steps of the layer's grid); the first departing layer named above the table."""
    table = report.layers
    if table is None:
        return "### Per-layer parity\n\nNot measured: this format's runtime exposes no quantized tensor.\n"
    if not table.rows:
        return "### Per-layer parity\n\n" + "".join(
            f"- {plain(note)}\n" for note in table.notes or ["Not measured."]
        )
    first, beyond = table.first_departure, table.first_beyond_one_step
    head = f"### Per-layer parity: float -> quantized -> {table.runtime}\n\n"
    if first is not None:
        head += (
            f"**First departing layer: {code(first.layer)}** ({first.layer_type}, computed by "
            f"{' -> '.join(code(n) for n in first.computed_by)}): {first.max_steps:.2f} steps; {plain(first.why)}.\n\n"
        )
    elif beyond is not None:
        head += (
            f"No layer departs on its own. The first more than one step off is {code(beyond.layer)} "
            f"({beyond.max_steps:.2f} steps): {plain(beyond.why)}.\n\n"
        )
    else:
        head += "Every layer within one step of the quantized model.\n\n"
    rows = [
        [
            code(r.layer) + (" **departs**" if r.departs else ""),
            " -> ".join(code(n) for n in r.computed_by),
            _num(r.step),
            _num(r.float_sqnr_db, 4),
            _num(r.max_steps, 3),
            "-" if r.tensor is None else f"{100 * r.over_one_step:.3g} %",
            _num(r.sqnr_db, 4),
            plain(r.why or ""),
        ]
        for r in table.rows
    ]
    body = markdown_table(
        ["layer", "computed by", "step", "float -> quantized: SQNR (dB)", "runtime: max diff (steps)",
         "runtime: > 1 step", "runtime: SQNR (dB)", "why"], rows,
    )  # fmt: skip
    notes = "".join(f"\n- {plain(note)}" for note in table.notes)
    return head + body + ("\n" + notes + "\n" if notes else "")


def summary_markdown(report: ExportReport) -> str:
    rows = [
        ["file", code(report.path)],
        ["format", f"{report.serialization_format} / {report.quantization_format}"],
        ["size", f"{_size(report.file_bytes)} ({report.file_bytes} bytes)"],
        ["runtime", report.runtime],
        ["parity", "ok" if report.parity_ok else "**FAILED**"],
    ]
    if report.layers is not None:
        first = report.first_departure
        text = "none" if first is None else code(first.layer)
        rows.append(["first departing layer", text if report.layers.rows else "not measured"])
    for key, value in report.figures.items():
        rows.append([key.replace("_", " "), _num(value)])
    for label, graph in (("ops in the file", report.graph), ("ops the runtime runs", report.runtime_graph)):
        if graph is not None:
            rows.append([label, ", ".join(f"{op} {n}" for op, n in graph.op_counts().items())])
    text = (
        f"### Export of {code(report.model_name)} ({report.framework})\n\n"
        + markdown_table(["", ""], rows)
        + "\n"
    )
    if report.notes:
        text += "\n" + "\n".join(f"- {plain(note)}" for note in report.notes) + "\n"
    return text


def scalars(report: ExportReport) -> Mapping[str, float]:
    out: dict[str, float] = {"export/file_bytes": float(report.file_bytes)}
    for p in report.parity:
        out[f"parity/{p.name}/cosine"] = p.cosine
        out[f"parity/{p.name}/equal_fraction"] = p.equal_fraction
        if p.max_steps is not None:
            out[f"parity/{p.name}/max_steps"] = p.max_steps
    return out


# ------------------------------------------------------------------ writing
def write_export(open_writer: Callable[[str], Any], report: ExportReport) -> None:
    """Write the export's runs, each opened by ``open_writer(run_name)`` (module docstring)."""
    name = run_name(report)
    main = open_writer(name)
    if report.graph is not None:
        main.add_graph(exported_graph_def(report.graph))
    main.add_text(PARITY_TAG, parity_markdown(report))
    main.add_text(LAYERS_TAG, layers_markdown(report))
    main.add_text(SUMMARY_TAG, summary_markdown(report))
    for tag, value in scalars(report).items():
        if math.isfinite(value):
            main.add_scalar(tag, value)
    main.flush()
    if report.runtime_graph is not None:
        runtime = open_writer(f"{name}/runtime")
        runtime.add_graph(exported_graph_def(report.runtime_graph))
        runtime.add_text(SUMMARY_TAG, summary_markdown(report))
        runtime.flush()


def write_export_report(folder: Path, report: ExportReport) -> Path:
    """``export_report.json`` in ``folder`` (the export's call folder): the report as JSON."""
    path = folder / REPORT_FILE
    path.write_text(json.dumps(report.to_dict(), indent=2, default=str), encoding="utf-8")
    return path
