"""Graph preparation: the transforms run before statistics are collected.

Each transform is one function over the graph; backends only say, through a node's
`OpKind`, what matches. The graph is validated after every transform.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np

from model_compression_toolkit.core.calibration.outputs import keep_outputs_float, mark_model_outputs
from model_compression_toolkit.core.composites import Composite, find_composites
from model_compression_toolkit.core.config import KeepFloat, QuantizationConfig, QuantizationMethod
from model_compression_toolkit.core.export.grids import (
    HARD_SIGMOID_RANGE,
    int8_hard_sigmoid,
    tflite_fixed_range,
    tflite_fuses,
)
from model_compression_toolkit.core.graph import VALUE_PRESERVING, WEIGHTED, Graph, Node, OpKind
from model_compression_toolkit.core.quant_config import (
    ActivationQuantConfig,
    NodeQuantConfig,
    WeightsQuantConfig,
)
from model_compression_toolkit.core.selection import kept_float

KEPT_FLOAT = "kept in float by a KeepFloat rule"
OUTPUT_FLOAT = (
    "a model output, handed on unrounded on a target that runs float (as pt2e and NNCF do); "
    "CoreConfig(integer_only=True), a target platform or quantize_outputs=True puts it on a grid"
)
# activations whose outputs are negative only by a little: shift negative correction's candidates
SHIFT_NEGATIVE_FUNCTIONS = frozenset(
    {"silu", "swish", "gelu", "hardswish", "hard_swish", "elu", "selu", "celu", "mish", "leaky_relu", "prelu"}
)
_FOLDABLE = frozenset({OpKind.CONV, OpKind.CONV_TRANSPOSE, OpKind.DENSE})
_NO_OUTPUT_QUANT = {
    OpKind.CONSTANT: "a constant tensor, not an activation",
    OpKind.SHAPE: "computes a shape, indices or a mask, not an activation: nothing to quantize",
    OpKind.UNKNOWN: "unsupported op: kept in float and passed through unchanged",
}


class QuantizationEdit(Protocol):
    """A change to the quantization `assign_quantization` decided (a target platform's
    per-operator rules, a manual bit-width, an MCT network editor rule)."""

    def apply(self, graph: Graph, config: QuantizationConfig) -> None: ...


def prepare_graph(graph: Graph, config: QuantizationConfig, keep_float: Sequence[KeepFloat] = ()) -> Graph:
    """Run every preparation transform in place and return the graph."""
    for transform in (remove_no_ops, fold_constant_adds, fold_batch_norms, fold_constant_muls, fold_constant_adds):
        transform(graph)
        graph.validate()
    assign_quantization(graph, config, keep_float)
    graph.validate()
    return graph


def remove_no_ops(graph: Graph) -> None:
    """Remove dropout and identity layers: ``prev -> dropout -> next`` becomes ``prev -> next``."""
    for node in graph.find((OpKind.DROPOUT, OpKind.IDENTITY)):
        if len(graph.in_edges(node.name)) == 1:
            graph.bypass(node.name)


def _foldable_producer(graph: Graph, bn: Node) -> Node | None:
    ins = graph.in_edges(bn.name)
    if len(ins) != 1 or ins[0].src_index != 0:
        return None
    prev = graph.node(ins[0].src)
    axes = prev.kernel_axes.get("kernel")
    if (
        prev.kind not in _FOLDABLE
        or prev.fused_activation is not None
        or not axes
        or graph.consumers_count(prev.name) != 1
    ):
        return None
    channels = int(np.prod([prev.weights["kernel"].shape[a] for a in axes]))
    return prev if channels == bn.weights["gamma"].size else None


def fold_batch_norms(graph: Graph) -> None:
    """Fold each batch norm into the conv or dense layer that feeds only it.

    ``conv -> bn -> next`` becomes ``conv' -> next`` with
    ``kernel' = kernel * s`` and ``bias' = (bias - mean) * s + beta``, where
    ``s = gamma / sqrt(variance + epsilon)`` per output channel.
    """
    for bn in graph.find((OpKind.BATCH_NORM,)):
        prev = _foldable_producer(graph, bn)
        if prev is None:
            continue
        w = bn.weights
        scale = w["gamma"].astype(np.float64) / np.sqrt(w["variance"].astype(np.float64) + bn.attrs["epsilon"])
        kernel = prev.weights["kernel"]
        shape = _channel_shape(kernel, prev.kernel_axes["kernel"])
        prev.weights["kernel"] = (kernel * scale.reshape(shape)).astype(kernel.dtype)
        bias = prev.weights.get("bias", np.zeros(scale.size, dtype=kernel.dtype))
        prev.weights["bias"] = ((bias - w["mean"]) * scale + w["beta"]).astype(kernel.dtype)
        prev.output_shapes = list(bn.output_shapes)
        prev.origin = prev.origin + bn.origin
        graph.redirect_uses(bn.name, prev.name)
        graph.remove_edge(graph.in_edges(bn.name)[0])
        graph.remove_node(bn.name)


def _constant_value(graph: Graph, name: str) -> np.ndarray | None:
    """The value of node ``name`` when it is a constant, or a reshape of a constant vector
    by constants (ONNX's ``Reshape(bias, [1, C, 1, 1])``); else None."""
    node = graph.node(name)
    if node.kind == OpKind.CONSTANT:
        return node.weights.get("value")
    ins = graph.in_edges(name)
    if node.kind != OpKind.RESHAPE or not ins or not node.output_shapes or node.output_shapes[0] is None:
        return None
    if any(graph.node(e.src).kind != OpKind.CONSTANT for e in ins):
        return None
    data = next((e for e in ins if e.dst_index == 0), None)
    value = None if data is None else graph.node(data.src).weights.get("value")
    target = tuple(1 if d is None else int(d) for d in node.output_shapes[0])
    # a vector (one axis over 1) keeps its order through any reshape or transpose
    if value is None or sum(d != 1 for d in value.shape) > 1 or int(np.prod(target)) != value.size:
        return None
    return value.reshape(target)


def _remove_unused_constants(graph: Graph, name: str) -> None:
    """Remove node ``name`` (a constant, or a reshape of constants) and its constant inputs
    where nothing uses them any more."""
    if graph.out_edges(name) or graph.is_output(name):
        return
    sources = [e.src for e in graph.in_edges(name)]
    for edge in graph.in_edges(name):
        graph.remove_edge(edge)
    graph.remove_node(name)
    for source in sources:
        _remove_unused_constants(graph, source)


def _per_channel_constant(graph: Graph, node: Node, prev: Node) -> tuple[str, np.ndarray] | None:
    """The constant input of ``node`` (an add or a product of ``prev``'s output and a
    constant, or a subtraction of a constant from it) as one value per output channel of
    ``prev``, with the constant's node name; None when it is not one (it broadcasts along
    other axes too)."""
    edges = graph.in_edges(node.name)
    if len(edges) != 2 or not prev.output_shapes or prev.channel_axis is None:
        return None
    const = next((e for e in edges if e.src != prev.name), None)
    if const is None or (node.kind == OpKind.SUB and const.dst_index != 1):
        return None  # ``c - x`` negates x: not a shift
    value = _constant_value(graph, const.src)
    shape = prev.output_shapes[0]
    if value is None or not np.issubdtype(value.dtype, np.floating) or value.ndim > len(shape):
        return None
    axis = prev.channel_axis % len(shape)
    full = (1,) * (len(shape) - value.ndim) + value.shape
    channels = shape[axis]
    if any(size != 1 for a, size in enumerate(full) if a != axis) or full[axis] not in (1, channels):
        return None
    per_channel = np.broadcast_to(value.reshape(full[axis]), (channels,)).astype(np.float64)
    return const.src, -per_channel if node.kind == OpKind.SUB else per_channel


def _foldable_into(graph: Graph, node: Node) -> Node | None:
    """The conv or dense layer whose output ``node`` reads first, when a constant applied by
    ``node`` can be folded into it: its kernel has output-channel axes, it applies no
    activation of its own, ``node`` alone reads it and keeps its shape."""
    prev = next(
        (graph.node(e.src) for e in graph.in_edges(node.name) if e.src_index == 0 and graph.node(e.src).kind in _FOLDABLE),
        None,
    )
    if (
        prev is None
        or prev.fused_activation is not None
        or graph.consumers_count(prev.name) != 1
        or "kernel" not in prev.weights
        or not prev.kernel_axes.get("kernel")
        or node.output_shapes[:1] != prev.output_shapes[:1]
    ):
        return None
    return prev


def _constants_on_layers(graph: Graph, kinds: tuple[OpKind, ...]) -> Iterator[tuple[Node, Node, str, np.ndarray]]:
    """Each node of ``kinds`` that applies a constant, one value per output channel, to a
    layer's output it can be folded into (`_foldable_into`): the node, the layer, the
    constant's node name and its values."""
    for node in graph.find(kinds):
        prev = _foldable_into(graph, node)
        found = None if prev is None else _per_channel_constant(graph, node, prev)
        if prev is not None and found is not None:
            yield node, prev, *found


def _channel_shape(kernel: np.ndarray, axes: Sequence[int]) -> list[int]:
    """The shape that broadcasts one value per output channel (``axes``, C order) over ``kernel``."""
    shape = [1] * kernel.ndim
    for a in axes:
        shape[a] = kernel.shape[a]
    return shape


def _absorb(graph: Graph, node: Node, prev: Node, const: str) -> None:
    """``prev`` now computes what ``node`` did: ``node`` and its constant leave the graph."""
    prev.origin = prev.origin + node.origin
    graph.redirect_uses(node.name, prev.name)
    for edge in graph.in_edges(node.name):
        graph.remove_edge(edge)
    graph.remove_node(node.name)
    _remove_unused_constants(graph, const)


def fold_constant_muls(graph: Graph) -> None:
    """Fold a constant a conv's or dense layer's output is multiplied by, one value per
    output channel (or one for all), into the layer's kernel and bias: a batch norm or a
    learnable scale exported as ``mul`` (PP-LCNetV3's affine blocks, through ONNX) left the
    layer's output a tensor of its own that an int8 runtime holds and rounds::

        conv -> mul(a) -> next      becomes      conv' -> next, kernel' = kernel * a, bias' = bias * a

    Exact in float. The layer must feed only the multiplication, with no activation of its own.
    """
    for node, prev, const, scale in _constants_on_layers(graph, (OpKind.MUL,)):
        kernel = prev.weights["kernel"]
        shape = _channel_shape(kernel, prev.kernel_axes["kernel"])
        if int(np.prod(shape)) != scale.size:
            continue
        prev.weights["kernel"] = (kernel.astype(np.float64) * scale.reshape(shape)).astype(kernel.dtype)
        if "bias" in prev.weights:
            prev.weights["bias"] = (prev.weights["bias"].astype(np.float64) * scale).astype(kernel.dtype)
        _absorb(graph, node, prev, const)


def fold_constant_adds(graph: Graph) -> None:
    """Fold a constant added to (or subtracted from) a conv's or dense layer's output, one
    value per output channel, into the layer's bias: an exporter that writes a layer's bias
    as a separate add (PaddlePaddle's, through ONNX and onnx2torch, as ``Add(conv,
    Reshape(bias, [1, C, 1, 1]))``) left the layer's output a grid of its own before the
    add rounded it again::

        conv -> add(c) -> next      becomes      conv' -> next, bias' = bias + c

    Exact in float. The layer must feed only the add, with no activation of its own.
    """
    for node, prev, const, shift in _constants_on_layers(graph, (OpKind.ADD, OpKind.SUB)):
        kernel = prev.weights["kernel"]
        bias = prev.weights.get("bias", np.zeros(shift.size, dtype=kernel.dtype))
        if bias.size != shift.size:
            continue
        prev.weights["bias"] = (bias.astype(np.float64) + shift).astype(kernel.dtype)
        _absorb(graph, node, prev, const)


def _fused_into(graph: Graph, node: Node) -> Node | None:
    """The activation that alone consumes ``node``'s output, if any."""
    if graph.is_output(node.name) or node.kind == OpKind.INPUT:
        return None
    users = graph.out_edges(node.name)
    if len(users) != 1:
        return None
    nxt = graph.node(users[0].dst)
    return nxt if nxt.kind == OpKind.ACTIVATION and len(graph.in_edges(nxt.name)) == 1 else None


def _floating(dtype: object) -> bool:
    """Whether a dtype name (``float32``, ``bfloat16``, ``int64``; None when not known) is
    a floating-point one."""
    return dtype is None or "float" in str(dtype) or str(dtype) in ("half", "double")


def _empty(node: Node) -> bool:
    """Whether the node's output holds no value whatever the batch size (a dimension of 0)."""
    return any(0 in shape for shape in node.output_shapes if shape)


def shift_negative_candidate(graph: Graph, node: Node) -> bool:
    """Whether ``node`` is an activation that shift negative correction may shift: one with
    a small negative tail (GELU, SiLU, Hardswish...) feeding only conv or dense layers,
    whose bias absorbs the shift on hardware."""
    function = str(node.attrs.get("function") or node.fused_activation or "").lower()
    if node.kind != OpKind.ACTIVATION and node.fused_activation is None:
        return False
    return function in SHIFT_NEGATIVE_FUNCTIONS and _feeds_only_weighted(graph, node)


def _feeds_only_weighted(graph: Graph, node: Node) -> bool:
    """Whether every use of ``node``'s output reaches a conv or dense layer, through ops that
    only move values (a flatten)."""
    users = graph.successors(node.name)
    if graph.is_output(node.name) or not users:
        return False
    return all(u.kind in WEIGHTED or (u.kind in VALUE_PRESERVING and _feeds_only_weighted(graph, u)) for u in users)


def assign_quantization(
    graph: Graph,
    config: QuantizationConfig,
    keep_float: Sequence[KeepFloat] = (),
    edits: Sequence[QuantizationEdit] = (),
    outputs_float: bool = False,
    grids_for: str = "float",
) -> None:
    """Decide for every node whether its weights and output are quantized, and why not.

    A layer followed only by an activation (``conv -> relu``) is quantized after the
    activation: its own output stays float inside the fused pair; so is an activation
    written as ops (`quantize_composites_once`). Then ``edits`` change
    what was decided, in order; last, layers selected by ``keep_float`` rules keep their
    weights and/or output in float. ``grids_for`` (`CoreConfig.grids_for`): ``"float"``
    rounds each activation written as ops once; ``"platform"`` only a hard-swish written
    as ops (any other runs op by op on an integer target; the platform's fusing patterns
    decide the rest, `core.tpc`); ``"int8"`` puts a grid where an int8 runtime holds a
    tensor (`integer_runtime_grids`). With ``outputs_float`` the model's outputs get no grid,
    before the edits (`keep_outputs_float`): a bit-width an edit sets for one is an error
    that names ``quantize_outputs``.
    """
    if grids_for not in ("float", "int8", "platform"):
        raise ValueError(f"grids_for must be 'float', 'int8' or 'platform'; got {grids_for!r}")
    for node in graph.nodes():
        q = NodeQuantConfig()
        if node.kind in WEIGHTED and any(node.weights[w].size == 0 for w in node.kernel_axes if w in node.weights):
            q.weights_float_reason = "empty weights (a dimension of 0, such as Linear(8, 0)): nothing to quantize"
        elif node.kind in WEIGHTED:
            for wname, axes in node.kernel_axes.items():
                q.weights[wname] = WeightsQuantConfig(
                    n_bits=config.weights_n_bits,
                    method=config.weights_quantization_method,
                    error_method=config.weights_error_method,
                    per_channel=config.weights_per_channel and bool(axes),
                    channel_axes=tuple(axes) if config.weights_per_channel else (),
                )
        elif node.weights:
            q.weights_float_reason = "weights of this layer type are not quantized"
        reason = output_float_reason(graph, node)
        fused = _fused_into(graph, node)
        if reason is None and fused is not None:
            reason = f"fused with the activation {fused.name!r}: quantized after it"
            q.fused_into = fused.name
        if reason is None:
            q.activation = _output_grid(graph, node, config)
        q.activation_float_reason = reason
        node.quant = q
    if grids_for == "int8":
        integer_runtime_grids(graph, config)
    elif grids_for == "platform":
        quantize_composites_once(graph, _hard_swishes(graph))
    else:
        quantize_composites_once(graph, find_composites(graph))
    if outputs_float:
        keep_outputs_float(graph, OUTPUT_FLOAT)
    for edit in edits:
        edit.apply(graph, config)
    float_weights, float_outputs = kept_float(graph, keep_float)
    for node in graph.nodes():
        q = node.quant
        if node.name in float_weights and q.weights:
            q.weights, q.weights_float_reason = {}, KEPT_FLOAT
        if node.name in float_outputs and q.activation is not None:
            q.activation, q.activation_float_reason = None, KEPT_FLOAT
    mark_model_outputs(graph)  # their default grids leave room for unseen samples


def _output_grid(graph: Graph, node: Node, config: QuantizationConfig) -> ActivationQuantConfig:
    q = default_activation(config)
    if config.shift_negative_activation_correction and shift_negative_candidate(graph, node):
        q.shift_negative_ratio = float(config.shift_negative_ratio)
    return q


def _hard_swishes(graph: Graph) -> list[Composite]:
    """The hard-swishes written as ops: one kernel on an integer target (TFLite's converter
    writes ``HARD_SWISH`` for them; MCT's platforms list Hardswish), unlike the other
    activations written as ops, which it runs op by op."""
    return [c for c in find_composites(graph) if c.function == "hardswish"]


def integer_runtime_grids(graph: Graph, config: QuantizationConfig) -> None:
    """Put a grid on every tensor an int8 runtime holds (``CoreConfig(integer_only=True)``
    without a platform), instead of where a float-capable target or a fused kernel needs one.

    An int8 runtime (TFLite's kernels, ONNX Runtime's QDQ) applies only relu and relu6
    inside the layer before them (`tflite_fuses`); any other activation reads the layer's
    output from an int8 tensor. A hard-swish written as ops is one int8 kernel of its own
    (TFLite's converter writes HARD_SWISH for it); any other activation written as ops runs
    op by op::

        conv -> q -> hard_swish -> q          (float target: conv -> hard_swish -> q)
        conv -> q -> add(3) + relu6 -> mul(x, .) -> div(6) -> q
        x -> add(3) + relu6 -> q -> div(6) -> q             (a hard-sigmoid)

    so each of those tensors gets its own grid here; and a sigmoid, softmax or tanh writes
    its output on the one grid the runtime's kernel has for it (`tflite_fixed_range`), a
    hard-sigmoid activation on [0, 1] (`HARD_SIGMOID_RANGE`: the file runs it as an int8 add,
    relu6 and multiply whose inner grid that makes exact). The
    model quantized is then the one the runtime computes, and it exports to int8 TFLite
    with parity. A platform's fusing patterns decide this instead where one is given
    (`core.tpc`).
    """
    quantize_composites_once(graph, _hard_swishes(graph), fuse_source=False)
    for node in graph.nodes():
        q = node.quant
        if q.fused_into is not None and not tflite_fuses(node, graph.node(q.fused_into)):
            q.fused_into, q.activation_float_reason = None, None
            q.activation = _output_grid(graph, node, config)
        fixed = tflite_fixed_range(node) or (HARD_SIGMOID_RANGE if int8_hard_sigmoid(node) else None)
        if fixed is not None and q.activation is not None and q.activation.n_bits == 8:
            q.activation.fixed_range = fixed


def quantize_composites_once(graph: Graph, composites: Sequence[Composite], fuse_source: bool = True) -> None:
    """Quantize each of ``composites`` (activations written as ops, `core.composites`) only
    at its output, as a fused one is::

        x -> add(3) -> relu6 -> mul(x, .) -> div(6) -> q
             (float)  (float)  (float)

    Each intermediate keeps no quantizer (its float reason says why); with ``fuse_source``
    the layer that computes ``x``, when nothing else reads it, is fused with the activation
    as ``conv -> relu`` is. A node whose output cannot be quantized anyway is left alone.
    """
    for composite in composites:
        out = graph.node(composite.output)
        if out.quant.activation is None:
            continue  # the output itself stays float (a shape op, an empty tensor): nothing to move
        for name in composite.inner:
            q = graph.node(name).quant
            if q.activation is not None or q.fused_into is not None:  # ``add -> relu6`` was fused: no longer
                q.activation, q.activation_float_reason, q.fused_into = None, composite.reason(), None
        source = graph.node(composite.source)
        inside = {*composite.inner, composite.output}
        if fuse_source and (
            source.quant.activation is not None
            and source.kind != OpKind.INPUT
            and not graph.is_output(source.name)
            and all(e.dst in inside for e in graph.out_edges(source.name))
        ):
            source.quant.activation = None
            source.quant.activation_float_reason = f"fused with the activation {out.name!r}: quantized after it"
            source.quant.fused_into = out.name
    for node in graph.nodes():  # conv -> mul -> add -> hard-swish: each fused one names the chain's quantizer
        first = after = node.quant.fused_into
        while after is not None and graph.node(after).quant.fused_into is not None:
            after = graph.node(after).quant.fused_into
        if after != first:
            node.quant.fused_into = after
            node.quant.activation_float_reason = f"fused with the activation {after!r}: quantized after it"
    for composite in composites:  # a hard-swish whose output is fused into the chain after it
        at = graph.node(composite.output).quant.fused_into
        if at is None:
            continue
        for name in composite.inner:
            q = graph.node(name).quant
            if q.activation is None and q.activation_float_reason == composite.reason():
                q.activation_float_reason = composite.reason(at)


def default_activation(config: QuantizationConfig) -> ActivationQuantConfig:
    """The activation quantization ``config`` gives an output that is quantized.

    With no ``activation_quantization_method`` the grid is chosen per activation once its
    values are collected (``choose_grid``; symmetric until then).
    """
    method = config.activation_quantization_method
    return ActivationQuantConfig(
        n_bits=config.activation_n_bits,
        method=QuantizationMethod.SYMMETRIC if method is None else method,
        error_method=config.activation_error_method,
        z_threshold=float(config.z_threshold),
        choose_grid=method is None,
    )


def output_float_reason(graph: Graph, node: Node) -> str | None:
    """Why the node's output cannot be quantized by its nature (a constant, a shape, an
    op that only moves values), or None."""
    reason = _NO_OUTPUT_QUANT.get(node.kind)
    dtype = node.attrs.get("dtype")
    if reason is None and node.kind == OpKind.INPUT and dtype == "non-tensor":
        reason = "a non-tensor argument (a number, a flag): not quantized"
    elif reason is None and node.kind == OpKind.INPUT and not _floating(dtype):
        reason = f"a non-floating-point input ({dtype}: ids, indices, integer pixels): not quantized"
    if reason is None and _empty(node):
        reason = "an empty tensor (a dimension of 0): nothing to quantize"
    if reason is None and node.kind in VALUE_PRESERVING:
        reason = "only moves values of its input, which carries the quantization"
    return reason
