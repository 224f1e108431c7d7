"""The leaf modules of models converted from ONNX by onnx2torch, as neutral `OpKind`s.

``onnx.load(path) -> onnx2torch.convert -> fx.GraphModule`` calls one module per ONNX node
(``OnnxBinaryMathOperation`` for Add, ``OnnxConcat``, ``OnnxResize``, ...), and those
modules branch on tensor values, so they are read as they are, never traced into
(`pytorch.capture`). Each is looked up here by its class name, from where it is defined::

    call_module OnnxBinaryMathOperation(math_op_function=torch.add)  -> ADD
    call_module OnnxClip(min_val=0, max_val=6)                       -> ACTIVATION relu6
    call_module OnnxShape / OnnxRange / OnnxConstantOfShape          -> SHAPE

The module itself is kept (the built model calls a copy of it), so ONNX's semantics
(integer division, old-style broadcasting) are kept exactly; only its kind comes from
here. Keyed by name, this file imports nothing of onnx2torch: the library does not
depend on it.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from model_compression_toolkit.core.graph import OpKind

Entry = tuple[OpKind, str | None]

_PACKAGE = "onnx2torch."

# Ops that only move, select, repeat or cast values of their input: they pass its grid through.
_MOVING = ("OnnxSplit", "OnnxSplit13", "OnnxGather", "OnnxGatherElements", "OnnxGatherND", "OnnxReshape")
_MOVING += ("OnnxUnsqueezeStaticAxes", "OnnxUnsqueezeDynamicAxes", "OnnxSqueezeStaticAxes")
_MOVING += ("OnnxSqueezeDynamicAxes", "OnnxTranspose", "OnnxExpand", "OnnxSlice", "OnnxSliceV9", "OnnxFlatten")
_MOVING += ("OnnxTile", "OnnxDepthToSpace", "OnnxCast", "OnnxTopK")
# Ops whose output is a shape, indices, a mask or a tensor made from a shape: no activation.
_SHAPES = ("OnnxShape", "OnnxRange", "OnnxConstantOfShape", "OnnxEyeLike", "OnnxNonZero", "OnnxArgExtremum")
_SHAPES += ("OnnxArgExtremumOld", "OnnxCompare", "OnnxLogical", "OnnxNot", "OnnxIsInf", "OnnxIsNaN")
_SHAPES += ("OnnxNonMaxSuppression",)

_BY_CLASS: dict[str, Entry] = {
    **{name: (OpKind.RESHAPE, None) for name in _MOVING},
    **{name: (OpKind.SHAPE, None) for name in _SHAPES},
    "OnnxPadStatic": (OpKind.PAD, None),
    "OnnxPadDynamic": (OpKind.PAD, None),
    "OnnxCopyIdentity": (OpKind.IDENTITY, None),
    "OnnxDropoutDynamic": (OpKind.DROPOUT, None),
    "OnnxConcat": (OpKind.CONCAT, None),
    "OnnxSum": (OpKind.ADD, None),
    "OnnxResize": (OpKind.RESIZE, None),
    "OnnxResizeV10": (OpKind.RESIZE, None),
    "OnnxGlobalAveragePool": (OpKind.POOL, None),
    "OnnxGlobalAveragePoolWithKnownInputShape": (OpKind.POOL, None),
    "OnnxHardSigmoid": (OpKind.ACTIVATION, "hardsigmoid"),  # clip(alpha * x + beta, 0, 1)
    "OnnxPReLU": (OpKind.ACTIVATION, "prelu"),  # its slope is a second input (a constant)
    "OnnxErf": (OpKind.ACTIVATION, "erf"),
    "OnnxSoftmaxV1V11": (OpKind.SOFTMAX, None),
    "OnnxMatMul": (OpKind.MATMUL, None),
    "OnnxEinsum": (OpKind.MATMUL, None),
    **{name: (OpKind.ELEMENTWISE, None) for name in ("OnnxPow", "OnnxSqrt", "OnnxReciprocal", "OnnxNeg")},
    **{name: (OpKind.ELEMENTWISE, None) for name in ("OnnxMinMax", "OnnxMean", "OnnxWhere", "OnnxMod")},
    "OnnxReduceSumStaticAxes": (OpKind.ELEMENTWISE, None),
    "OnnxReduceSumDynamicAxes": (OpKind.ELEMENTWISE, None),
}

# OnnxBinaryMathOperation's ``math_op_function`` by name: the kinds operator.add & co. have.
_MATH = {"add": OpKind.ADD, "sub": OpKind.SUB, "mul": OpKind.MUL, "_onnx_div": OpKind.ELEMENTWISE}
_MATH["div"] = OpKind.ELEMENTWISE
# divisions are ELEMENTWISE named by ``attrs["function"] = "div"``: `core.composites` finds ``t / 6``
_DIVISIONS = frozenset({"div", "_onnx_div"})
# OnnxFunction's ``function`` (torch.exp, torch.tanh, ...): activations by their torch name
_FUNCTIONS = {"sigmoid": "sigmoid", "tanh": "tanh", "relu": "relu", "erf": "erf"}


def entry(module: nn.Module) -> Entry | None:
    """The kind of an onnx2torch module, or None for a module defined elsewhere (or an
    onnx2torch module listed nowhere here: unknown, kept in float)."""
    cls = type(module)
    if not cls.__module__.startswith(_PACKAGE):
        return None
    name = cls.__name__
    if name == "OnnxBinaryMathOperation":
        function = _name(getattr(module, "math_op_function", None))
        kind = _MATH.get(function)
        return None if kind is None else (kind, "div" if function in _DIVISIONS else None)
    if name == "OnnxClip":
        return OpKind.ACTIVATION, clamp_function(getattr(module, "min_val", None), getattr(module, "max_val", None))
    if name == "OnnxReduceStaticAxes":
        operation = getattr(module, "operation_type", "")
        return (OpKind.MEAN, None) if operation == "ReduceMean" else (OpKind.ELEMENTWISE, None)
    if name == "OnnxFunction":
        function = _name(getattr(module, "function", None))
        return (OpKind.ACTIVATION, _FUNCTIONS[function]) if function in _FUNCTIONS else (OpKind.ELEMENTWISE, None)
    return _BY_CLASS.get(name)


def clamp_function(low: Any, high: Any) -> str:
    """The activation a clamp to constant bounds is: ``relu6`` for [0, 6], ``relu`` for
    [0, inf), ``hardtanh`` (a clamp to [min, max]) for any other bounds."""
    low = None if low is None else float(low)
    high = None if high is None else float(high)
    if low == 0 and high == 6:
        return "relu6"
    if low == 0 and high is None:
        return "relu"
    return "hardtanh"


def _name(function: Any) -> str:
    return getattr(function, "__name__", "") if function is not None else ""
