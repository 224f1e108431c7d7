"""Read a ``torch.nn.Module`` into the neutral `Graph`.

``user model -> private copy -> capture (torch.fx, else transformers' tracer, else
torch.export: `pytorch.capture`) -> run on the sample (shapes, dtypes) -> Graph``

A batch given as a dict of keyword inputs (``{"input_ids": ..., "attention_mask": ...}``)
reaches the reader as a list whose ``names`` attribute holds the keywords
(`core.data.NamedBatch`); a plain list gives ``forward``'s arguments in order.

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

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import fx, nn

from model_compression_toolkit.core.backend import unsupported_warnings
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.errors import InputMismatchError, ModelReadError
from model_compression_toolkit.pytorch import capture, functional, ops
from model_compression_toolkit.pytorch.masks import no_activation
from model_compression_toolkit.pytorch.model_checks import check_not_meta, check_read
from model_compression_toolkit.pytorch.ops import (
    CAPTURE_META,
    DEVICE_META,
    OUT_SPEC_META,
    OUTPUTS_META,
    Ref,
    as_tensor,
    map_structure,
)
from model_compression_toolkit.pytorch.shapes import propagate


def read(model: nn.Module, sample_inputs: Sequence[np.ndarray]) -> tuple[Graph, list[str]]:
    """Read ``model`` into a Graph; the user's model is left as it was.

    Returns:
        The validated graph and the warnings: one per op type kept in float because it is
        unknown, and one per argument or setting the model was read with.
    """
    if not isinstance(model, nn.Module):
        raise ModelReadError(f"expected a torch.nn.Module; got {type(model).__name__}")
    check_not_meta(model)
    names = _given_names(model, sample_inputs)
    work, copy_notes = capture.private_copy(model, sample_inputs)  # float32, without hooks
    device = _device(work)
    tensors = [as_tensor(x, device) for x in sample_inputs]
    notes = copy_notes + capture.without_cache(work, tensors, names)
    captured = capture.capture(work, tensors, names)
    keywords = names if set(names) <= set(capture.input_names(work) or []) else None
    try:
        graph = _checked_graph(captured, work, tensors, keywords, sample_inputs, device)
    except ModelReadError as misread:  # torch.fx lost what the model does (x += y on a shared tensor)
        if captured.path == "torch.export":
            raise
        try:
            captured = capture.exported(work, tensors, names)
        except Exception:
            raise misread from None
        graph = _checked_graph(captured, work, tensors, keywords, sample_inputs, device)
    warnings = unsupported_warnings(graph) + notes
    if captured.fixed:
        given = ", ".join(graph.inputs)
        fixed = captured.fixed
        warnings.append(
            f"{type(model).__name__}.forward was read with "
            f"{', '.join(f'{name}={default!r}' for _, name, default in fixed)}: the representative data does not "
            f"give {'this argument' if len(fixed) == 1 else 'these arguments'}, so the model is read "
            f"with the default{'' if len(fixed) == 1 else 's'} and the quantized model's forward takes "
            f"({given}). Yield every argument from the representative data to keep it an input."
        )
    return graph, warnings


def _checked_graph(
    captured: capture.Captured,
    work: nn.Module,
    tensors: list[torch.Tensor],
    keywords: list[str] | None,
    sample_inputs: Sequence[np.ndarray],
    device: torch.device,
) -> Graph:
    """The graph of ``captured``, validated, and checked to compute what ``work`` computes on
    the sample (`model_checks.check_read`): no misread graph goes further."""
    gm = captured.gm
    shapes, dtypes, floating, complex_ = propagate(gm, sample_inputs, type(work).__name__)
    graph = _to_graph(gm, shapes, dtypes, floating, complex_, type(work).__name__)
    graph.meta[OUT_SPEC_META] = captured.out_spec
    graph.meta[CAPTURE_META] = captured.path
    graph.meta[DEVICE_META] = device
    for node in graph.nodes():  # graphs the core makes of some of these nodes are built there too
        node.payload["device"] = device
    no_activation(graph)
    graph.validate()
    _check(work, gm, graph, tensors, keywords, _node_names(gm))
    return graph


# The self-check runs the model and the float model built back from the read graph on the
# first samples of the first batch, not on all of it: a misread (a write in place that the
# reader lost) shows on any sample, and two samples still make a batch whose samples a
# misread could mix. A batch of 8 cost a 600-layer model two float passes of its data
# (bench/results/analysis_speed.md).
CHECK_SAMPLES = 2


def _check(
    work: nn.Module,
    gm: fx.GraphModule,
    graph: Graph,
    tensors: list[torch.Tensor],
    keywords: list[str] | None,
    node_names: dict[str, str],
) -> None:
    """`check_read` on the first `CHECK_SAMPLES` samples of the first batch (the inputs
    whose first axis is the batch's); on the whole batch where the model or the read graph
    does not run on fewer (a model fixed to the batch size it was read with)."""
    batch = next((t.shape[0] for t in tensors if t.dim() > 0), None)
    if batch is not None and batch > CHECK_SAMPLES:
        first = [t[:CHECK_SAMPLES] if t.dim() > 0 and t.shape[0] == batch else t for t in tensors]
        try:
            check_read(work, gm, graph, first, keywords, node_names)
            return
        except ModelReadError:
            raise
        except Exception:  # noqa: BLE001 - it runs on its whole batch only: checked there
            pass
    check_read(work, gm, graph, tensors, keywords, node_names)


def _device(model: nn.Module) -> torch.device:
    return next((t.device for t in (*model.parameters(), *model.buffers())), torch.device("cpu"))


def _given_names(model: nn.Module, sample: Sequence[np.ndarray]) -> list[str]:
    """The names of the inputs a batch gives: its keywords, or the first arguments of
    ``forward`` in order. A keyword ``forward`` does not take is an InputMismatchError."""
    params = capture.input_names(model)
    names = getattr(sample, "names", None)
    if names is None:
        if params is None or len(params) < len(sample):  # forward(*args): names of our own
            return [f"input_{i}" for i in range(len(sample))]
        return params[: len(sample)]
    # keys must name forward's parameters; any key only for a forward(**inputs) with none named
    # (a Hugging Face forward also takes **kwargs, where a misspelt key would vanish)
    takes_any = _takes_var_keyword(model) and not params
    unknown = [n for n in names if params is not None and n not in params and not takes_any]
    if unknown:
        raise InputMismatchError(
            f"expected keyword inputs that {type(model).__name__}.forward takes ({', '.join(params or [])}); "
            f"got {unknown} in the batches from representative_data_gen. Use forward's argument names as keys."
        )
    return list(names)


def _takes_var_keyword(model: nn.Module) -> bool:
    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind == p.VAR_KEYWORD for p in params)


def _weight_owner(n: fx.Node) -> str | None:
    """The module path of a functional layer's weights (``F.linear(x, fc.weight)`` -> ``fc``)."""
    found = functional.slots(n.target) if n.op == "call_function" else None
    if found is None:
        return None
    first = next(iter(found.weights.values()))
    weight = functional.argument(n.args, n.kwargs, first)
    if isinstance(weight, fx.Node) and weight.op == "get_attr":
        return weight.target.rpartition(".")[0] or None
    return None


def _node_names(gm: fx.GraphModule) -> dict[str, str]:
    """fx node name -> graph node name: inputs keep theirs, a module's first call its path,
    a functional layer the path of the module owning its weights."""
    names: dict[str, str] = {}
    nodes = [n for n in gm.graph.nodes if n.op != "output"]
    for n in nodes:
        if n.op == "placeholder":
            names[n.name] = n.name
    used = set(names.values())
    for n in nodes:
        wanted = n.target if n.op == "call_module" else _weight_owner(n)
        if wanted and wanted not in used:
            names[n.name] = wanted
            used.add(wanted)
    for n in nodes:
        if n.name not in names:
            name, k = n.name, 1
            while name in used:
                name, k = f"{n.name}_{k}", k + 1
            names[n.name] = name
            used.add(name)
    return names


def _absorbed(gm: fx.GraphModule) -> dict[fx.Node, dict[str, torch.Tensor]]:
    """Functional layer -> {weight name: tensor} for each weight it reads from a ``get_attr``
    (`pytorch.functional`); a batch norm only in eval form (``training`` False)."""
    found: dict[fx.Node, dict[str, torch.Tensor]] = {}
    for n in gm.graph.nodes:
        slots = functional.slots(n.target) if n.op == "call_function" else None
        if slots is None or (slots.training and functional.argument(n.args, n.kwargs, slots.training, False)):
            continue
        if any(functional.argument(n.args, n.kwargs, slot, 1) != 1 for slot in slots.scalars):
            continue  # addmm(bias, x, w, beta=0.5): not a plain linear layer
        weights = {}
        for wname, slot in slots.weights.items():
            arg = functional.argument(n.args, n.kwargs, slot)
            value = _attr(gm, arg.target) if isinstance(arg, fx.Node) and arg.op == "get_attr" else None
            if isinstance(value, torch.Tensor):
                weights[wname] = value
            elif arg is not None:  # a weight computed in the forward pass: leave the call as it is
                weights = {}
                break
        required = slots.weights.keys() & {"kernel", "mean", "variance"}
        if weights and required <= weights.keys():
            found[n] = weights
    return found


def _attr(gm: fx.GraphModule, target: str) -> Any:
    value: Any = gm
    for part in target.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ModelReadError(
                f"expected a forward that reads the model's attributes without replacing them; the traced graph "
                f"reads {target!r}, which the model does not hold once traced: its forward assigns a tensor to an "
                "attribute while it runs (self.buffer = ...). Keep such values in local variables, or register the "
                "buffer once in __init__ and update it in place outside forward."
            ) from None
    return value


def _to_graph(
    gm: fx.GraphModule,
    shapes: dict[str, list[tuple]],
    dtypes: dict[str, str],
    floating: dict[str, bool],
    complex_: set[str],
    name: str,
) -> Graph:
    graph = Graph(name, "pytorch")
    names = _node_names(gm)
    modules = dict(gm.named_modules())
    absorbed = _absorbed(gm)
    for n in gm.graph.nodes:
        inputs: list[fx.Node] = []
        slot_of = _weight_slots(n, absorbed.get(n))

        def to_ref(leaf: Any, inputs: list[fx.Node] = inputs) -> Any:
            if isinstance(leaf, fx.Node):
                inputs.append(leaf)
                return Ref(len(inputs) - 1)
            return leaf

        if slot_of:
            args, kwargs = _template(n, slot_of, to_ref)
        else:
            args, kwargs = map_structure((tuple(n.args), dict(n.kwargs)), to_ref)
        if n.op == "output":
            graph.meta[OUTPUTS_META] = args[0]
            graph.outputs = [(names[x.name], 0) for x in inputs]
            continue
        if n.op == "get_attr" and n.users and all(u in absorbed for u in n.users):
            continue  # every user took it as its own weight
        node = _make_node(n, names[n.name], args, kwargs, modules, gm)
        if n in absorbed:
            _absorb(node, n, absorbed[n])
        node.output_shapes = shapes.get(n.name) or [()]
        if node.kind == OpKind.CONSTANT:
            node.output_shapes = [tuple(node.weights["value"].shape)]
        elif n.name in complex_ and n.op != "placeholder":
            node.kind = OpKind.UNKNOWN  # computed from values (torch.fft.rfft): kept in float, not a SHAPE
        elif n.op != "placeholder" and (not shapes.get(n.name) or not floating.get(n.name, True)):
            node.kind = OpKind.SHAPE  # x.size(0), x.shape: not a tensor; ids, masks: not floating-point
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
    _share_weights(graph)
    return graph


def _share_weights(graph: Graph) -> None:
    """A module called twice (``fc(fc(x))``): its later calls hold the first call's weight
    arrays, so the model's memory counts them once (`core.memory`)."""
    first: dict[int, Node] = {}
    for node in graph.nodes():
        module = (node.payload or {}).get("module")
        if module is None or not node.weights:
            continue
        holder = first.setdefault(id(module), node)
        for wname, w in node.weights.items():
            held = holder.weights.get(wname)
            if holder is not node and held is not None and held.shape == w.shape:
                node.weights[wname] = held


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
            edges = graph.out_edges(node.name)
            if edges and all(graph.node(e.dst).kind in _LAST_AXIS and e.dst_index == 0 for e in edges):
                node.channel_axis = -1
        elif node.kind in _SAME_LAYOUT:
            first = [e for e in graph.in_edges(node.name) if e.dst_index == 0]
            src = graph.node(first[0].src) if first else None
            if src is not None and src.channel_axis == -1 and len(src.output_shapes[0]) == len(shape):
                node.channel_axis = -1


def _weight_slots(n: fx.Node, weights: dict[str, torch.Tensor] | None) -> dict[str, tuple[int, str]]:
    if not weights:
        return {}
    return dict(functional.slots(n.target).weights)


def _template(n: fx.Node, slot_of: dict[str, tuple[int, str]], to_ref: Any) -> tuple[tuple, dict]:
    """The args template of a functional layer: None in each weight slot (the builder fills
    the slots from the node's weights, which folding may have added to)."""
    args, kwargs = list(n.args), dict(n.kwargs)
    for slot in slot_of.values():
        if functional.argument(args, kwargs, slot) is not None or slot[0] < len(args):
            functional.put(args, kwargs, slot, None)
    args, kwargs = map_structure((tuple(args), kwargs), to_ref)
    return args, kwargs


def _absorb(node: Node, n: fx.Node, weights: dict[str, torch.Tensor]) -> None:
    """Give a functional layer its weights, axes and attributes, as `_module_node` does."""
    slots = functional.slots(n.target)
    node.weights = {wname: _np(t) for wname, t in weights.items()}
    node.payload["weights"] = dict(slots.weights)
    if "kernel" in node.weights:
        out_axes, in_axis = slots.kernel_axes
        node.kernel_axes, node.kernel_in_axis = {"kernel": out_axes}, {"kernel": in_axis}
    if slots.epsilon is not None:
        node.attrs["epsilon"] = float(functional.argument(n.args, n.kwargs, slots.epsilon, 1e-5))
    if slots.groups is not None:
        node.attrs["groups"] = int(functional.argument(n.args, n.kwargs, slots.groups, 1))
    if node.kind == OpKind.BATCH_NORM:
        channels = node.weights["mean"].size
        node.weights.setdefault("gamma", np.ones(channels, np.float32))
        node.weights.setdefault("beta", np.zeros(channels, np.float32))


def _first_shape(node: Node) -> tuple:
    return node.output_shapes[0] if len(node.output_shapes) == 1 else ()


def _make_node(
    n: fx.Node, name: str, args: tuple, kwargs: dict, modules: dict[str, nn.Module], gm: fx.GraphModule
) -> Node:
    payload = {"op": n.op, "target": n.target, "args": args, "kwargs": kwargs}
    if n.op == "placeholder":
        return Node(name, OpKind.INPUT, "input", payload=payload)
    if n.op == "get_attr":
        value = _attr(gm, n.target)
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
    kind, function = ops.call_entry((kind, function), ops.is_clamp(n.op, n.target), args, kwargs)
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
