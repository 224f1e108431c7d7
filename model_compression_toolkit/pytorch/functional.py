"""Functional forms of weighted layers: ``F.linear(x, self.weight, self.bias)``.

torch.fx records a module's parameters used in a function call as ``get_attr`` nodes
(timm's norm-act layers call ``F.batch_norm``; torch.export turns every ``nn.Linear``
into ``aten.linear``). The reader moves those parameters into the node's weights, so
that the core quantizes and folds them as it does a module's::

    get_attr(fc.weight) -> F.linear(x, ., .)  <- get_attr(fc.bias)
        becomes   x -> F.linear[kernel, bias](x, None, None)

and the builder puts each weight back in its slot (`Slots`), quantized or not, with a
bias that folding or bias correction added where the call had None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Slots:
    """Where a function takes each weight: (position, keyword) by neutral weight name,
    and the positions of its epsilon and of its ``training`` flag, if any."""

    weights: dict[str, tuple[int, str]]
    epsilon: tuple[int, str] | None = None
    training: tuple[int, str] | None = None
    groups: tuple[int, str] | None = None
    kernel_axes: tuple[tuple[int, ...], int] = ((0,), 1)  # the kernel's output-channel axes, input axis
    scalars: tuple[tuple[int, str], ...] = ()  # arguments that must be 1 (addmm's beta, alpha)


_LINEAR = Slots({"kernel": (1, "weight"), "bias": (2, "bias")})
_CONV = Slots({"kernel": (1, "weight"), "bias": (2, "bias")}, groups=(6, "groups"))
# transformers' Conv1D (GPT-2): addmm(bias, x, weight) with an (in, out) kernel
_ADDMM = Slots(
    {"kernel": (2, "mat2"), "bias": (0, "input")}, kernel_axes=((1,), 0), scalars=((3, "beta"), (4, "alpha"))
)
_LAYER_NORM = Slots({"gamma": (2, "weight"), "beta": (3, "bias")}, epsilon=(4, "eps"))
_BATCH_NORM = Slots(
    {"mean": (1, "running_mean"), "variance": (2, "running_var"), "gamma": (3, "weight"), "beta": (4, "bias")},
    epsilon=(7, "eps"), training=(5, "training"),
)  # fmt: skip
_ATEN_BATCH_NORM = Slots(
    {"gamma": (1, "weight"), "beta": (2, "bias"), "mean": (3, "running_mean"), "variance": (4, "running_var")},
    epsilon=(7, "eps"), training=(5, "training"),
)  # fmt: skip

_FUNCTIONS: dict[Any, Slots] = {
    F.linear: _LINEAR,
    torch.addmm: _ADDMM,
    **dict.fromkeys((F.conv1d, F.conv2d, F.conv3d), _CONV),
    F.layer_norm: _LAYER_NORM,
    F.batch_norm: _BATCH_NORM,
}
_ATEN: dict[str, Slots] = {
    "linear": _LINEAR,
    "addmm": _ADDMM,
    **dict.fromkeys(("conv1d", "conv2d", "conv3d"), _CONV),
    "layer_norm": _LAYER_NORM,
    "batch_norm": _ATEN_BATCH_NORM,
}


def slots(target: Any) -> Slots | None:
    """The weight slots of a functional weighted op, or None for any other call."""
    if isinstance(target, torch._ops.OpOverload):
        return _ATEN.get(target.overloadpacket.__name__) if target.namespace == "aten" else None
    try:
        return _FUNCTIONS.get(target)
    except TypeError:  # an unhashable callable
        return None


def argument(args: tuple, kwargs: dict, slot: tuple[int, str], default: Any = None) -> Any:
    position, keyword = slot
    if position < len(args):
        return args[position]
    return kwargs.get(keyword, default)


def put(args: list, kwargs: dict, slot: tuple[int, str], value: Any) -> None:
    """Set argument ``slot`` where the call gives it (positionally or by keyword); a slot
    the call leaves out is passed by keyword."""
    position, keyword = slot
    if position < len(args):
        args[position] = value
    else:
        kwargs[keyword] = value
