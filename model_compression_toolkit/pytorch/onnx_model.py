"""The exported ONNX file: its last pass, onnxruntime, and the graph as a runtime reads it.

The bias pass turns each float bias of a quantized layer into the int32 tensor a QDQ
runtime expects, on the grid of the layer's accumulator::

    DequantizeLinear(x) --\\
    DequantizeLinear(W) ---> Conv  ->  ... bias b (float)
                        becomes
    DequantizeLinear(x) --\\
    DequantizeLinear(W) ---> Conv <- DequantizeLinear(round(b / (s_x * s_w)) int32, s_x * s_w)

The quantized model adds the float bias; the integer kernel adds it rounded to that grid.
The difference (at most half of ``s_x * s_w`` per channel) is measured and reported.

Only a layer whose output is quantized (``Conv -> QuantizeLinear``, through a ``Relu`` or
``Clip``) becomes an integer kernel; one whose output stays float (a conv fused with the
scale, shift or hard-swish after it) runs in float in any runtime, so it keeps its float
bias: rounded, it would only move the layer's sums off the quantized model's (by up to
0.1 step per channel on PP-OCRv4, which its next quantizers then round the other way).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from model_compression_toolkit.core.export.grids import output_names
from model_compression_toolkit.core.export.report import ExportedGraph, ExportedOp, ExportedTensor
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.errors import ExportError

BIAS_OPS = {"Conv": 0, "ConvTranspose": 1, "Gemm": None}  # op -> output-channel axis of its weight
TWO_GIB = 2**31 - 1


def finish(model: Any, path: Path, graph: Graph) -> dict[str, float]:
    """Quantize the biases, label the model, check it and save it at ``path``.

    Returns:
        Figures about the pass (``bias_rounding_steps``: the largest bias rounding, in
        steps of the layer's output grid).
    """
    import onnx

    name_outputs(model, output_names(graph))
    figures = quantize_biases(model)
    model.producer_name = "model_compression_toolkit"
    model.producer_version = _version()
    del model.metadata_props[:]
    for key, value in (
        ("model_compression_toolkit.model", graph.name),
        ("model_compression_toolkit.framework", graph.framework),
    ):
        model.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(model, full_check=False)
    if model.ByteSize() > TWO_GIB:
        onnx.save_model(model, str(path), save_as_external_data=True, location=f"{path.name}.data")
    else:
        onnx.save_model(model, str(path))
    return figures


def name_outputs(model: Any, names: list[str]) -> None:
    """Give the graph's outputs ``names``, in place, each tensor still named once (SSA).

    ``torch.onnx.export`` names each tensor after the op that made it (``cat``, ``cat_18``)
    and, given ``output_names``, renames the outputs without looking at the other names, so
    a model whose output is called ``cat`` while an inner concat is ``cat`` too is
    invalid. Here the names are given afterwards:

        1. any tensor already holding one of ``names`` is moved aside (``cat__1``);
        2. each output takes its name; an output that is a graph input, or one listed a
           second time, gets it through an ``Identity``::

               x -> ... -> output "x_1"        becomes   x -> Identity -> "x_1"
    """
    graph = model.graph
    if len(graph.output) != len(names):
        raise ExportError(
            f"the exported ONNX graph has {len(graph.output)} outputs, the quantized model {len(names)}; "
            "this is a bug in the library: please report it."
        )
    inputs = {i.name for i in graph.input}
    used = inputs | {i.name for i in graph.initializer} | {o for n in graph.node for o in n.output}
    used |= {o.name for o in graph.output}
    for want in dict.fromkeys(names):
        if want in used and want not in inputs:
            fresh, k = f"{want}__1", 1
            while fresh in used or fresh in names:
                k += 1
                fresh = f"{want}__{k}"
            _rename(graph, want, fresh)
            used.add(fresh)
    named: set[str] = set()
    for out, want in zip(graph.output, names):
        current = out.name
        if current == want:
            named.add(want)
            continue
        if current in inputs or current in named:
            graph.node.append(_identity(current, want))
            out.name = want
        else:
            _rename(graph, current, want)
        named.add(want)


def _rename(graph: Any, old: str, new: str) -> None:
    """Tensor ``old`` called ``new`` wherever the graph names it (no subgraphs: the exporter writes none)."""
    for node in graph.node:
        for names in (node.input, node.output):
            for i, name in enumerate(names):
                if name == old:
                    names[i] = new
    for info in [*graph.output, *graph.value_info, *graph.initializer]:
        if info.name == old:
            info.name = new


def _identity(src: str, dst: str) -> Any:
    from onnx import helper

    return helper.make_node("Identity", [src], [dst], name=f"{dst}_identity")


def _constants(model: Any) -> dict[str, np.ndarray]:
    """Initializers and Constant outputs, by name."""
    from onnx import numpy_helper

    values = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def quantize_biases(model: Any) -> dict[str, float]:
    """The bias pass (module docstring), in place. Layers whose input or weight does not come
    from a DequantizeLinear, or whose output reaches no QuantizeLinear, keep their float bias."""
    from onnx import helper, numpy_helper

    consts = _constants(model)
    producers = {out: node for node in model.graph.node for out in node.output}
    consumers: dict[str, list[Any]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    worst = 0.0
    added_nodes, added_inits = [], []
    for node in model.graph.node:
        if node.op_type not in BIAS_OPS or len(node.input) < 3 or node.input[2] not in consts:
            continue
        x_dq, w_dq = _source(producers, node.input[0]), producers.get(node.input[1])
        step = _output_step(node, consumers, consts)
        if step is None:  # no integer kernel: its output is not quantized (module docstring)
            continue
        if (
            not (_is_dq(x_dq) and _is_dq(w_dq))
            or node.input[2] in producers
            and not _is_initializer(model, node.input[2])
        ):
            continue
        s_x = consts.get(x_dq.input[1])
        s_w = consts.get(w_dq.input[1])
        bias = consts[node.input[2]].astype(np.float64)
        if s_x is None or s_w is None or np.size(s_x) != 1 or bias.ndim != 1:
            continue
        if np.size(s_w) > 1 and _dq_axis(w_dq) != _output_axis(node):
            continue
        scale = (float(s_x) * np.asarray(s_w, dtype=np.float64)).astype(np.float32)
        scale = np.broadcast_to(scale, bias.shape).astype(np.float32)
        q = np.round(bias / scale.astype(np.float64))
        if np.any(np.abs(q) >= 2**31 - 1) or np.any(scale <= 0):
            continue
        base = node.input[2]
        names = [f"{base}_quantized", f"{base}_scale", f"{base}_zero_point", f"{base}_dequantized"]
        added_inits += [
            numpy_helper.from_array(q.astype(np.int32), names[0]),
            numpy_helper.from_array(scale, names[1]),
            numpy_helper.from_array(np.zeros(bias.shape, np.int32), names[2]),
        ]
        added_nodes.append(
            (node, helper.make_node("DequantizeLinear", names[:3], [names[3]], name=f"{base}_dq", axis=0))
        )
        node.input[2] = names[3]
        error = np.abs(q * scale.astype(np.float64) - bias)
        if step:
            worst = max(worst, float(error.max()) / step)
    model.graph.initializer.extend(added_inits)
    for consumer, dq in added_nodes:  # each DequantizeLinear goes right before its layer (topological order)
        index = list(model.graph.node).index(consumer)
        model.graph.node.insert(index, dq)
    _drop_unused_initializers(model)
    return {"bias_rounding_steps": worst, "quantized_biases": float(len(added_nodes))}


_SAME_VALUES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity"})


def _source(producers: dict[str, Any], name: str) -> Any:
    """The op that made tensor ``name``, looking through ops that only move its values."""
    node = producers.get(name)
    while node is not None and node.op_type in _SAME_VALUES:
        node = producers.get(node.input[0])
    return node


def _is_dq(node: Any) -> bool:
    return node is not None and node.op_type == "DequantizeLinear"


def _is_initializer(model: Any, name: str) -> bool:
    return any(init.name == name for init in model.graph.initializer)


def _dq_axis(node: Any) -> int:
    for attr in node.attribute:
        if attr.name == "axis":
            return int(attr.i)
    return 1


def _output_axis(node: Any) -> int:
    """The axis of the weight that runs along the layer's output channels."""
    if node.op_type == "Gemm":
        trans_b = next((int(a.i) for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1
    return BIAS_OPS[node.op_type]


def _output_step(node: Any, consumers: dict[str, list[Any]], consts: dict[str, np.ndarray]) -> float | None:
    """The scale of the QuantizeLinear the layer's output reaches (through Relu / Clip), if any."""
    name = node.output[0]
    for _ in range(3):
        users = consumers.get(name, [])
        if len(users) != 1:
            return None
        user = users[0]
        if user.op_type == "QuantizeLinear":
            scale = consts.get(user.input[1])
            return float(scale) if scale is not None and np.size(scale) == 1 else None
        if user.op_type not in ("Relu", "Clip"):
            return None
        name = user.output[0]
    return None


def _drop_unused_initializers(model: Any) -> None:
    used = {name for node in model.graph.node for name in node.input} | {o.name for o in model.graph.output}
    keep = [init for init in model.graph.initializer if init.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)


# ------------------------------------------------------------------ onnxruntime
def session(path: Path, optimized: Path | None = None, threads: int | None = None) -> Any:
    """An onnxruntime CPU session of the file; with ``optimized``, its optimized graph is
    written there (onnxruntime's "extended" level: the QDQ fusions, no layout changes)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    if optimized is not None:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(optimized)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run(sess: Any, batch: list[np.ndarray]) -> list[np.ndarray]:
    feeds = {}
    for spec, x in zip(sess.get_inputs(), batch, strict=True):
        array = np.asarray(x)
        feeds[spec.name] = array.astype(np.float32) if np.issubdtype(array.dtype, np.floating) else array
    return [np.asarray(o) for o in sess.run(None, feeds)]


def runtime_version() -> str:
    import onnxruntime as ort

    return f"onnxruntime {ort.__version__}"


def optimized_graph(path: Path, folder: Path) -> ExportedGraph:
    """The graph onnxruntime runs once its graph optimizations fused the QDQ pairs."""
    import onnx

    target = folder / "optimized.onnx"
    session(path, optimized=target)
    try:
        return describe(onnx.load(str(target), load_external_data=False), "onnxruntime")
    finally:
        for leftover in folder.glob("optimized.onnx*"):
            os.unlink(leftover)


# ------------------------------------------------------------------ the graph, neutral
_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool"}
_DTYPES.update({10: "float16", 11: "float64", 16: "bfloat16"})


def describe(model: Any, name: str | None = None) -> ExportedGraph:
    """The ops and tensors of an ONNX model, as `ExportedGraph`: quantized tensors carry
    the scale and zero point of the QuantizeLinear / DequantizeLinear that defines them."""
    from onnx import helper, numpy_helper

    tensors: dict[str, ExportedTensor] = {}
    for init in model.graph.initializer:
        tensors[init.name] = ExportedTensor(init.name, _DTYPES.get(init.data_type, str(init.data_type)),
                                            tuple(init.dims), constant=True)  # fmt: skip
    for info in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        t = info.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim)
        tensors.setdefault(
            info.name, ExportedTensor(info.name, _DTYPES.get(t.elem_type, str(t.elem_type)), shape)
        )
    consts = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    ops = []
    for i, node in enumerate(model.graph.node):
        attrs = {a.name: _plain(helper.get_attribute_value(a)) for a in node.attribute if a.name != "value"}
        ops.append(
            ExportedOp(
                node.name or f"{node.op_type}_{i}", node.op_type, list(node.input), list(node.output), attrs
            )
        )
        if node.op_type in ("QuantizeLinear", "DequantizeLinear", "QLinearConv") and len(node.input) >= 3:
            quantized = node.output[0] if node.op_type == "QuantizeLinear" else node.input[0]
            scale, zp = consts.get(node.input[1]), consts.get(node.input[2])
            tensor = tensors.setdefault(quantized, ExportedTensor(quantized, "", ()))
            if scale is not None:
                tensor.scale = np.asarray(scale, dtype=np.float64).ravel().tolist()
            if zp is not None:
                tensor.zero_point = np.asarray(zp).astype(np.int64).ravel().tolist()
                tensor.dtype = tensor.dtype or str(np.asarray(zp).dtype)
    return ExportedGraph(
        name=name or model.graph.name or "onnx",
        ops=ops,
        tensors=tensors,
        inputs=[i.name for i in model.graph.input if i.name not in consts],
        outputs=[o.name for o in model.graph.output],
    )


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (int, float, str, bool)):
        return value
    return str(type(value).__name__)


def file_bytes(path: Path) -> int:
    """The file's size with its external data, if it has any."""
    side = path.with_name(path.name + ".data")
    return path.stat().st_size + (side.stat().st_size if side.exists() else 0)


def _version() -> str:
    """This library's installed version (the backends do not import the package's root)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("model_compression_toolkit")
    except PackageNotFoundError:
        return "unknown"
