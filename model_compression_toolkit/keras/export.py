"""The quantized graph written for a Keras runtime: TFLite (int8 or fake-quant) or ``.keras``.

For an int8 TFLite model the graph is built again so that TensorFlow's converter sees the
grids as its own quantization ops (``FakeQuantWithMinMax*``) and stores every tensor in
int8 on exactly those grids::

    prev -> FakeQuant(grid) -> conv(FakeQuantPerChannel(kernel)) + bias -> relu -> FakeQuant(grid) -> next
                 |                      |                                            |
            int8 tensor       int8 per-channel weights, int32 bias              int8 tensor

The converter writes the bias as int32 on the scale ``s_input * s_weight`` and fuses ReLU
and ReLU6 into the layer before them. Two layouts are changed so that TFLite's own
per-channel axis is the one quantized: a Dense layer runs as a 1x1 convolution, and a
depthwise kernel is quantized as ``(kh, kw, 1, in * multiplier)``. A ``Rescaling``, which
the converter writes as a float MUL and ADD, runs as an int8 1x1 depthwise convolution
(`Int8Rescaling`).

The `Exporter` and `Runtime` classes using these are in `keras.exporters` (they hand out
`keras.tflite_taps`, which reads this module's signature names).
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np

from model_compression_toolkit.core.calibration.quantizers import QuantizedWeights
from model_compression_toolkit.core.export.grids import StoredGrid, on_hard_sigmoid_grid, stored_grid
from model_compression_toolkit.core.export.report import ExportedGraph, ExportedOp, ExportedTensor
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.errors import ExportError
from model_compression_toolkit.keras import builder


def _tf() -> Any:
    import tensorflow as tf

    return tf


def int8_range(stored: StoredGrid) -> tuple[float, float]:
    """The ``[min, max]`` of TensorFlow's 8-bit FakeQuant that is exactly this int8 grid:
    scale ``(max - min) / 255`` and zero point ``-128 - min / scale``."""
    s = float(stored.scale)
    zp = int(stored.zero_point)
    return (-128 - zp) * s, (127 - zp) * s


class TFLiteFakeQuant(keras.layers.Layer):
    """``x -> FakeQuantWithMinMaxArgs(min, max, 8 bits)``: the converter stores the tensor in
    int8 on this grid. A grid of fewer than 8 bits is then clipped to its range, in int8
    (``-> clip -> FakeQuant`` again: MINIMUM/MAXIMUM on the same scale are exact)."""

    def __init__(
        self, low: float, high: float, clip: tuple[float, float] | None, node_name: str, **kwargs: Any
    ):
        super().__init__(**kwargs)
        self.low, self.high, self.clip, self.node_name = float(low), float(high), clip, node_name

    def call(self, x: Any) -> Any:
        tf = _tf()
        y = tf.quantization.fake_quant_with_min_max_args(x, min=self.low, max=self.high, num_bits=8)
        if self.clip is None:
            return y
        y = tf.clip_by_value(y, self.clip[0], self.clip[1])
        return tf.quantization.fake_quant_with_min_max_args(y, min=self.low, max=self.high, num_bits=8)

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        return input_shape


def fake_quant_layer(node: Node, name: str) -> TFLiteFakeQuant:
    grid = node.quant.activation.grid
    stored = stored_grid(grid, "int8")
    if stored is None:
        raise ExportError(
            f"{node.name!r}: a {grid.qmax - grid.qmin + 1}-level activation grid does not fit int8"
        )
    low, high = int8_range(stored)
    s, zp = float(stored.scale), int(stored.zero_point)
    clip = ((stored.lo - zp) * s, (stored.hi - zp) * s) if stored.narrow else None
    return TFLiteFakeQuant(low, high, clip, node.name, name=name)


class QuantizedKernel(keras.layers.Layer):
    """A Conv, DepthwiseConv or Dense layer whose kernel goes through TensorFlow's
    per-channel FakeQuant on the layer's grid (the kernel is already on it)::

        x -> op(x, FakeQuantPerChannel(kernel, -128 s, 127 s)) + bias -> activation
    """

    def __init__(self, node: Node, kernel: np.ndarray, bias: np.ndarray | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.node_name = node.name
        self.class_name = node.layer_type
        self.config = dict(node.payload["config"])
        grid = node.quant.weights["kernel"].grid
        self.scale = np.asarray(grid.scale, dtype=np.float64).ravel()
        self.kernel = np.asarray(kernel, dtype=np.float32)
        self.bias = None if bias is None else np.asarray(bias, dtype=np.float32)
        self.activation = keras.activations.get(self.config.get("activation") or "linear")

    def _quantized(self, kernel: Any) -> Any:
        """FakeQuant along the last axis (per channel), or per tensor for a scalar grid."""
        tf = _tf()
        if self.scale.size == 1:
            s = float(self.scale[0])
            return tf.quantization.fake_quant_with_min_max_args(kernel, min=-128 * s, max=127 * s, num_bits=8)
        low, high = (-128 * self.scale).astype(np.float32), (127 * self.scale).astype(np.float32)
        return tf.quantization.fake_quant_with_min_max_vars_per_channel(kernel, low, high, num_bits=8)

    def call(self, x: Any) -> Any:
        tf = _tf()
        c = self.config
        kernel = tf.constant(self.kernel)
        if self.class_name.startswith("Depthwise"):
            *window, channels, multiplier = self.kernel.shape
            flat = self._quantized(tf.reshape(kernel, (*window, 1, channels * multiplier)))
            y = keras.ops.depthwise_conv(
                x, tf.reshape(flat, self.kernel.shape), strides=c["strides"], padding=c["padding"],
                data_format=c.get("data_format"), dilation_rate=c["dilation_rate"],
            )  # fmt: skip
        elif self.class_name == "Dense":
            units = self.kernel.shape[1]
            inner = tuple(x.shape[1:-1])
            pointwise = self._quantized(tf.constant(self.kernel.reshape(1, 1, *self.kernel.shape)))
            y = keras.ops.conv(tf.reshape(x, (-1, 1, 1, self.kernel.shape[0])), pointwise, padding="valid")
            return tf.reshape(self._finish(y, -1), (-1, *inner, units))
        else:
            y = keras.ops.conv(
                x, self._quantized(kernel), strides=c["strides"], padding=c["padding"],
                data_format=c.get("data_format"), dilation_rate=c["dilation_rate"],
            )  # fmt: skip
        return self._finish(y, 1 if c.get("data_format") == "channels_first" else -1)

    def _finish(self, y: Any, axis: int) -> Any:
        """Bias and activation, right after the op, where the converter fuses them into it."""
        tf = _tf()
        if self.bias is not None:
            shape = [1] * len(y.shape)
            shape[axis] = -1
            y = y + tf.reshape(tf.constant(self.bias), shape)
        return self.activation(y)


INT8_LAYERS = ("Conv1D", "Conv2D", "Conv3D", "DepthwiseConv1D", "DepthwiseConv2D", "Dense")


class Int8Rescaling(keras.layers.Layer):
    """A ``Rescaling(scale, offset)`` between two int8 tensors, as a 1x1 depthwise convolution
    whose kernel is the scale and whose bias is the offset (one per channel, or one for all)::

        x (int8) -> DEPTHWISE_CONV_2D(kernel = scale, bias = offset) -> FakeQuant(grid)

    TFLite writes ``Rescaling`` itself as a float MUL and ADD between a DEQUANTIZE and a
    QUANTIZE (no grid between them): an integer-only runtime cannot run it. Here each
    channel's scale is its int8 weight exactly (``±127`` on the step ``|scale| / 127``), and
    the offset its int32 bias, rounded to the step ``s_input * |scale| / 127``: far under a
    step of the output's grid. The layer is ``x * scale + offset`` in float, as the
    quantized model computes it."""

    def __init__(self, scale: np.ndarray, offset: np.ndarray, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scale = np.asarray(scale, np.float32).ravel()
        self.offset = np.asarray(offset, np.float32).ravel()

    def call(self, x: Any) -> Any:
        tf = _tf()
        channels = int(x.shape[-1])
        scale = np.broadcast_to(self.scale, (channels,)).astype(np.float32)
        step = np.where(scale != 0, np.abs(scale) / 127, 1 / 127).astype(np.float32)
        kernel = tf.quantization.fake_quant_with_min_max_vars_per_channel(
            tf.constant(scale.reshape(1, 1, 1, channels)), -128 * step, 127 * step, num_bits=8
        )
        y = keras.ops.depthwise_conv(x, tf.reshape(kernel, (1, 1, channels, 1)), strides=1, padding="valid")
        return y + tf.constant(np.broadcast_to(self.offset, (channels,)).astype(np.float32))

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        return input_shape


class Int8HardSigmoid(keras.layers.Layer):
    """Keras's ``hard_sigmoid`` activation (``relu6(x + 3) / 6``) in ops TFLite stores as int8,
    for an output on the grid over [0, 1] (`core.export.grids.HARD_SIGMOID_RANGE`)::

        x (int8) -> ADD(x, 3) + RELU6 -> FakeQuant(0, 6) -> MUL(1/6) -> FakeQuant(0, 1)

    TFLite has no int8 hard-sigmoid kernel and writes the activation as a float ADD and MUL
    between a DEQUANTIZE and a QUANTIZE. The tensor between holds ``6 k / 255`` for the
    output's ``k / 255``: it rounds nothing the output's grid does not."""

    def call(self, x: Any) -> Any:
        tf = _tf()
        inner = tf.quantization.fake_quant_with_min_max_args(tf.nn.relu6(x + 3.0), min=0.0, max=6.0, num_bits=8)
        return inner * (1.0 / 6.0)

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        return input_shape


def _int8_rescaling(graph: Graph, node: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, offset) of a ``Rescaling`` the file can run as `Int8Rescaling`: a 4-D input
    (channels last) on an int8 grid, its output on one, one value or one per channel."""
    if node.layer_type != "Rescaling" or node.quant.activation is None or node.quant.activation.grid is None:
        return None
    edges = graph.in_edges(node.name)
    shape = node.output_shapes[0] if len(node.output_shapes) == 1 else None
    source = graph.node(edges[0].src).quant.activation if len(edges) == 1 else None
    if source is None or source.grid is None or shape is None or len(shape) != 4:
        return None
    config = node.payload["config"]
    if config.get("data_format") not in (None, "channels_last"):
        return None
    scale, offset = np.asarray(config.get("scale", 1.0), np.float64), np.asarray(config.get("offset", 0.0), np.float64)
    channels = shape[-1]
    if channels is None or any(a.size not in (1, channels) for a in (scale, offset)):
        return None
    if not (np.all(np.isfinite(scale)) and np.all(np.isfinite(offset))):
        return None
    return scale, offset


def int8_model(graph: Graph) -> keras.Model:
    """The quantized model of ``graph`` in the ops TFLite's converter stores as int8 (module docstring)."""
    weights = QuantizedWeights(graph)
    names = builder._Names()
    tensors: dict[str, list[Any]] = {}
    inputs: dict[str, Any] = {}
    for node in graph.nodes():
        if node.kind == OpKind.INPUT:
            outs = [builder.input_tensor(node, names)]
            inputs[node.name] = outs[0]
        else:
            args = [tensors[e.src][e.src_index] for e in graph.in_edges(node.name)]
            if "kernel" in node.quant.weights and node.quant.weights["kernel"].grid is not None:
                if node.layer_type not in INT8_LAYERS:
                    raise ExportError(
                        f"{node.name!r} ({node.layer_type}) has quantized weights that TFLite's int8 kernels do not "
                        f"take; int8 TFLite export handles {', '.join(INT8_LAYERS)}"
                    )
                q = weights[node.name]
                layer = QuantizedKernel(
                    node, q["kernel"], q.get("bias", node.weights.get("bias")), name=names.take(node.name)
                )
                outs = [layer(*args)]
            elif (affine := _int8_rescaling(graph, node)) is not None:
                outs = [Int8Rescaling(*affine, name=names.take(node.name))(*args)]
            elif on_hard_sigmoid_grid(node) and len(args) == 1:
                outs = [Int8HardSigmoid(name=names.take(node.name))(*args)]
            else:
                outs = builder._call(node, args, True, names, weights)
        if node.quant.activation is not None and node.quant.activation.grid is not None:
            outs = [fake_quant_layer(node, names.take(f"{node.name}_fake_quant"))(t) for t in outs]
        tensors[node.name] = outs
    outputs = [tensors[n][i] for n, i in graph.outputs]
    model_inputs = [inputs[n] for n in graph.inputs]
    return keras.Model(
        inputs=model_inputs if len(model_inputs) > 1 else model_inputs[0],
        outputs=outputs,
        name=names.take(graph.name),
    )


# ------------------------------------------------------------------ conversion and running
def convert(model: keras.Model, input_names: Sequence[str], output_names: Sequence[str], int8: bool) -> bytes:
    """The TFLite flatbuffer of ``model``: int8 from its FakeQuant ops, or float as it computes.

    The model goes through a SavedModel written by Keras's own `keras.export.ExportArchive`
    (which tracks Keras variables; a plain ``tf.Module`` loses them), with one signature
    whose inputs and outputs are named after the graph's input and output layers.
    """
    tf = _tf()
    specs = [
        tf.TensorSpec((None, *tuple(t.shape)[1:]), t.dtype, name=signature_name(name))
        for t, name in zip(model.inputs, input_names, strict=True)
    ]

    def serve(*args: Any) -> dict[str, Any]:
        flat = keras.tree.flatten(model(structured(model, args), training=False))
        return {signature_name(name): t for name, t in zip(output_names, flat, strict=True)}

    with tempfile.TemporaryDirectory(prefix="mct-tflite-") as folder:
        archive = keras.export.ExportArchive()
        archive.track(model)
        archive.add_endpoint(name="serving_default", fn=serve, input_signature=specs)
        archive.write_out(folder, verbose=False)
        converter = tf.lite.TFLiteConverter.from_saved_model(folder)
        if int8:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        try:
            return converter.convert()
        except Exception as err:  # the converter raises its own ConverterError with MLIR diagnostics
            lines = str(err).splitlines() or [type(err).__name__]
            first = next((ln for ln in lines if "error" in ln.lower()), lines[0])
            raise ExportError(
                f"TensorFlow's TFLite converter rejected the model: {first.strip()[:400]}"
            ) from err


def structured(model: keras.Model, args: Sequence[Any]) -> Any:
    """The inputs as the model's structure takes them: one tensor, or a list."""
    return list(args) if isinstance(model.input, (list, tuple)) else args[0]


def signature_name(name: str) -> str:
    """A layer name as a TFLite signature's input or output name."""
    clean = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return clean if clean and not clean[0].isdigit() else f"t_{clean}"


def interpreter(path: Path, threads: int | None = None, delegates: bool = True) -> Any:
    """TensorFlow's TFLite interpreter for the file: with ``delegates``, as TFLite runs it by
    default on a CPU (XNNPACK); without, its builtin kernels only (the ops as written)."""
    tf = _tf()
    kwargs: dict[str, Any] = {"model_path": str(path), "num_threads": threads}
    if not delegates:
        kwargs["experimental_op_resolver_type"] = (
            tf.lite.experimental.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        )
    with warnings.catch_warnings():  # TensorFlow 2.21 announces the move of its interpreter to LiteRT
        warnings.simplefilter("ignore", UserWarning)
        return tf.lite.Interpreter(**kwargs)


def run_tflite(
    interp: Any, batch: Sequence[np.ndarray], input_names: Sequence[str], output_names: Sequence[str]
) -> list[np.ndarray]:
    """The outputs of the TFLite model on one batch, in the graph's output order."""
    runner = interp.get_signature_runner()
    feeds = {}
    for name, x in zip(input_names, batch, strict=True):
        array = np.asarray(x)
        feeds[signature_name(name)] = (
            array.astype(np.float32) if np.issubdtype(array.dtype, np.floating) else array
        )
    result = runner(**feeds)
    return [np.asarray(result[signature_name(name)]) for name in output_names]


def runtime_version() -> str:
    return f"TFLite interpreter (TensorFlow {_tf().__version__})"


def describe_tflite(interp: Any, name: str) -> ExportedGraph:
    """The ops and tensors of a TFLite model as the interpreter reads them.

    The interpreter lists ops only through ``_get_ops_details`` (it has no public call for
    them); a TensorFlow without it gives the tensors and no ops.
    """
    tensors: dict[str, ExportedTensor] = {}
    by_index: dict[int, str] = {}
    for d in interp.get_tensor_details():
        q = d.get("quantization_parameters") or {}
        scales, zps = (
            list(np.asarray(q.get("scales", []), dtype=np.float64)),
            list(np.asarray(q.get("zero_points", []))),
        )
        tname = d["name"] or f"tensor_{d['index']}"
        if tname in tensors:
            tname = f"{tname}_{d['index']}"
        by_index[d["index"]] = tname
        tensors[tname] = ExportedTensor(
            name=tname, dtype=np.dtype(d["dtype"]).name, shape=tuple(int(s) for s in d["shape"]),
            scale=[float(s) for s in scales] or None, zero_point=[int(z) for z in zps] or None,
        )  # fmt: skip
    details = getattr(interp, "_get_ops_details", lambda: [])()
    produced = {o for op in details for o in op.get("outputs", [])}
    inputs = [by_index[d["index"]] for d in interp.get_input_details()]
    for d in details:
        for i in d.get("inputs", []):
            if i >= 0 and i not in produced and by_index.get(i) not in inputs:
                tensors[by_index[i]].constant = True
    ops = [
        ExportedOp(
            name=f"{d['op_name']}_{d['index']}",
            op_type=d["op_name"],
            inputs=[by_index[i] for i in d.get("inputs", []) if i >= 0],
            outputs=[by_index[i] for i in d.get("outputs", []) if i >= 0],
        )  # fmt: skip
        for d in details
    ]
    outputs = [by_index[d["index"]] for d in interp.get_output_details()]
    return ExportedGraph(name=name, ops=ops, tensors=tensors, inputs=inputs, outputs=outputs)


def float_islands(graph: ExportedGraph) -> list[tuple[str, list[str]]]:
    """The stretches of an int8 TFLite file computed in float between a DEQUANTIZE and a
    QUANTIZE (a layer TFLite writes as several ops with no grid between them, such as Keras's
    ``hard_sigmoid``, a float ADD and MUL, or a ``Rescaling`` not written as `Int8Rescaling`):
    per stretch, the layer whose grid it ends on (read from the QUANTIZE's tensor,
    ``<layer>_fake_quant``) and its float op types.
    A stretch that reaches a model output is the float tail, not an island."""
    readers: dict[str, list[ExportedOp]] = {}
    for op in graph.ops:
        for t in op.inputs:
            readers.setdefault(t, []).append(op)
    islands = []
    for start in (op for op in graph.ops if op.op_type == "DEQUANTIZE"):
        seen, frontier, types, ends = set(), list(start.outputs), [], []
        while frontier:
            tensor = frontier.pop()
            if tensor in graph.outputs:
                ends = []
                break
            for op in readers.get(tensor, []):
                if op.name in seen:
                    continue
                seen.add(op.name)
                if op.op_type == "QUANTIZE":
                    ends.append(op.outputs[0] if op.outputs else "")
                else:
                    types.append(op.op_type)
                    frontier.extend(op.outputs)
        if ends and types:
            name = ends[0].split("/")[-2] if "/" in ends[0] else ends[0]
            layer = name.split("_fake_quant")[0]
            islands.append((layer, list(dict.fromkeys(types))))
    return islands


# ------------------------------------------------------------------ .keras
def custom_objects() -> dict[str, type]:
    """What ``keras.models.load_model`` needs to load a quantized model saved as ``.keras``."""
    from model_compression_toolkit.keras.layers import ActivationFakeQuant

    return {"ActivationFakeQuant": ActivationFakeQuant}


def load_quantized(path: Path, compile: bool = True, custom: Mapping[str, Any] | None = None) -> keras.Model:  # noqa: A002
    return keras.models.load_model(
        str(path), custom_objects={**custom_objects(), **(custom or {})}, compile=compile
    )


def write_keras(q_model: keras.Model, path: Path) -> None:
    q_model.save(str(path))
