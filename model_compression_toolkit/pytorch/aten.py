"""ATen operators as neutral `OpKind`s: the ops of the graphs torch.export gives.

torch.export records ``torch.ops.aten.linear.default`` where torch.fx records
``F.linear``; both are the same op to the core. An operator is looked up by its overload
packet (``aten.add`` for ``aten.add.Tensor`` and ``aten.add_.Tensor``), so every overload
of a listed op is known. Anything else is OpKind.UNKNOWN, as for torch.fx.
"""

from __future__ import annotations

from typing import Any

import torch

from model_compression_toolkit.core.graph import OpKind

_ACTIVATIONS = ("relu", "relu6", "gelu", "silu", "sigmoid", "tanh", "hardswish", "hardsigmoid", "elu", "mish")
_ACTIVATIONS += ("leaky_relu", "softplus", "hardtanh")
_MOVING = ("view", "_unsafe_view", "reshape", "permute", "transpose", "t", "unsqueeze", "squeeze", "expand")
_MOVING += ("slice", "select", "contiguous", "flatten", "unflatten", "unbind", "split", "split_with_sizes")
_MOVING += ("chunk", "narrow", "alias", "flip", "roll", "repeat", "gather", "index_select", "movedim")
_MOVING += ("constant_pad_nd", "pad", "expand_as", "view_as", "reshape_as", "repeat_interleave")
_MOVING += ("swapaxes", "swapdims", "moveaxis", "tile", "narrow", "take_along_dim", "index_select", "unfold")
_MOVING += ("to", "_to_copy", "type_as", "lift_fresh_copy")  # casts: float to float here (else SHAPE)
_BY_NAME: dict[str, tuple[OpKind, str | None]] = {
    **{name: (OpKind.ACTIVATION, name) for name in _ACTIVATIONS},
    **{name: (OpKind.RESHAPE, None) for name in _MOVING},
    "clone": (OpKind.IDENTITY, None),
    "dropout": (OpKind.DROPOUT, None),
    "softmax": (OpKind.SOFTMAX, None),
    "_softmax": (OpKind.SOFTMAX, None),
    "add": (OpKind.ADD, None),
    "sub": (OpKind.SUB, None),
    "rsub": (OpKind.SUB, None),
    "mul": (OpKind.MUL, None),
    **{name: (OpKind.ELEMENTWISE, None) for name in ("div", "neg", "pow", "sqrt", "rsqrt", "exp", "maximum")},
    "minimum": (OpKind.ELEMENTWISE, None),
    **{name: (OpKind.ELEMENTWISE, None) for name in ("clamp", "clip")},  # constant bounds: `ops.call_entry`
    "prelu": (OpKind.ACTIVATION, "prelu"),
    "_prelu_kernel": (OpKind.ACTIVATION, "prelu"),
    "cat": (OpKind.CONCAT, None),
    "stack": (OpKind.CONCAT, None),
    **{name: (OpKind.MATMUL, None) for name in ("matmul", "bmm", "mm", "einsum")},
    "scaled_dot_product_attention": (OpKind.ATTENTION, None),
    "embedding": (OpKind.EMBEDDING, None),
    "mean": (OpKind.MEAN, None),
    **{
        name: (OpKind.POOL, None)
        for name in ("max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "max_pool1d")
    },
    "avg_pool1d": (OpKind.POOL, None),
    "adaptive_avg_pool1d": (OpKind.POOL, None),
    "upsample_nearest2d": (OpKind.RESIZE, None),
    "upsample_bilinear2d": (OpKind.RESIZE, None),
    "linear": (OpKind.DENSE, None),
    "addmm": (OpKind.DENSE, None),
    **{name: (OpKind.CONV, None) for name in ("conv1d", "conv2d", "conv3d")},
    "layer_norm": (OpKind.LAYER_NORM, None),
    "batch_norm": (OpKind.BATCH_NORM, None),
}


class _AtenKinds:
    """``ATEN_KINDS.get(target)``: the entry of an ATen operator overload, or None."""

    def get(self, target: Any, default: Any = None) -> Any:
        if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten":
            return default
        name = target.overloadpacket.__name__
        if name.endswith("_") and not name.startswith("_"):  # add_ -> add: the built model calls add
            name = name[:-1]
        return _BY_NAME.get(name, default)


ATEN_KINDS = _AtenKinds()


def out_of_place(target: Any) -> Any:
    """``aten.add_.Tensor`` -> ``aten.add.Tensor`` (the same overload of the out-of-place op)."""
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten":
        return target
    name = target.overloadpacket.__name__
    if not name.endswith("_") or name.startswith("_"):
        return target
    packet = getattr(torch.ops.aten, name[:-1], None)
    return getattr(packet, target._overloadname, target) if packet is not None else target
