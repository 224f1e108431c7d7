"""Read in-place ops with their effect: later readers of a mutated tensor read the mutation.

A captured fx graph calls an in-place op on a tensor and may drop its result::

    z = a(x);  relu_ = z.relu_();  b = b(z)        # z.relu_() as a statement

The graph built back calls ``relu`` out of place (its outputs are quantized or returned as
extra outputs, and must not be overwritten), so ``b`` would read ``z`` before the ReLU.
`redirect` makes every later reader of the mutated tensor read the in-place call instead::

    z = a(x);  relu_ = z.relu_();  b = b(relu_)

In-place ops are ``*_`` tensor methods and functions (``relu_``, ``mul_``, ``torch.clamp_``),
calls with ``inplace=True`` (functions and modules), ATen ops whose schema writes an
argument, and ``operator.iadd`` and its kin. When a view of another tensor is mutated
(``x[:, 0].zero_()``) and that other tensor is read later, redirecting cannot say it:
`redirect` raises `AliasedMutation` and the capture goes on to torch.export, whose graph
`functionalize` rewrites into out-of-place ops (``select_scatter``...).
"""

from __future__ import annotations

import inspect
import operator
from typing import Any

import torch
from torch import fx, nn

from model_compression_toolkit.pytorch import ops

_INPLACE_OPERATORS = frozenset(
    {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv}
    | {operator.imod, operator.ipow, operator.iand, operator.ior, operator.ixor}
    | {operator.ilshift, operator.irshift, operator.imatmul}
)

# Calls whose output may share memory with their first argument.
_VIEW_METHODS = frozenset(
    {"view", "view_as", "reshape", "reshape_as", "select", "narrow", "transpose", "permute", "t"}
    | {"expand", "expand_as", "squeeze", "unsqueeze", "flatten", "unflatten", "chunk", "split"}
    | {"unbind", "split_with_sizes", "as_strided", "diagonal", "movedim", "moveaxis", "swapaxes"}
    | {"swapdims", "detach", "contiguous", "to", "float", "type", "type_as", "__getitem__", "unfold"}
    | {"real", "imag", "view_as_real", "view_as_complex"}
)
_VIEW_FUNCTIONS = frozenset(
    {operator.getitem, torch.reshape, torch.flatten, torch.transpose, torch.permute, torch.squeeze}
    | {torch.unsqueeze, torch.select, torch.narrow, torch.chunk, torch.split, torch.unbind, torch.t}
    | {torch.movedim, torch.moveaxis, torch.swapaxes, torch.swapdims, torch.detach, torch.diagonal}
    | {torch.view_as_real, torch.view_as_complex, torch.real, torch.imag}
)
_VIEW_MODULES = (nn.Identity, nn.Flatten, nn.Unflatten, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)


class AliasedMutation(Exception):
    """An in-place op on a view whose base (or another view of it) is read afterwards."""


def _aten(target: Any) -> bool:
    return isinstance(target, torch._ops.OpOverload)


def _trailing_underscore(name: str) -> bool:
    return name.endswith("_") and not name.startswith("_")


def _inplace_flag(target: Any, args: tuple, kwargs: dict) -> bool:
    if kwargs.get("inplace") is True:
        return True
    try:
        bound = inspect.signature(target).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return False
    return bound.arguments.get("inplace") is True


def mutated(n: fx.Node, gm: fx.GraphModule) -> list[fx.Node]:
    """The graph nodes whose tensors ``n`` writes in place (none for an ordinary call)."""
    first = n.args[0] if n.args else next(iter(n.kwargs.values()), None)
    written: list[Any] = []
    if n.op == "call_method" and _trailing_underscore(n.target):
        written = [first]
    elif n.op == "call_module":
        module = _module(gm, n.target)
        if getattr(module, "inplace", None) is True:
            written = [first]
    elif n.op == "call_function" and _aten(n.target):
        schema = n.target._schema
        for i, arg in enumerate(schema.arguments):
            if arg.alias_info is not None and arg.alias_info.is_write:
                written.append(n.args[i] if i < len(n.args) else n.kwargs.get(arg.name))
    elif n.op == "call_function":
        name = getattr(n.target, "__name__", "")
        torch_fn = (getattr(n.target, "__module__", None) or "").startswith("torch")
        if ops.hashable(n.target) and n.target in _INPLACE_OPERATORS:
            written = [first]
        elif (torch_fn and _trailing_underscore(name)) or _inplace_flag(n.target, n.args, n.kwargs):
            written = [first]
    return [w for w in written if isinstance(w, fx.Node)]



def _module(gm: fx.GraphModule, target: str) -> Any:
    try:
        return gm.get_submodule(target)
    except AttributeError:
        return None


def _is_view(n: fx.Node, gm: fx.GraphModule) -> bool:
    """Whether ``n``'s output may share memory with its first argument."""
    if n.op == "call_method":
        return n.target in _VIEW_METHODS
    if n.op == "call_module":
        return isinstance(_module(gm, n.target), _VIEW_MODULES)
    if n.op == "call_function" and _aten(n.target):
        returns = n.target._schema.returns
        return bool(returns) and returns[0].alias_info is not None
    return n.op == "call_function" and ops.hashable(n.target) and n.target in _VIEW_FUNCTIONS


def _base(n: fx.Node, gm: fx.GraphModule, aliases: dict[fx.Node, fx.Node]) -> fx.Node:
    """The tensor whose memory ``n`` shares, following views and in-place calls."""
    seen = set()
    while n not in seen:
        seen.add(n)
        if n in aliases:
            n = aliases[n]
        elif _is_view(n, gm) and n.args and isinstance(n.args[0], fx.Node):
            n = n.args[0]
        else:
            break
    return n


def redirect(gm: fx.GraphModule) -> int:
    """Make the readers after each in-place call read its output instead of the tensor it
    mutated (``prev -> x.relu_() -> next(x)`` becomes ``next(relu_)``).

    Returns:
        How many in-place calls had readers redirected.

    Raises:
        AliasedMutation: a view is mutated while its base or another view of it is read
            after the mutation; nothing in ``gm`` is changed then.
    """
    nodes = list(gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    plan: list[tuple[fx.Node, fx.Node]] = []
    aliases: dict[fx.Node, fx.Node] = {}  # in-place call -> the tensor it writes (as read there)
    latest: dict[fx.Node, fx.Node] = {}  # tensor -> the in-place call its later readers read
    for n in nodes:
        for a in mutated(n, gm):
            while a in latest:  # z.relu_(); z.mul_(3): the second writes the first's result
                a = latest[a]
            _check_aliases(n, a, gm, order, aliases, latest)
            aliases.setdefault(n, a)
            latest[a] = n
            plan.append((n, a))
    changed = set()
    for n, a in plan:
        for user in list(a.users):
            if user is not n and order[user] > order[n]:
                user.replace_input_with(a, n)
                changed.add(n)
    if changed:
        gm.graph.lint()
        gm.recompile()
    return len(changed)


def _check_aliases(
    n: fx.Node, a: fx.Node, gm: fx.GraphModule, order: dict, aliases: dict, latest: dict
) -> None:
    """Raise AliasedMutation when another alias of ``a`` made before ``n`` is read after it."""
    base = _base(a, gm, aliases)
    family, todo = {base}, [base]
    while todo:
        f = todo.pop()
        for user in f.users:
            alias = _is_view(user, gm) or user in aliases
            if alias and user not in family and order[user] < order[n] and user.args and user.args[0] is f:
                family.add(user)
                todo.append(user)
    # ``a`` and the tensors an earlier in-place call wrote: their later readers are redirected
    for f in family - {a} - latest.keys():
        late = [u for u in f.users if u is not n and order[u] > order[n]]
        if late:
            raise AliasedMutation(
                f"{n.name!r} writes {a.name!r} in place, which shares memory with {f.name!r}, read after it by "
                f"{late[0].name!r}"
            )


def mutates(gm: fx.GraphModule) -> bool:
    """Whether any call in ``gm`` writes a tensor in place."""
    return any(mutated(n, gm) for n in gm.graph.nodes)
