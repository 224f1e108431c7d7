"""Which torch modules, functions and tensor methods are which neutral `OpKind`.

A torch.fx node is looked up by what it calls::

    call_module   -> MODULE_KINDS[type(module)]    (exact type: ReLU6 is not a Hardtanh)
    call_function -> FUNCTION_KINDS[target]        (F.relu, torch.cat, operator.add, ...)
    call_method   -> METHOD_KINDS[name]            (x.view, x.relu, x.relu_, ...)

Each entry is ``(kind, function)``; ``function`` names the non-linearity of an
ACTIVATION (``"relu"``, ``"gelu"``) and is None otherwise. Anything not listed is
OpKind.UNKNOWN: kept in float and passed through unchanged. Whatever the table says, a
node whose output holds no tensor (``x.size(0)``, ``x.shape``) is OpKind.SHAPE.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from model_compression_toolkit.core.graph import OpKind

Entry = tuple[OpKind, str | None]

# graph.meta keys of a PyTorch graph, set by the reader and read by the builder
OUTPUTS_META = "pytorch_outputs"
OUT_SPEC_META = "pytorch_out_spec"  # the output's pytree structure (torch.export), or None
CAPTURE_META = "pytorch_capture"  # the path that captured the model ("torch.fx", "torch.export")
DEVICE_META = "pytorch_device"  # the device of the model's weights: built models go there

_ACTIVATION_MODULES: dict[type, str] = {
    nn.ReLU: "relu",
    nn.ReLU6: "relu6",
    nn.LeakyReLU: "leaky_relu",
    nn.SiLU: "silu",
    nn.GELU: "gelu",
    nn.Hardswish: "hardswish",
    nn.Hardsigmoid: "hardsigmoid",
    nn.Sigmoid: "sigmoid",
    nn.Tanh: "tanh",
    nn.ELU: "elu",
    nn.Mish: "mish",
    nn.Softplus: "softplus",
    nn.Hardtanh: "hardtanh",
    nn.PReLU: "prelu",  # its slope is a weight, kept float as Keras's PReLU alpha is
}

MODULE_KINDS: dict[type, Entry] = {
    **{cls: (OpKind.CONV, None) for cls in (nn.Conv1d, nn.Conv2d, nn.Conv3d)},
    **{
        cls: (OpKind.CONV_TRANSPOSE, None)
        for cls in (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
    },
    nn.Linear: (OpKind.DENSE, None),
    **{cls: (OpKind.BATCH_NORM, None) for cls in (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)},
    nn.LayerNorm: (OpKind.LAYER_NORM, None),
    **{cls: (OpKind.ACTIVATION, fn) for cls, fn in _ACTIVATION_MODULES.items()},
    nn.Softmax: (OpKind.SOFTMAX, None),
    **{
        cls: (OpKind.POOL, None)
        for cls in (nn.MaxPool1d, nn.MaxPool2d, nn.AvgPool1d, nn.AvgPool2d)
        + (nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d)
    },
    **{cls: (OpKind.DROPOUT, None) for cls in (nn.Dropout, nn.Dropout1d, nn.Dropout2d)},
    nn.Identity: (OpKind.IDENTITY, None),
    nn.Flatten: (OpKind.RESHAPE, None),
    nn.Unflatten: (OpKind.RESHAPE, None),
    nn.ZeroPad1d: (OpKind.PAD, None),
    nn.ZeroPad2d: (OpKind.PAD, None),
    nn.Upsample: (OpKind.RESIZE, None),
    nn.Embedding: (OpKind.EMBEDDING, None),
}

_ACTIVATION_FUNCTIONS: dict[Any, str] = {
    **dict.fromkeys((F.relu, torch.relu, F.relu_, torch.relu_), "relu"),
    **dict.fromkeys((torch.sigmoid, F.sigmoid), "sigmoid"),
    **dict.fromkeys((torch.tanh, F.tanh), "tanh"),
    **{fn: fn.__name__ for fn in (F.relu6, F.leaky_relu, F.silu, F.gelu, F.hardswish, F.hardsigmoid)},
    **{fn: fn.__name__ for fn in (F.elu, F.mish, F.softplus, F.hardtanh)},
    **dict.fromkeys((F.prelu, torch.prelu), "prelu"),
}
# torch.clamp(x, 0, 6) is ReLU6 as ONNX writes it (Clip): an activation when its bounds are
# constants (`call_entry`), an elementwise min/max when they are tensors.
CLAMP_FUNCTIONS = frozenset({torch.clamp, torch.clip, torch.clamp_, torch.clip_})
CLAMP_METHODS = frozenset({"clamp", "clip"})

# Ops that only move, select or repeat values of their input (or add zeros): the output
# keeps the input's grid, so they pass quantization through.
_MOVING_FUNCTIONS = (torch.flatten, torch.reshape, torch.permute, torch.transpose, torch.squeeze)
_MOVING_FUNCTIONS += (torch.unsqueeze, operator.getitem, torch.chunk, torch.split, torch.unbind, torch.narrow)
_MOVING_FUNCTIONS += (torch.swapaxes, torch.swapdims, torch.movedim, torch.moveaxis, torch.flip, torch.roll)
_MOVING_FUNCTIONS += (torch.select, torch.t, torch.tile, torch.repeat_interleave, torch.gather)
_MOVING_FUNCTIONS += (torch.index_select, torch.take_along_dim)
_MOVING_METHODS = ("flatten", "view", "reshape", "permute", "transpose", "contiguous", "squeeze", "unsqueeze")
_MOVING_METHODS += ("expand", "expand_as", "chunk", "split", "unbind", "reshape_as", "view_as", "swapaxes")
_MOVING_METHODS += ("swapdims", "movedim", "moveaxis", "narrow", "select", "flip", "roll", "repeat", "tile")
_MOVING_METHODS += ("repeat_interleave", "t", "unflatten", "gather", "index_select", "__getitem__")
_MOVING_METHODS += ("to", "type", "type_as", "float")  # casts: float to float here (to integers: SHAPE)

FUNCTION_KINDS: dict[Any, Entry] = {
    **{fn: (OpKind.ACTIVATION, name) for fn, name in _ACTIVATION_FUNCTIONS.items()},
    F.softmax: (OpKind.SOFTMAX, None),
    torch.softmax: (OpKind.SOFTMAX, None),
    **{
        fn: (OpKind.POOL, None)
        for fn in (F.max_pool1d, F.max_pool2d, F.avg_pool1d, F.avg_pool2d, torch.max_pool1d, torch.max_pool2d)
        + (F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_max_pool1d, F.adaptive_max_pool2d)
    },
    F.dropout: (OpKind.DROPOUT, None),
    F.interpolate: (OpKind.RESIZE, None),
    F.pad: (OpKind.PAD, None),
    **{fn: (OpKind.RESHAPE, None) for fn in _MOVING_FUNCTIONS},
    **{fn: (OpKind.ADD, None) for fn in (operator.add, torch.add)},
    **{fn: (OpKind.SUB, None) for fn in (operator.sub, torch.sub, torch.subtract)},
    **{fn: (OpKind.MUL, None) for fn in (operator.mul, torch.mul, torch.multiply)},
    **{fn: (OpKind.ELEMENTWISE, None) for fn in (operator.truediv, torch.div, torch.true_divide, operator.neg)},
    **{fn: (OpKind.ELEMENTWISE, None) for fn in (torch.neg, torch.sqrt, torch.rsqrt, torch.exp, torch.pow)},
    **{fn: (OpKind.CONCAT, None) for fn in (torch.cat, torch.concat, torch.concatenate, torch.stack)},
    **{fn: (OpKind.ELEMENTWISE, None) for fn in (torch.maximum, torch.minimum)},
    **{fn: (OpKind.ELEMENTWISE, None) for fn in CLAMP_FUNCTIONS},
    **{fn: (OpKind.MATMUL, None) for fn in (torch.matmul, operator.matmul, torch.bmm, torch.einsum)},
    F.scaled_dot_product_attention: (OpKind.ATTENTION, None),
    F.embedding: (OpKind.EMBEDDING, None),
    torch.mean: (OpKind.MEAN, None),
    # functional forms of weighted layers (their weights: `pytorch.functional`)
    F.linear: (OpKind.DENSE, None),
    torch.addmm: (OpKind.DENSE, None),
    **{fn: (OpKind.CONV, None) for fn in (F.conv1d, F.conv2d, F.conv3d)},
    F.layer_norm: (OpKind.LAYER_NORM, None),
    F.batch_norm: (OpKind.BATCH_NORM, None),
}

# Functions found by where they are defined, for libraries this package does not import:
# stochastic depth is the identity in eval mode (torchvision marks it a leaf for torch.fx).
NAMED_FUNCTION_KINDS: dict[tuple[str, str], Entry] = {
    ("torchvision.ops.stochastic_depth", "stochastic_depth"): (OpKind.DROPOUT, None),
    ("timm.layers.drop", "drop_path"): (OpKind.DROPOUT, None),
}

METHOD_KINDS: dict[str, Entry] = {
    **{name: (OpKind.ACTIVATION, name) for name in ("relu", "sigmoid", "tanh")},
    "softmax": (OpKind.SOFTMAX, None),
    **{name: (OpKind.RESHAPE, None) for name in _MOVING_METHODS},
    **{name: (OpKind.IDENTITY, None) for name in ("clone", "detach")},
    "add": (OpKind.ADD, None),
    "sub": (OpKind.SUB, None),
    "mul": (OpKind.MUL, None),
    **{name: (OpKind.ELEMENTWISE, None) for name in ("div", "neg", "sqrt", "rsqrt", "exp", "pow")},
    **{name: (OpKind.ELEMENTWISE, None) for name in CLAMP_METHODS},
    **{name: (OpKind.MATMUL, None) for name in ("matmul", "bmm")},
    "mean": (OpKind.MEAN, None),
    "size": (OpKind.SHAPE, None),
    "dim": (OpKind.SHAPE, None),
}

# In-place forms the built model calls out of place, so that a tensor it returns as an
# extra output, or quantizes, is not overwritten by a later op.
OUT_OF_PLACE_FUNCTIONS: dict[Any, Any] = {F.relu_: F.relu, torch.relu_: torch.relu}


def out_of_place_method(name: str) -> str:
    """``relu_`` -> ``relu`` when the tensor has the out-of-place method, else ``name``."""
    if name.endswith("_") and not name.startswith("_") and hasattr(torch.Tensor, name[:-1]):
        return name[:-1]
    return name


def module_entry(module: nn.Module) -> Entry:
    """The entry of a module: by its exact type, else, for a module of a model converted
    from ONNX, by its onnx2torch class (`pytorch.converted`)."""
    from model_compression_toolkit.pytorch import converted

    return MODULE_KINDS.get(type(module)) or converted.entry(module) or (OpKind.UNKNOWN, None)


def is_clamp(op: str, target: Any) -> bool:
    """Whether an fx node calls ``torch.clamp``/``clip`` (a function, a method or ATen's)."""
    if op == "call_method":
        return out_of_place_method(target) in CLAMP_METHODS
    if isinstance(target, torch._ops.OpOverload):
        return target.namespace == "aten" and target.overloadpacket.__name__.rstrip("_") in CLAMP_METHODS
    try:
        return op == "call_function" and target in CLAMP_FUNCTIONS
    except TypeError:  # an unhashable callable
        return False


def call_entry(entry: Entry, clamp: bool, args: tuple, kwargs: dict) -> Entry:
    """A clamp's entry refined by its arguments (templates: an input is a `Ref`): with
    constant bounds it is the activation `converted.clamp_function` names."""
    if not clamp:
        return entry
    from model_compression_toolkit.pytorch import converted

    low = args[1] if len(args) > 1 else kwargs.get("min")
    high = args[2] if len(args) > 2 else kwargs.get("max")
    if isinstance(low, Ref) or isinstance(high, Ref) or (low is None and high is None):
        return entry
    return OpKind.ACTIVATION, converted.clamp_function(low, high)


def function_entry(target: Any) -> Entry:
    """The entry of a function fx calls: a torch function, an ATen operator (the graphs
    torch.export gives, `pytorch.aten`), or a library function known by name."""
    from model_compression_toolkit.pytorch.aten import ATEN_KINDS

    try:
        entry = FUNCTION_KINDS.get(target) or ATEN_KINDS.get(target)
    except TypeError:  # an unhashable callable
        return OpKind.UNKNOWN, None
    if entry is None:
        key = (getattr(target, "__module__", None) or "", getattr(target, "__qualname__", None) or "")
        entry = NAMED_FUNCTION_KINDS.get(key, (OpKind.UNKNOWN, None))
    return entry


def method_entry(name: str) -> Entry:
    return METHOD_KINDS.get(out_of_place_method(name), (OpKind.UNKNOWN, None))


# Kernel of each weighted module kind, by neutral name -> torch attribute.
WEIGHT_NAMES: dict[OpKind, dict[str, str]] = {
    OpKind.CONV: {"kernel": "weight", "bias": "bias"},
    OpKind.CONV_TRANSPOSE: {"kernel": "weight", "bias": "bias"},
    OpKind.DENSE: {"kernel": "weight", "bias": "bias"},
    OpKind.BATCH_NORM: {"gamma": "weight", "beta": "bias", "mean": "running_mean", "variance": "running_var"},
    OpKind.LAYER_NORM: {"gamma": "weight", "beta": "bias"},
}


# ------------------------------------------------------------ templates and conversions
@dataclass(frozen=True)
class Ref:
    """In an args template: the node's input ``index`` (in the output template: graph output)."""

    index: int


def hashable(value: Any) -> bool:
    """Whether ``value`` can be looked up in the tables here (a partial or a list cannot)."""
    try:
        hash(value)
    except TypeError:
        return False
    return True


def map_structure(value: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to every leaf of nested tuples, lists, dicts and slices."""
    if isinstance(value, tuple):
        items = [map_structure(v, fn) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [map_structure(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: map_structure(v, fn) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(*(map_structure(v, fn) for v in (value.start, value.stop, value.step)))
    return fn(value)


def leaves(value: Any) -> list[Any]:
    """The leaves of nested tuples, lists and dicts, in order (None left out): a model's
    outputs, however it nests them."""
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in leaves(v)]
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in leaves(v)]
    return [] if value is None else [value]


def as_tensor(value: Any, device: torch.device | str = "cpu") -> torch.Tensor:
    """numpy / array-like -> tensor: floating values as float32, integers and bools kept."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    tensor = torch.from_numpy(np.ascontiguousarray(np.asarray(value)))
    if tensor.is_floating_point() and tensor.dtype != torch.float32:
        tensor = tensor.float()
    return tensor.to(device)


def to_numpy(value: Any) -> np.ndarray:
    """A tensor as a numpy array (no copy for a CPU tensor); anything else through np.asarray."""
    if not isinstance(value, torch.Tensor):
        return np.asarray(value)
    value = value.detach().cpu()
    if value.dtype in (torch.bfloat16, torch.float16):
        value = value.float()
    return value.numpy()


# ------------------------------------------------------------ attributes shown in TensorBoard
_SKIP = object()


def plain(value: Any) -> Any:
    """``value`` as ints, floats, strings, bools and tuples of those, or _SKIP."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (tuple, list)):
        items = tuple(plain(v) for v in value)
        return _SKIP if any(v is _SKIP for v in items) else items
    if isinstance(value, (torch.dtype, torch.device, slice)) or value is Ellipsis:
        return str(value)
    return _SKIP


def module_attrs(module: nn.Module) -> dict[str, Any]:
    """The module's public hyper-parameters (``in_channels``, ``kernel_size``, ``eps``...)."""
    attrs = {}
    for key, value in vars(module).items():
        if key.startswith("_") or key == "training":
            continue
        value = plain(value)
        if value is not _SKIP:
            attrs[key] = value
    return attrs


def function_attrs(target: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The constant arguments of a call, by parameter name when the signature is known.

    ``args``/``kwargs`` are templates: an argument holding a `Ref` is an input, not shown.
    """
    named: dict[str, Any]
    try:
        bound = inspect.signature(target).bind(*args, **kwargs)
        bound.apply_defaults()
        named = dict(bound.arguments)
    except (TypeError, ValueError):  # C functions and methods have no signature
        named = {f"arg{i}": a for i, a in enumerate(args)} | dict(kwargs)
    attrs = {}
    for key, value in named.items():
        has_ref = False

        def check(leaf: Any) -> Any:
            nonlocal has_ref
            has_ref = has_ref or isinstance(leaf, Ref)
            return leaf

        map_structure(value, check)
        value = _SKIP if has_ref or key.startswith("_") else plain(value)
        if value is not _SKIP:
            attrs[key] = value
    return attrs
