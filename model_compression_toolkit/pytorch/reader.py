"""Read a ``torch.nn.Module`` into the neutral `Graph` with torch.fx.

``user model -> deepcopy().eval() [.float()] -> fx.symbolic_trace -> run on the sample (shapes) -> Graph``

The private copy is float32 (a float16, bfloat16 or float64 model is read, calibrated and
quantized in float32, and a warning says so) and has none of the user's hooks: the
quantized model cannot call them, so a forward hook or pre-hook that changes the model's
output on the sample is refused by name (`ModelReadError`), and one that only observes is
named in a warning. A model on the ``meta`` device has no weights to read and is refused.

A ``forward`` argument the representative data does not give, whose default is None, a
bool or a string (``mask=None``, ``return_features=False``, ``mode="eval"``), is traced
as that default: tracing cannot branch on it. The read then warns that the quantized
model takes only the given inputs. Numbers stay inputs with their default.

One graph node per fx node: placeholders are the inputs, the fx ``output`` node becomes
``graph.outputs`` (its nesting kept in ``graph.meta["pytorch_outputs"]``). A node's inputs
are the fx nodes in its args/kwargs, flattened in order; ``node.payload`` keeps what the
builder needs to call the same thing again, with each input replaced by a `Ref`.
"""

from __future__ import annotations

import copy
import inspect
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import fx, nn

from model_compression_toolkit.core.backend import unsupported_warnings
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.errors import InputMismatchError, ModelReadError
from model_compression_toolkit.pytorch import ops
from model_compression_toolkit.pytorch.model_checks import check_hooks, check_not_meta, in_float32
from model_compression_toolkit.pytorch.ops import Ref, as_tensor, map_structure

OUTPUTS_META = "pytorch_outputs"
_HOOK_DICTS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called") + (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_backward_hooks",
    "_backward_pre_hooks",
)


def read(model: nn.Module, sample_inputs: Sequence[np.ndarray]) -> tuple[Graph, list[str]]:
    """Read ``model`` into a Graph; the user's model is left as it was.

    Returns:
        The validated graph and one warning per op kept in float because it is unknown.
    """
    if not isinstance(model, nn.Module):
        raise ModelReadError(f"expected a torch.nn.Module; got {type(model).__name__}")
    check_not_meta(model)
    fixed = _fixed_defaults(model, len(sample_inputs))
    work, notes = _private_copy(model, sample_inputs)  # float32, without hooks
    gm = _trace(work, fixed)
    shapes, dtypes = _propagate(gm, sample_inputs, type(model).__name__)
    graph = _to_graph(gm, shapes, dtypes, type(model).__name__)
    graph.validate()
    warnings = notes + unsupported_warnings(graph)
    if fixed:
        given = ", ".join(graph.inputs)
        warnings.append(
            f"{type(model).__name__}.forward was read with "
            f"{', '.join(f'{name}={default!r}' for _, name, default in fixed)}: the representative data does not "
            f"give {'this argument' if len(fixed) == 1 else 'these arguments'}, so the model is read "
            f"with the default{'' if len(fixed) == 1 else 's'} and the quantized model's forward takes "
            f"({given}). Yield every argument from the representative data to keep it an input."
        )
    return graph, warnings


def _fixed_defaults(model: nn.Module, given: int) -> list[tuple[int, str, Any]]:
    """(position in the signature, name, default) of each ``forward`` argument after the
    ``given`` ones whose default is None, a bool or a string: the values tracing
    specializes the model to."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):  # no signature to read: trace every argument
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if any(p.kind not in kinds for p in params):  # *args, **kwargs: leave it to the tracer
        return []
    return [
        (i, p.name, p.default)
        for i, p in enumerate(params)
        if i >= given and (p.default is None or isinstance(p.default, (bool, str)))
    ]


def _private_copy(model: nn.Module, sample_inputs: Sequence[Any]) -> tuple[nn.Module, list[str]]:
    """A float32 copy in eval mode without the user's hooks, so running it never calls them,
    and the warnings that say what differs from the user's model."""
    try:
        work = copy.deepcopy(model).eval()
    except Exception as e:
        raise ModelReadError(
            f"expected a model that copy.deepcopy can copy; deepcopy of {type(model).__name__} failed "
            f"with {type(e).__name__}: {e}. Make its attributes copyable (no open files or locks)."
        ) from e
    notes = [note for note in (in_float32(work), check_hooks(work, sample_inputs)) if note]
    for module in work.modules():
        for attr in _HOOK_DICTS:  # no public API removes hooks one does not hold handles of
            hooks_of = getattr(module, attr, None)
            if isinstance(hooks_of, dict):
                hooks_of.clear()
    return work, notes


def _trace(model: nn.Module, fixed: list[tuple[int, str, Any]]) -> fx.GraphModule:
    """``model`` traced, the ``fixed`` arguments (`_fixed_defaults`) as their defaults."""
    try:
        gm = fx.symbolic_trace(model, concrete_args={name: default for _, name, default in fixed} or None)
    except Exception as e:
        raise ModelReadError(
            f"torch.fx could not trace {type(model).__name__}: {type(e).__name__}: {e}. Expected a "
            "forward whose control flow does not depend on tensor values: make it static, or wrap "
            "that part in a leaf module (a torch.fx.Tracer with is_leaf_module)."
        ) from e
    if fixed:
        _drop_specialization_checks(gm, [position for position, _, _ in fixed])
    return gm


def _drop_specialization_checks(gm: fx.GraphModule, fixed: list[int]) -> None:
    """Remove what tracing with ``concrete_args`` adds: a check that each fixed argument
    still has its value, and the placeholders of the fixed arguments (positions ``fixed``
    in ``forward``'s signature), which nothing else uses."""
    graph = gm.graph
    for node in reversed(list(graph.nodes)):
        if node.op == "call_function" and _is_specialization_check(node):
            inputs = node.all_input_nodes
            graph.erase_node(node)
            for x in inputs:  # the ``arg == value`` a bool or string check compares
                if not x.users and x.op == "call_function" and x.target is operator.eq:
                    graph.erase_node(x)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for i in fixed:
        if i < len(placeholders) and not placeholders[i].users:
            graph.erase_node(placeholders[i])
    graph.lint()
    gm.recompile()


def _is_specialization_check(node: fx.Node) -> bool:
    check = node.target is torch._assert or getattr(node.target, "__name__", "") == "_assert_is_none"
    return check and any(isinstance(a, str) and "has been specialized" in a for a in node.args)


class _Shapes(fx.Interpreter):
    """Runs the traced model on a sample node by node, recording the shapes of the tensors
    each node returns and each input's dtype, and the node it is running, to say where
    the model failed. (torch.fx's ShapeProp records the same, but its first run imports
    the symbolic-shapes machinery and sympy: half a second of every first PTQ call.)"""

    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__(gm)
        self.current: fx.Node | None = None
        self.shapes: dict[str, list[tuple]] = {}
        self.dtypes: dict[str, str] = {}

    def run_node(self, n: fx.Node) -> Any:
        self.current = n
        result = super().run_node(n)
        self.shapes[n.name] = _tensor_shapes(result)
        if n.op == "placeholder":  # "non-tensor" for an argument such as forward(x, k=2)
            tensor = isinstance(result, torch.Tensor)
            self.dtypes[n.name] = str(result.dtype).removeprefix("torch.") if tensor else "non-tensor"
        return result


def _run_shapes(gm: fx.GraphModule, inputs: list[torch.Tensor]) -> _Shapes:
    """A run on ``inputs``: each fx node's tensor shapes (several for a tuple output, none
    for a non-tensor) and each input's dtype; a failure as a RuntimeError naming the node."""
    run = _Shapes(gm)
    try:
        with torch.no_grad():
            run.run(*inputs)
    except Exception as e:
        cause = e.__cause__ or e
        at = run.current
        where = "" if at is None else f" at {at.target if at.op == 'call_module' else at.name!r}"
        raise RuntimeError(f"{type(cause).__name__}{where}: {cause}") from cause
    return run


def _tensor_shapes(value: Any) -> list[tuple]:
    if isinstance(value, torch.Tensor):
        return [tuple(int(d) for d in value.shape)]
    if isinstance(value, (tuple, list)):
        return [s for v in value for s in _tensor_shapes(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _tensor_shapes(v)]
    return []


def _propagate(
    gm: fx.GraphModule, sample: Sequence[Any], model_name: str
) -> tuple[dict[str, list[tuple]], dict[str, str]]:
    """Shapes on the sample, with None on the dims that change with the batch size, and
    the inputs' dtypes."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    required = [n for n in placeholders if not n.args]
    given = [tuple(np.shape(x)) for x in sample]
    expected = f"{model_name}.forward({', '.join(n.target for n in placeholders)})"
    if not len(required) <= len(given) <= len(placeholders):
        count = f"{len(required)} to {len(placeholders)}" if placeholders != required else len(required)
        raise InputMismatchError(
            f"expected {count} inputs for {expected}; got {len(given)} "
            f"of shapes {given}. Yield one array per model input from the representative data."
        )
    device = next((t.device for t in (*gm.parameters(), *gm.buffers())), torch.device("cpu"))
    inputs = [as_tensor(x, device) for x in sample]
    try:
        real = _run_shapes(gm, inputs)
    except RuntimeError as e:
        _check_dtypes(gm, inputs, placeholders, model_name, e)
        raise InputMismatchError(
            f"expected inputs that {expected} can run on; got inputs of shapes {given}, on which "
            f"torch failed with {e}. Check the shapes the representative data yields."
        ) from e
    batch = next((t.shape[0] for t in inputs if t.dim() > 0), None)
    if batch is None:
        return real.shapes, real.dtypes
    alt_inputs = [
        (t[:1] if batch > 1 else torch.cat([t, t])) if t.dim() > 0 and t.shape[0] == batch else t
        for t in inputs
    ]
    try:
        alt = _run_shapes(gm, alt_inputs).shapes
    except RuntimeError:  # a model fixed to one batch size: assume dim 0 is the batch
        alt = None
    shapes = {name: _batch_none(shapes, alt and alt.get(name), batch) for name, shapes in real.shapes.items()}
    return shapes, real.dtypes


def _check_dtypes(
    gm: fx.GraphModule, inputs: list[torch.Tensor], placeholders: list[fx.Node], model_name: str, error: Exception
) -> None:
    """Raise the InputMismatchError that names the dtype when integer or bool inputs are why
    the model failed: it runs once they are float32."""
    exact = [i for i, t in enumerate(inputs) if not (t.is_floating_point() or t.is_complex())]
    if not exact:
        return
    try:
        _run_shapes(gm, [t.float() if i in exact else t for i, t in enumerate(inputs)])
    except RuntimeError:
        return  # not (only) the dtype: the shapes message says what torch said
    held = "; ".join(
        f"input {placeholders[i].name!r} holds {str(inputs[i].dtype).removeprefix('torch.')} values" for i in exact
    )
    raise InputMismatchError(
        f"expected float inputs where {model_name} computes in float; {held}, on which torch failed with "
        f"{error}, and the model runs once they are float32. Yield float arrays from the representative "
        "data: x.astype(np.float32) (a tensor: x.float())."
    ) from error


def _batch_none(shapes: list[tuple], alt: list[tuple] | None, batch: int) -> list[tuple]:
    if alt is None or len(alt) != len(shapes):
        return [(None, *s[1:]) if s and s[0] == batch else s for s in shapes]
    return [
        tuple(None if a != b else a for a, b in zip(s, o)) if len(s) == len(o) else s
        for s, o in zip(shapes, alt)
    ]


def _node_names(gm: fx.GraphModule) -> dict[str, str]:
    """fx node name -> graph node name: inputs keep theirs, a module's first call its path."""
    names: dict[str, str] = {}
    nodes = [n for n in gm.graph.nodes if n.op != "output"]
    for n in nodes:
        if n.op == "placeholder":
            names[n.name] = n.name
    used = set(names.values())
    for n in nodes:
        if n.op == "call_module" and n.target not in used:
            names[n.name] = n.target
            used.add(n.target)
    for n in nodes:
        if n.name not in names:
            name, k = n.name, 1
            while name in used:
                name, k = f"{n.name}_{k}", k + 1
            names[n.name] = name
            used.add(name)
    return names


def _to_graph(gm: fx.GraphModule, shapes: dict[str, list[tuple]], dtypes: dict[str, str], name: str) -> Graph:
    graph = Graph(name, "pytorch")
    names = _node_names(gm)
    modules = dict(gm.named_modules())
    for n in gm.graph.nodes:
        inputs: list[fx.Node] = []

        def to_ref(leaf: Any, inputs: list[fx.Node] = inputs) -> Any:
            if isinstance(leaf, fx.Node):
                inputs.append(leaf)
                return Ref(len(inputs) - 1)
            return leaf

        args, kwargs = map_structure((tuple(n.args), dict(n.kwargs)), to_ref)
        if n.op == "output":
            graph.meta[OUTPUTS_META] = args[0]
            graph.outputs = [(names[x.name], 0) for x in inputs]
            continue
        node = _make_node(n, names[n.name], args, kwargs, modules, gm)
        node.output_shapes = shapes.get(n.name) or [()]
        if node.kind == OpKind.CONSTANT:
            node.output_shapes = [tuple(node.weights["value"].shape)]
        elif n.op != "placeholder" and not shapes.get(n.name):
            node.kind = OpKind.SHAPE  # x.size(0), x.shape: not a tensor
        node.input_shapes = [_first_shape(graph.node(names[x.name])) for x in inputs]
        tensor = len(node.output_shapes) == 1 and len(shapes.get(n.name) or []) == 1
        if node.kind in (OpKind.DENSE, OpKind.LAYER_NORM) and tensor:
            node.channel_axis = -1
        elif tensor and len(node.output_shapes[0]) >= 2:
            node.channel_axis = 1
        graph.add_node(node)
        for i, x in enumerate(inputs):
            graph.add_edge(names[x.name], node.name, 0, i)
        if n.op == "placeholder":
            node.attrs["dtype"] = dtypes.get(n.name, "non-tensor")
            graph.inputs.append(node.name)
    _last_axis_channels(graph)
    return graph


# Ops whose output keeps its first input's layout, hence its channel axis.
_SAME_LAYOUT = frozenset(
    {OpKind.ACTIVATION, OpKind.SOFTMAX, OpKind.ADD, OpKind.SUB, OpKind.MUL, OpKind.ELEMENTWISE}
    | {OpKind.DROPOUT, OpKind.IDENTITY}
)
_LAST_AXIS = frozenset({OpKind.DENSE, OpKind.LAYER_NORM})  # read their channels on the last axis


def _last_axis_channels(graph: Graph) -> None:
    """Channels on the last axis where a Linear or LayerNorm says so, beyond the layer itself.

    ``(N, L, F) -> Linear -> GELU -> Linear``: the GELU's output and the input of each
    Linear have their channels (features) last, not on axis 1 (the sequence, whose length
    may change from batch to batch). An input read only by such layers, and an op that
    keeps its first input's layout, take channel axis -1; everything else keeps axis 1.
    """
    for node in graph.nodes():  # insertion order is the fx order: producers first
        shape = node.output_shapes[0] if len(node.output_shapes) == 1 else ()
        if node.channel_axis != 1 or len(shape) < 3:
            continue
        if node.kind == OpKind.INPUT:
            users = [graph.node(e.dst) for e in graph.out_edges(node.name)]
            if users and all(u.kind in _LAST_AXIS and e.dst_index == 0 for u, e in zip(users, graph.out_edges(node.name))):
                node.channel_axis = -1
        elif node.kind in _SAME_LAYOUT:
            first = [e for e in graph.in_edges(node.name) if e.dst_index == 0]
            src = graph.node(first[0].src) if first else None
            if src is not None and src.channel_axis == -1 and len(src.output_shapes[0]) == len(shape):
                node.channel_axis = -1


def _first_shape(node: Node) -> tuple:
    return node.output_shapes[0] if len(node.output_shapes) == 1 else ()


def _make_node(
    n: fx.Node, name: str, args: tuple, kwargs: dict, modules: dict[str, nn.Module], gm: fx.GraphModule
) -> Node:
    payload = {"op": n.op, "target": n.target, "args": args, "kwargs": kwargs}
    if n.op == "placeholder":
        return Node(name, OpKind.INPUT, "input", payload=payload)
    if n.op == "get_attr":
        value = gm
        for part in n.target.split("."):
            value = getattr(value, part)
        if isinstance(value, torch.Tensor):
            return Node(name, OpKind.CONSTANT, "get_attr", weights={"value": _np(value)}, payload=payload)
        payload["value"] = value
        return Node(name, OpKind.UNKNOWN, "get_attr", payload=payload)
    if n.op == "call_module":
        return _module_node(name, modules[n.target], payload)
    if n.op == "call_function":
        kind, function = ops.function_entry(n.target)
        layer_type = getattr(n.target, "__name__", str(n.target))
    else:
        kind, function = ops.method_entry(n.target)
        layer_type = n.target
    target = getattr(torch.Tensor, n.target, None) if n.op == "call_method" else n.target
    attrs = ops.function_attrs(target, args, kwargs)
    if function is not None:
        attrs["function"] = function
    return Node(name, kind, layer_type, attrs=attrs, payload=payload)


def _np(t: torch.Tensor) -> np.ndarray:
    return ops.to_numpy(t).copy()


def _module_node(name: str, module: nn.Module, payload: dict) -> Node:
    """``Conv2d(weight, bias)`` -> CONV node with weights kernel, bias and their kernel axes."""
    kind, function = ops.module_entry(module)
    if kind == OpKind.BATCH_NORM and getattr(module, "running_mean", None) is None:
        kind = OpKind.UNKNOWN  # normalises with each batch's statistics: nothing to fold
    payload["module"] = module
    attrs = ops.module_attrs(module)
    if function is not None:
        attrs["function"] = function
    weights: dict[str, np.ndarray] = {}
    kernel_axes: dict[str, tuple[int, ...]] = {}
    kernel_in_axis: dict[str, int] = {}
    if kind in ops.WEIGHT_NAMES:
        for neutral, torch_name in ops.WEIGHT_NAMES[kind].items():
            value = getattr(module, torch_name, None)
            if value is not None:
                weights[neutral] = _np(value)
    else:
        weights = {pname: _np(p) for pname, p in module.named_parameters()}
    if kind == OpKind.BATCH_NORM:
        weights.setdefault("gamma", np.ones(module.num_features, np.float32))
        weights.setdefault("beta", np.zeros(module.num_features, np.float32))
    if kind in (OpKind.BATCH_NORM, OpKind.LAYER_NORM):
        attrs["epsilon"] = float(module.eps)
    if kind in (OpKind.CONV, OpKind.DENSE):
        kernel_axes, kernel_in_axis = {"kernel": (0,)}, {"kernel": 1}  # (out, in / groups, *kernel size)
    elif kind == OpKind.CONV_TRANSPOSE:
        kernel_axes = {"kernel": (1,) if module.groups == 1 else ()}
    layer_type = type(module).__name__
    return Node(
        name, kind, layer_type, attrs=attrs, weights=weights, kernel_axes=kernel_axes,
        kernel_in_axis=kernel_in_axis, payload=payload,
    )  # fmt: skip
