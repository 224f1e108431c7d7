"""The library's grids as a runtime stores them, and what each export format can express.

Every grid is ``value = (q - zero_point) * scale`` with integers ``q`` in ``[qmin, qmax]``
(`core.quant_config`). A runtime stores ``q`` in a fixed integer type, so the integers
are moved by an offset into that type's range, and the zero point moves with them::

    symmetric signed 8-bit  [-128, 127], zp 0   ->  uint8 [0, 255], zp 128   (ONNX activations)
    symmetric unsigned 8-bit [0, 255],   zp 0   ->  int8 [-128, 127], zp -128 (TFLite)
    symmetric signed 4-bit   [-8, 7],    zp 0   ->  int8 [-8, 7], zp 0, narrower than int8

The values, and so the rounding of every input, are the same; only the stored integers
differ. A grid narrower than its type (fewer than 8 bits) needs a clamp at run time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from model_compression_toolkit.core.calibration.outputs import float_tail
from model_compression_toolkit.core.composites import find_composites
from model_compression_toolkit.core.graph import VALUE_PRESERVING, Graph, Node, OpKind
from model_compression_toolkit.core.quant_config import QuantGrid

DTYPE_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-128, 127),
    "uint8": (0, 255),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
}


@dataclass(frozen=True)
class StoredGrid:
    """A grid as stored in ``dtype``: integers ``q + offset``, zero point ``zero_point + offset``.

    Attributes:
        dtype: the integer type (a key of `DTYPE_RANGES`).
        scale: float64, a scalar or one per channel.
        zero_point: int64, in stored integers, the shape of ``scale``.
        lo, hi: the grid's integer range in stored integers.
        offset: what was added to the grid's integers.
    """

    dtype: str
    scale: np.ndarray
    zero_point: np.ndarray
    lo: int
    hi: int
    offset: int

    @property
    def narrow(self) -> bool:
        """Whether the grid covers less than its type (a clamp keeps values on it)."""
        return (self.lo, self.hi) != DTYPE_RANGES[self.dtype]


def stored_grid(grid: QuantGrid, dtype: str) -> StoredGrid | None:
    """``grid`` stored in ``dtype``, or None when its range does not fit the type.

    The offset is 0 when the grid's integers fit as they are (the zero point is kept),
    else the one that puts ``qmin`` at the type's minimum.
    """
    dmin, dmax = DTYPE_RANGES[dtype]
    if grid.qmax - grid.qmin > dmax - dmin:
        return None
    offset = 0 if dmin <= grid.qmin and grid.qmax <= dmax else dmin - grid.qmin
    scale = np.asarray(grid.scale, dtype=np.float64)
    zero_point = np.broadcast_to(np.round(np.asarray(grid.zero_point, dtype=np.float64)), scale.shape)
    return StoredGrid(
        dtype=dtype,
        scale=scale,
        zero_point=zero_point.astype(np.int64) + offset,
        lo=int(grid.qmin) + offset,
        hi=int(grid.qmax) + offset,
        offset=offset,
    )


def bits(grid: QuantGrid) -> int:
    """The bits a grid's integer range needs."""
    return int(np.ceil(np.log2(grid.qmax - grid.qmin + 1)))


def integer_values(x: np.ndarray, grid: QuantGrid, axes: Sequence[int], stored: StoredGrid) -> np.ndarray:
    """The stored integers of ``x`` on ``grid``: ``clip(round(x / scale) + zp, qmin, qmax) + offset``.

    The same float64 arithmetic as `core.quantizers.fake_quant`, so the integers are the
    ones the quantized model's weights are made of.
    """
    x = np.asarray(x)
    scale = _along(np.asarray(grid.scale, dtype=np.float64), x, axes)
    zp = _along(np.asarray(grid.zero_point, dtype=np.float64), x, axes)
    q = np.clip(np.round(np.divide(x, scale)) + zp, grid.qmin, grid.qmax) + stored.offset
    return q.astype(stored.dtype)


def _along(param: np.ndarray, x: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    """A per-channel parameter shaped to broadcast over ``axes`` of ``x`` (C order)."""
    if param.ndim == 0 or param.size == 1 or not axes:
        return param.reshape(()) if param.size == 1 else param
    shape = [1] * x.ndim
    for a in axes:
        shape[a % x.ndim] = x.shape[a % x.ndim]
    return param.reshape(shape)


# ------------------------------------------------------------------ what a format can express
# Activations a TFLite kernel applies itself (``fused_activation_function``), and the kinds
# of layer it can fuse them into: the layer's own output then needs no grid.
TFLITE_FUSED_ACTIVATIONS = frozenset({"relu", "relu6"})
TFLITE_FUSING_KINDS = frozenset(
    {OpKind.CONV, OpKind.DENSE, OpKind.ADD, OpKind.SUB, OpKind.MUL, OpKind.CONCAT}
)
# How a model gets a grid on every tensor an int8 runtime holds (`core.preparation.integer_runtime_grids`)
_INTEGER_HINT = "CoreConfig(integer_only=True) without a target platform quantizes as an int8 runtime rounds"
# Graph.meta key: the target platform a graph was quantized for ("imx500 4.0"; `pipeline.session`)
PLATFORM_META = "target_platform"


def _integer_hint(graph: Graph) -> str:
    """How to quantize ``graph``'s model for int8 TFLite instead: a model quantized for another
    target platform (IMX500 fuses a swish into the conv before it and grids a softmax its own
    way) is told that first, and that MCT's "tflite" platform places TFLite's grids."""
    platform = graph.meta.get(PLATFORM_META)
    if not platform or str(platform).split()[0] == "tflite":
        return _INTEGER_HINT
    return (
        f"the model was quantized for the {platform} platform, whose kernels fuse and grid differently from "
        "TFLite's; quantize for int8 TFLite with mct.get_target_platform_capabilities('tensorflow', 'tflite'), "
        f"or {_INTEGER_HINT}"
    )


# Kinds whose output is not an activation: no grid needed anywhere.
_NOT_ACTIVATIONS = frozenset({OpKind.CONSTANT, OpKind.SHAPE})


# Outputs TFLite's int8 kernels write on a grid of their own (LOGISTIC, SOFTMAX: scale 1/256;
# TANH: 1/128), whatever grid the model asks for: [min, max] of that grid
TFLITE_FIXED_RANGES = {"sigmoid": (0.0, 255 / 256), "softmax": (0.0, 255 / 256), "tanh": (-1.0, 127 / 128)}


# A hard-sigmoid activation (``relu6(x + 3) / 6``) has no int8 kernel in TFLite: an integer file
# runs it as ``ADD(x, 3) + RELU6 -> int8 on [0, 6] -> MUL(1/6)``. On its output grid over [0, 1]
# (step 1/255) the tensor between is exactly the output's grid times 6: no rounding of its own
# (`keras.export.Int8HardSigmoid`)
HARD_SIGMOID_RANGE = (0.0, 1.0)
_HARD_SIGMOIDS = frozenset({"hard_sigmoid", "hardsigmoid"})


def int8_hard_sigmoid(node: Node) -> bool:
    """Whether ``node`` is a hard-sigmoid activation of its own (not fused into a layer)."""
    return node.kind == OpKind.ACTIVATION and node.fused_activation is None and node.attrs.get("function") in _HARD_SIGMOIDS


def on_hard_sigmoid_grid(node: Node) -> bool:
    """Whether ``node`` is a hard-sigmoid whose output is on the grid `HARD_SIGMOID_RANGE`."""
    act = node.quant.activation
    return int8_hard_sigmoid(node) and act is not None and act.grid is not None and _on_range(act.grid, *HARD_SIGMOID_RANGE)


def tflite_fixed_range(node: Node) -> tuple[float, float] | None:
    """The grid TFLite's int8 kernel for ``node`` writes its output on, if it fixes one."""
    function = "softmax" if node.kind == OpKind.SOFTMAX else node.attrs.get("function")
    if node.kind not in (OpKind.SOFTMAX, OpKind.ACTIVATION) or node.fused_activation is not None:
        return None
    return TFLITE_FIXED_RANGES.get(str(function))


def _on_range(grid: QuantGrid, low: float, high: float) -> bool:
    """Whether ``grid`` is one per-tensor grid of 256 levels from ``low`` to ``high``."""
    scale, zero_point = np.asarray(grid.scale, np.float64), np.asarray(grid.zero_point, np.float64)
    if scale.size != 1 or grid.qmax - grid.qmin != 255:
        return False
    lo, hi = float((grid.qmin - zero_point) * scale), float((grid.qmax - zero_point) * scale)
    return bool(np.isclose(lo, low, rtol=0, atol=1e-9) and np.isclose(hi, high, rtol=1e-6, atol=1e-9))


def tflite_fuses(producer: Node, activation: Node) -> bool:
    """Whether TFLite runs ``producer -> activation`` as one kernel (its
    ``fused_activation_function``), so that the tensor between them needs no grid."""
    return (
        activation.attrs.get("function") in TFLITE_FUSED_ACTIVATIONS
        and producer.kind in TFLITE_FUSING_KINDS
        and producer.fused_activation is None
    )


def _act_reason(node: Node) -> str:
    return node.quant.activation_float_reason or "no quantization grid"


def tflite_int8_problems(graph: Graph) -> list[str]:
    """Why ``graph`` cannot run as an all-integer TFLite model: one line per layer, or none.

    TFLite's int8 kernels need every tensor between two ops on an int8 grid, per-channel
    weights symmetric (zero point 0) and at most 8 bits; activations of more than 8 bits
    exist only in a whole-model 16x8 mode. The layers at the model's end that hand their
    result on unrounded (`float_tail`: a model output left float) are no problem: the
    converter writes a DEQUANTIZE before them and runs them in float.
    """
    problems, hint = [], _integer_hint(graph)
    tail = set(float_tail(graph))  # run in float after a DEQUANTIZE: TFLite's converter writes them so
    composites = find_composites(graph)
    composite_inner = {name for composite in composites for name in composite.inner}
    # TFLite's converter writes a hard-swish written as ops as one HARD_SWISH kernel: its
    # inner tensors are no tensors of the file (the layer computing its input is checked)
    swish_inner = {name for c in composites if c.function == "hardswish" for name in c.inner}
    for node in graph.nodes():
        q, act = node.quant, node.quant.activation
        for wname, cfg in q.weights.items():
            if cfg.grid is None:
                continue
            if cfg.grid.qmin >= 0 or np.any(np.asarray(cfg.grid.zero_point) != 0):
                problems.append(
                    f"{node.name!r} ({node.layer_type}): its {wname} uses {cfg.method.value} quantization with "
                    "a zero point; TFLite stores weights symmetric (zero point 0)"
                )
            elif bits(cfg.grid) > 8:
                problems.append(
                    f"{node.name!r} ({node.layer_type}): {cfg.n_bits}-bit {wname} weights; TFLite int8 holds at most 8"
                )
        if node.name in tail or node.name in swish_inner:
            continue
        if act is not None and act.grid is not None:
            if bits(act.grid) > 8:
                problems.append(
                    f"{node.name!r} ({node.layer_type}): {act.n_bits}-bit activations; TFLite int8 holds at most 8"
                )
            fixed = tflite_fixed_range(node)
            if fixed is not None and not _on_range(act.grid, *fixed):
                lo, hi = fixed
                problems.append(
                    f"{node.name!r} ({node.layer_type}): TFLite's int8 kernel writes its output on a grid over "
                    f"[{lo:g}, {hi:g}] whatever grid it is given, and this one is not that grid ({hint})"
                )
            if node.fused_activation not in (None, *TFLITE_FUSED_ACTIVATIONS):
                problems.append(
                    f"{node.name!r} ({node.layer_type}): applies {node.fused_activation!r} itself, which TFLite runs "
                    "as a separate op whose input has no quantization grid here (only relu and relu6 fuse into "
                    "the layer); build the layer without it and add the activation as its own layer "
                    "(keras.layers.Softmax(), or classifier_activation=None for keras.applications)"
                )
            continue
        if node.kind in _NOT_ACTIVATIONS or node.kind in VALUE_PRESERVING:
            continue
        if q.fused_into is not None:
            after = graph.node(q.fused_into)
            if tflite_fuses(node, after):
                continue
            problems.append(
                f"{node.name!r} ({node.layer_type}): its output is quantized only after {q.fused_into!r} "
                f"({after.attrs.get('function')}), which TFLite cannot fuse into it, so the tensor between them "
                f"has no grid (only relu and relu6 fuse; {hint})"
            )
            continue
        why = f"; {hint}" if node.name in composite_inner else ""
        problems.append(f"{node.name!r} ({node.layer_type}): its output stays float ({_act_reason(node)}{why})")
    return problems


def float_tail_notes(graph: Graph, runs: str) -> list[str]:
    """A note naming the layers that hand the model's outputs on unrounded (`float_tail`),
    and how the runtime computes them (``runs``); none when the outputs are on grids."""
    tail = float_tail(graph)
    if not tail:
        return []
    names = ", ".join(repr(n) for n in tail[:4]) + (f" and {len(tail) - 4} more" if len(tail) > 4 else "")
    return [
        f"{names} hand{'s' if len(tail) == 1 else ''} the model's outputs on unrounded, as quantized for a "
        f"target that runs float: {runs}; "
        "quantize with CoreConfig(integer_only=True) (or quantize_outputs=True) for a file that is integer "
        "up to its outputs"
    ]


def onnx_problems(graph: Graph, opset: int) -> list[str]:
    """Why ``graph`` cannot be written as QuantizeLinear/DequantizeLinear pairs at ``opset``.

    Layers kept float are fine (ONNX runs them in float); what cannot be written is a
    grid without an integer type at that opset: 16-bit types need opset 21, per-channel
    weights opset 13, and a weight quantized along more than one axis has no ONNX form.
    """
    problems = []
    if opset < 13:
        problems.append(f"opset {opset}: per-channel DequantizeLinear needs opset 13 or later")
    for node in graph.nodes():
        grids = [
            (f"{w} weights", c.grid, c.channel_axes)
            for w, c in node.quant.weights.items()
            if c.grid is not None
        ]
        act = node.quant.activation
        if act is not None and act.grid is not None:
            if np.size(act.grid.scale) > 1:
                problems.append(
                    f"{node.name!r} ({node.layer_type}): a per-channel activation grid; ONNX export needs per-tensor activations"
                )
            grids.append(("activation", act.grid, ()))
        for what, grid, axes in grids:
            if np.size(grid.scale) > 1 and len(axes) != 1:
                problems.append(
                    f"{node.name!r} ({node.layer_type}): {what} quantized along axes {tuple(axes)}; ONNX has one axis"
                )
            if bits(grid) > 8 and opset < 21:
                problems.append(
                    f"{node.name!r} ({node.layer_type}): {bits(grid)}-bit {what} needs 16-bit integer types, "
                    f"which ONNX has from opset 21 (got opset {opset})"
                )
            if bits(grid) > 16:
                problems.append(
                    f"{node.name!r} ({node.layer_type}): {bits(grid)}-bit {what}; ONNX types hold at most 16"
                )
    return problems


def needs_16_bits(graph: Graph) -> bool:
    """Whether any grid of ``graph`` needs more than 8 bits."""
    for node in graph.nodes():
        act = node.quant.activation
        grids = [c.grid for c in node.quant.weights.values()] + [act.grid if act is not None else None]
        if any(g is not None and bits(g) > 8 for g in grids):
            return True
    return False


def output_step(graph: Graph, name: str) -> float | None:
    """The quantization step of a node's output: its grid's scale, or for a node that only
    moves its input's values (reshape, pad), its input's. None for a float output."""
    node = graph.node(name)
    while True:
        act = node.quant.activation
        if act is not None and act.grid is not None and np.size(act.grid.scale) == 1:
            return float(np.asarray(act.grid.scale))
        edges = graph.in_edges(node.name)
        if node.kind not in VALUE_PRESERVING or len(edges) != 1:
            return None
        node = graph.node(edges[0].src)


def output_names(graph: Graph) -> list[str]:
    """One unique name per graph output: the layer producing it (``<layer>_<k>`` for its output k > 0).

    A name is never an input's: a file names each tensor once, so an input that is also an
    output (``x -> quantize -> output``) has its output called ``x_1``; an output listed
    twice is ``y`` and ``y_1``.
    """
    taken, names = set(graph.inputs), []
    for name, index in graph.outputs:
        base = name if index == 0 else f"{name}_{index}"
        candidate, k = base, 1
        while candidate in taken:
            candidate, k = f"{base}_{k}", k + 1
        names.append(candidate)
        taken.add(candidate)
    return names


def synthetic_batch(graph: Graph, samples: int, seed: int = 0) -> list[np.ndarray] | None:
    """``samples`` inputs drawn uniformly from each input's quantization grid (a float input:
    standard normal), for comparing two forms of the model when no data is given. None when
    an input's shape is not fully known."""
    rng = np.random.default_rng(seed)
    batch = []
    for node in graph.input_nodes():
        shape = node.output_shapes[0] if node.output_shapes else ()
        if not shape or any(d is None for d in shape[1:]):
            return None
        full = (samples, *shape[1:])
        act = node.quant.activation
        if act is not None and act.grid is not None and np.size(act.grid.scale) == 1:
            g = act.grid
            q = rng.integers(g.qmin, g.qmax + 1, size=full)
            batch.append(
                ((q - float(np.asarray(g.zero_point))) * float(np.asarray(g.scale))).astype(np.float32)
            )
        else:
            batch.append(rng.standard_normal(full).astype(np.float32))
    return batch


def input_grid(graph: Graph, node: Node) -> QuantGrid | None:
    """The grid of a node's first input, found through nodes that only move values."""
    edges = graph.in_edges(node.name)
    while edges:
        src = graph.node(edges[0].src)
        act = src.quant.activation
        if act is not None and act.grid is not None:
            return act.grid
        if src.kind not in VALUE_PRESERVING:
            return None
        edges = graph.in_edges(src.name)
    return None


def _bias_grid(graph: Graph, node: Node, size: int) -> tuple[np.ndarray, float | None] | None:
    """The int32 grid an integer kernel adds the node's bias on (``s_input * s_weight`` per
    channel), and the step of the node's output grid; None when the node has no such grid."""
    kernel = node.quant.weights.get("kernel")
    s_in = input_grid(graph, node)
    if kernel is None or kernel.grid is None or s_in is None or np.size(s_in.scale) != 1:
        return None
    scale = float(np.asarray(s_in.scale)) * np.asarray(kernel.grid.scale, dtype=np.float64).ravel()
    if scale.size not in (1, size):
        return None
    out = node.quant.activation
    if out is None and node.quant.fused_into is not None:
        out = graph.node(node.quant.fused_into).quant.activation
    step = float(np.asarray(out.grid.scale)) if out is not None and out.grid is not None else None
    return np.broadcast_to(scale, (size,)), step


def integer_biases(
    graph: Graph, weights: Mapping[str, Mapping[str, np.ndarray]]
) -> dict[str, dict[str, np.ndarray]]:
    """``weights`` (the quantized model's, `core.quantizers.QuantizedWeights`) with each bias
    rounded as an integer runtime adds it: ``b -> round(b / (s_in * s_w)) * s_in * s_w``."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for name in weights:
        node, values = graph.node(name), dict(weights[name])
        bias = values.get("bias", node.weights.get("bias"))
        if bias is not None and np.ndim(bias) == 1:
            grid = _bias_grid(graph, node, np.size(bias))
            if grid is not None:
                scale = grid[0]
                values["bias"] = (np.round(np.asarray(bias, np.float64) / scale) * scale).astype(
                    np.asarray(bias).dtype
                )
        out[name] = values
    return out


def bias_rounding_steps(graph: Graph, weights: Mapping[str, Mapping[str, np.ndarray]]) -> float:
    """The largest change `integer_biases` makes to a bias, in steps of its layer's output grid
    (at most half of ``s_in * s_w / s_out``)."""
    worst = 0.0
    rounded = integer_biases(graph, weights)
    for name, values in rounded.items():
        node = graph.node(name)
        before = weights[name].get("bias", node.weights.get("bias"))
        grid = _bias_grid(graph, node, np.size(before)) if before is not None else None
        if grid is None or grid[1] is None:
            continue
        change = np.abs(np.asarray(values["bias"], np.float64) - np.asarray(before, np.float64))
        worst = max(worst, float(change.max()) / grid[1])
    return worst
