"""Build a ``torch.fx.GraphModule`` back from the neutral `Graph`.

Float mode calls each node's module / function again with the graph's weights::

    prev -> node -> next

Quantized mode fake-quantizes the weights that have a grid and inserts an activation
quantizer, named after its node, after each node whose activation has a grid::

    prev -> node(q(kernel)) -> node_activation_quant -> next
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import keyword
import re
import types
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import fx, nn

from model_compression_toolkit.core.backend import Tap
from model_compression_toolkit.core.calibration.quantizers import QuantizedWeights, node_weight
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.core.quant_config import QuantGrid
from model_compression_toolkit.errors import GraphValidationError, LayerSelectionError
from model_compression_toolkit.pytorch import aten, functional, ops
from model_compression_toolkit.pytorch.ops import DEVICE_META, OUT_SPEC_META, OUTPUTS_META, Ref, map_structure

BUILT_MARK = "model_compression_toolkit_built"  # key in GraphModule.meta of the models built here


class ActivationFakeQuant(nn.Module):
    """``x -> (clamp(round(x / scale) + zero_point, qmin, qmax) - zero_point) * scale``.

    Computed in float32 (the grid's scale and zero point rounded to float32), as
    `core.calibration.quantizers.fake_quant` computes with a float32 grid, and returned in x's dtype.

    Args:
        grid: scalars, or one entry per channel along ``channel_axis``.
        node_name: the graph node whose output this quantizes.
        channel_axis / ndim: where a per-channel grid's entries run, in a tensor of ndim dims.
        inplace: quantize a float32 input in place when autograd is off, as
            ``nn.ReLU(inplace=True)`` does: no new tensor of the activation's size.
    """

    def __init__(
        self, grid: QuantGrid, node_name: str, channel_axis: int | None = None, ndim: int = 0, inplace: bool = False
    ):
        super().__init__()
        self.node_name = node_name
        self.inplace = inplace
        self.qmin, self.qmax = int(grid.qmin), int(grid.qmax)
        scale, zero_point = np.asarray(grid.scale), np.asarray(grid.zero_point)
        dtype = np.float32  # as activations flow: float64 would double every quantizer's cost
        if scale.size > 1:
            if channel_axis is None or ndim == 0:
                raise GraphValidationError(
                    f"{node_name!r}: a per-channel activation grid ({scale.size} scales) needs a "
                    "channel axis; got none. Quantize this activation per tensor."
                )
            shape = [1] * ndim
            shape[channel_axis % ndim] = -1
            scale, zero_point = scale.reshape(shape), np.broadcast_to(zero_point, scale.shape).reshape(shape)
        self.register_buffer("scale", torch.tensor(scale.astype(dtype)))
        self.register_buffer("zero_point", torch.tensor(zero_point.astype(dtype)))
        self.shifted = bool(np.any(zero_point))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.to(self.scale.dtype)
        if torch.is_grad_enabled() and y.requires_grad:  # out of place: autograd keeps its inputs
            q = torch.clamp(torch.round(y / self.scale) + self.zero_point, self.qmin, self.qmax)
            return ((q - self.zero_point) * self.scale).to(x.dtype)
        # one new tensor (none with inplace), then in place: a pass over memory per step
        q = y.div_(self.scale) if self.inplace else torch.div(y, self.scale)
        q.round_()
        if self.shifted:
            q.add_(self.zero_point)
        q.clamp_(self.qmin, self.qmax)
        if self.shifted:
            q.sub_(self.zero_point)
        return q.mul_(self.scale).to(x.dtype)

    def extra_repr(self) -> str:
        return f"node={self.node_name!r}, qmin={self.qmin}, qmax={self.qmax}" + (", inplace=True" if self.inplace else "")


class OutputTap(nn.Module):
    """Hands its node's output to ``tap`` as a numpy array (shared with the tensor, no copy)."""

    def __init__(self, tap: Tap, node_name: str):
        super().__init__()
        self.tap, self.node_name = tap, node_name

    def forward(self, x: torch.Tensor) -> None:
        self.tap(self.node_name, ops.to_numpy(x))

    def extra_repr(self) -> str:
        return f"node={self.node_name!r}"


class _Targets:
    """Unique attribute paths in the built module: dotted paths must not cross a leaf, and
    torch.fx must be able to write each part into its generated code.

    fx writes a part that is not an identifier as ``getattr(self, "<part>")``, unescaped: a
    backslash, a double quote or a control character in a module name (torch accepts
    them) would make the generated code look up another name. Those characters become
    ``_`` in the built module's attribute path; the node keeps the user's name.
    """

    _RESERVED = frozenset(dir(fx.GraphModule)) | {"training", "graph", "code", "meta"}

    def __init__(self) -> None:
        self.leaves: set[str] = set()
        self.containers: set[str] = set()

    def claim(self, wanted: str) -> str:
        wanted = "".join(c if c.isprintable() and c not in '"\\' else "_" for c in wanted)
        flat, k = wanted.replace(".", "_"), 1
        candidate = wanted
        while not self._free(candidate):
            candidate, k = f"{flat}_{k}", k + 1
        parts = candidate.split(".")
        self.containers.update(".".join(parts[:i]) for i in range(1, len(parts)))
        self.leaves.add(candidate)
        return candidate

    def _free(self, path: str) -> bool:
        parts = path.split(".")
        prefixes = {".".join(parts[:i]) for i in range(1, len(parts))}
        return (
            parts[0] not in self._RESERVED
            and all(parts)
            and path not in self.leaves
            and path not in self.containers
            and not prefixes & self.leaves
        )


def _identifier(name: str) -> str:
    """A valid Python name for a placeholder made by the core (``2__in0__local`` -> ``in_2__in0__local``);
    a name that had to change gets a short hash of the original, so that ``a\tb`` and ``a_b`` differ."""
    clean = re.sub(r"\W", "_", name)
    if clean != name:
        clean += "_" + hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return clean if clean.isidentifier() and not keyword.iskeyword(clean) else f"in_{clean}"


def build(
    graph: Graph,
    quantized: bool,
    extra_outputs: Sequence[str] = (),
    weights: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    tap: Tap | None = None,
) -> fx.GraphModule:
    """A model computing ``graph`` (see the module docstring), in eval mode, on the device
    the model was read on.

    ``weights``: quantized weights already computed (node -> weight name -> array).

    Returns:
        A GraphModule taking the original inputs. Without ``extra_outputs`` it returns the
        original output structure (a Hugging Face ``ModelOutput`` too); with them, a flat tuple: the graph outputs, then the
        outputs of the ``extra_outputs`` nodes (after their quantizer when quantized).
        With ``tap``, it returns None, and an `OutputTap` right after each of those nodes
        hands its output to ``tap``: ``conv -> q -> OutputTap("conv")``, the output
        freed as soon as its consumers have run.
    """
    missing = [name for name in extra_outputs if name not in graph]
    if missing:
        raise LayerSelectionError(
            f"expected names of nodes of graph {graph.name!r} as extra outputs; got unknown {missing}. "
            "Use the node names of the graph (module paths such as 'layer1.0.conv1')."
        )
    if quantized and weights is None:  # each kernel quantized once, also for its corrected bias
        weights = QuantizedWeights(graph)
    fx_graph, root, targets = fx.Graph(), {}, _Targets()
    values: dict[str, fx.Node] = {}
    tapped = set(extra_outputs)
    for name in graph.inputs:
        payload = graph.node(name).payload or {}
        default = payload["args"][0] if payload.get("args") else inspect.Signature.empty
        target = payload.get("target") or _identifier(name)
        values[name] = fx_graph.placeholder(target, default_value=default)
        if quantized:
            values[name] = _quantize_output(fx_graph, graph.node(name), values[name], root, targets)
        if tap is not None and name in tapped:
            _emit_tap(fx_graph, name, values[name], root, targets, tap)
    for node in graph.nodes():
        if node.name in values:
            continue
        inputs = [values[e.src] for e in graph.in_edges(node.name)]
        out = _emit(fx_graph, node, inputs, root, targets, quantized, weights, _owns_input(graph, node, tapped))
        if quantized:
            out = _quantize_output(fx_graph, node, out, root, targets)
        values[node.name] = out
        if tap is not None and node.name in tapped:
            _emit_tap(fx_graph, node.name, out, root, targets, tap)
    outputs = [values[name] for name, _ in graph.outputs]
    template = graph.meta.get(OUTPUTS_META)
    if tap is not None:
        result = None
    elif extra_outputs:
        result: Any = tuple(outputs) + tuple(values[name] for name in extra_outputs)
    elif template is not None:
        result = map_structure(template, lambda leaf: outputs[leaf.index] if isinstance(leaf, Ref) else leaf)
        _restore_structure(fx_graph, graph, [values[name] for name in graph.inputs])
    else:
        result = outputs[0] if len(outputs) == 1 else tuple(outputs)
    fx_graph.output(result)
    model = fx.GraphModule(root, fx_graph, class_name=graph.name)
    model.meta[BUILT_MARK] = True
    model = model.to(_device(graph)).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def _device(graph: Graph) -> Any:
    """Where the model was read; for a graph the core made of its nodes (the similarity's
    local models), where those nodes were read."""
    device = graph.meta.get(DEVICE_META)
    if device is None:
        device = next((n.payload["device"] for n in graph.nodes() if n.payload and "device" in n.payload), None)
    return device or "cpu"


def _restore_structure(fx_graph: fx.Graph, graph: Graph, inputs: list[fx.Node]) -> None:
    """A graph read flat (torch.export) returns its outputs in the model's own structure:
    ``[logits] -> SequenceClassifierOutput(logits=...)``, with the pytree code generation
    torch.export itself uses (torch.fx has no public API for it)."""
    out_spec = graph.meta.get(OUT_SPEC_META)
    if out_spec is None:
        return
    from torch.fx.graph import _PyTreeCodeGen, _PyTreeInfo
    from torch.utils import _pytree

    names = [n.target for n in fx_graph.nodes if n.op == "placeholder"]
    in_spec = _pytree.tree_structure((tuple(range(len(names))), {}))
    fx_graph._codegen = _PyTreeCodeGen(_PyTreeInfo(names, in_spec, out_spec))


def _quantize_output(fx_graph: fx.Graph, node: Node, out: fx.Node, root: dict, targets: _Targets) -> fx.Node:
    """``out`` followed by the node's activation quantizer, when its activation has a grid."""
    act = node.quant.activation
    if act is None or act.grid is None:
        return out
    ndim = len(node.output_shapes[0]) if node.output_shapes else 0
    target = targets.claim(f"{node.name.replace('.', '_')}_activation_quant")
    root[target] = ActivationFakeQuant(act.grid, node.name, node.channel_axis, ndim, inplace=node.kind in _FRESH_OUTPUT)
    return fx_graph.call_module(target, (out,))


# Kinds whose output is a new tensor, never a view of an input or the input itself. The
# quantizer, its only user, may overwrite it: one activation-sized tensor less at a time.
_FRESH_OUTPUT = frozenset(
    {OpKind.CONV, OpKind.CONV_TRANSPOSE, OpKind.DENSE, OpKind.BATCH_NORM, OpKind.LAYER_NORM, OpKind.ACTIVATION}
    | {OpKind.SOFTMAX, OpKind.ADD, OpKind.SUB, OpKind.MUL, OpKind.CONCAT, OpKind.ELEMENTWISE, OpKind.POOL}
    | {OpKind.MEAN}
)


def _emit_tap(fx_graph: fx.Graph, name: str, value: fx.Node, root: dict, targets: _Targets, tap: Tap) -> None:
    target = targets.claim(f"{name.replace('.', '_')}_tap")
    root[target] = OutputTap(tap, name)
    fx_graph.call_module(target, (value,))


# Activation modules whose in-place form autograd can still differentiate.
_INPLACE_SAFE = (nn.ReLU, nn.ReLU6, nn.Hardtanh)


def _owns_input(graph: Graph, node: Node, tapped: set[str]) -> bool:
    """Whether ``node`` is the only reader of its one input, a new tensor that nothing
    else keeps (not a model output, not tapped): ``conv -> relu`` may then work in place."""
    edges = graph.in_edges(node.name)
    if len(edges) != 1:
        return False
    src = graph.node(edges[0].src)
    return (
        src.kind in _FRESH_OUTPUT
        and graph.consumers_count(src.name) == 1
        and src.name not in tapped
        and not graph.is_output(src.name)
    )


def _emit(
    fx_graph: fx.Graph,
    node: Node,
    inputs: list[fx.Node],
    root: dict,
    targets: _Targets,
    quantized: bool,
    weights: Mapping[str, Mapping[str, np.ndarray]] | None,
    owns_input: bool = False,
) -> fx.Node:
    """Add the fx node computing ``node`` from ``inputs``. ``owns_input``: nothing else reads
    the input (`_owns_input`), so a ReLU, ReLU6 or Hardtanh module works in place on it."""
    payload = node.payload
    if payload is None:
        if node.kind in (OpKind.IDENTITY, OpKind.DROPOUT) and len(inputs) == 1:
            return inputs[0]
        raise GraphValidationError(
            f"expected every {node.kind.value} node to carry what the PyTorch backend read; "
            f"{node.name!r} has no payload. This is a bug in the library: please report it."
        )
    args, kwargs = map_structure(
        (payload["args"], payload["kwargs"]),
        lambda leaf: inputs[leaf.index] if isinstance(leaf, Ref) else leaf,
    )
    op, target = payload["op"], payload["target"]
    if op == "call_module":
        module = _copy_module(payload["module"], node)
        _load_weights(module, node, quantized, weights)
        if getattr(module, "inplace", None) is not None:
            module.inplace = owns_input and type(module) in _INPLACE_SAFE
        target = targets.claim(node.name)
        root[target] = module
    elif op == "get_attr":
        target = targets.claim(node.name.replace(".", "_"))
        value = node_weight(node, "value", quantized, weights) if "value" in node.weights else payload.get("value")
        root[target] = torch.tensor(value) if isinstance(value, np.ndarray) else value
    elif op == "call_function":
        target = ops.OUT_OF_PLACE_FUNCTIONS.get(target, target) if ops.hashable(target) else target
        target = aten.out_of_place(target)
        if kwargs.get("inplace") is True:
            kwargs["inplace"] = False
        if payload.get("weights"):
            args, kwargs = list(args), dict(kwargs)
            for wname, slot in payload["weights"].items():
                if wname in node.weights:
                    value = _weight_attr(fx_graph, node, wname, root, targets, quantized, weights)
                    functional.put(args, kwargs, slot, value)
    elif op == "call_method":
        target = ops.out_of_place_method(target)
    pool = _is_max_pool_2d(node, root.get(target) if op == "call_module" else target, args, kwargs)
    if pool:
        args = [fx_graph.call_method("contiguous", (args[0],), {"memory_format": torch.channels_last}), *args[1:]]
    out = fx_graph.create_node(op, target, tuple(args), kwargs, name=node.name.replace(".", "_"))
    return fx_graph.call_method("contiguous", (out,)) if pool else out


def _weight_attr(
    fx_graph: fx.Graph,
    node: Node,
    wname: str,
    root: dict,
    targets: _Targets,
    quantized: bool,
    weights: Mapping[str, Mapping[str, np.ndarray]] | None,
) -> fx.Node:
    """A functional layer's weight as a parameter of the built model: ``fc.weight`` for the
    kernel of ``F.linear`` node ``fc`` (`pytorch.functional`)."""
    torch_name = ops.WEIGHT_NAMES.get(node.kind, {}).get(wname, wname)
    target = targets.claim(f"{node.name}.{torch_name}")
    tensor = _tensor(np.asarray(node_weight(node, wname, quantized, weights)))
    root[target] = nn.Parameter(tensor, requires_grad=False)
    return fx_graph.get_attr(target)


_MAX_POOL_2D_FUNCTIONS = (F.max_pool2d, torch.max_pool2d)


def _is_max_pool_2d(node: Node, callee: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether ``node`` is a 2-D max pooling of a batch, without indices, run in channels-last
    order: ``x -> x.contiguous(channels_last) -> pool -> .contiguous()``.

    Torch's CPU kernel for channels-first max pooling is not vectorized: on a batch of
    64x112x112 maps (ResNet's stem) it takes 28 ms, and 10 ms with both layout changes.
    The maximum is exact, so the output is the same to the bit.
    """
    if not args or len(node.output_shapes[0] if node.output_shapes else ()) != 4:
        return False
    if ops.hashable(callee) and callee in _MAX_POOL_2D_FUNCTIONS:
        return not (kwargs.get("return_indices") or (len(args) > 6 and args[6]))
    return type(callee) is nn.MaxPool2d and not callee.return_indices



def _tensor(array: np.ndarray) -> torch.Tensor:
    """``array`` as a tensor, sharing its memory when it is a writable, aligned array that
    torch can view, else a copy."""
    if array.flags.writeable and array.flags.aligned and array.dtype.isnative:
        try:
            return torch.from_numpy(array)
        except (TypeError, ValueError):  # a dtype or strides torch cannot view
            pass
    return torch.tensor(array)


def _weight_owner(module: nn.Module, node: Node, wname: str) -> tuple[nn.Module, str]:
    """The submodule holding weight ``wname`` of ``node`` and its attribute name there."""
    path = ops.WEIGHT_NAMES.get(node.kind, {}).get(wname, wname)
    owner_path, _, attr = path.rpartition(".")
    return (module.get_submodule(owner_path) if owner_path else module), attr


def _copy_module(module: nn.Module, node: Node) -> nn.Module:
    """A deep copy of the read module, but for the tensors `_load_weights` replaces at once,
    which are not copied only to be thrown away."""
    memo: dict[int, Any] = {}
    for wname in node.weights:
        try:
            owner, attr = _weight_owner(module, node, wname)
        except AttributeError:
            continue
        current = getattr(owner, attr, None)
        if isinstance(current, torch.Tensor):
            memo[id(current)] = current
    return _deep_copy(module, memo)


def _deep_copy(module: nn.Module, memo: dict[int, Any]) -> nn.Module:
    """``copy.deepcopy(module, memo)``, the same objects made by a walk of the module tree.

    ``copy.deepcopy`` reduces each module and copies its state generically: ~50 calls a
    module, most of them on the dozen empty hook dicts every module holds; on a model of
    600 modules that was a third of each build. Here a module whose class copies the
    default way (no ``__deepcopy__``, ``__reduce__`` or ``__getstate__`` of its own) gets
    its state copied field by field: atomic values kept (as deepcopy keeps them), empty
    containers copied flat, submodules walked, everything else (tensors included) through
    ``copy.deepcopy`` with the same ``memo``, so shared objects stay shared once.
    """
    if id(module) in memo:
        return memo[id(module)]
    cls = type(module)
    if not _default_copy(cls):
        return copy.deepcopy(module, memo)
    new = cls.__new__(cls)
    memo[id(module)] = new
    state = module.__getstate__()
    for key, value in state.items():
        if key == "_modules":
            state[key] = {k: None if m is None else _deep_copy(m, memo) for k, m in value.items()}
        elif type(value) in _ATOMIC:
            continue
        elif type(value) in _CONTAINERS and not value:
            state[key] = value.copy()
        else:
            state[key] = copy.deepcopy(value, memo)
    new.__setstate__(state)
    return new


# Values ``copy.deepcopy`` returns as they are (its own atomic types, and torch's dtypes).
_ATOMIC = frozenset(
    {type(None), bool, int, float, complex, str, bytes, type, range, torch.dtype}
    | {types.FunctionType, types.BuiltinFunctionType, types.CodeType}
)
_CONTAINERS = frozenset({dict, OrderedDict, set, list})


_DEFAULT_COPY: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()  # no class kept alive
_OWN_COPY = ("__deepcopy__", "__getnewargs__", "__getnewargs_ex__")


def _default_copy(cls: type) -> bool:
    """Whether ``copy.deepcopy`` copies instances of ``cls`` as it copies a plain `nn.Module`:
    ``cls.__new__(cls)``, then ``__setstate__`` with the deep copy of ``__getstate__()``."""
    known = _DEFAULT_COPY.get(cls)
    if known is None:
        known = _DEFAULT_COPY[cls] = (
            cls.__reduce_ex__ is object.__reduce_ex__
            and cls.__reduce__ is object.__reduce__
            and cls.__getstate__ is nn.Module.__getstate__
            and not any(hasattr(cls, name) for name in _OWN_COPY)
        )
    return known


def _load_weights(
    module: nn.Module, node: Node, quantized: bool, weights: Mapping[str, Mapping[str, np.ndarray]] | None
) -> None:
    """Put the node's weights into the module: kernel -> weight, gamma -> weight, ...

    A weight the module lacks (a folded batch norm's bias on a conv without one) becomes
    a new Parameter. A weight shares its array's memory (`_tensor`): the arrays are the
    graph's own or freshly quantized ones, so the models built from one graph (the PTQ
    result, the similarity's quantized and local models) hold one copy of the weights.
    """
    for wname in node.weights:
        owner, attr = _weight_owner(module, node, wname)
        current = getattr(owner, attr, None)
        tensor = _tensor(np.asarray(node_weight(node, wname, quantized, weights)))
        if isinstance(current, torch.Tensor):
            tensor = tensor.to(current.dtype if tensor.is_floating_point() else tensor.dtype).to(
                current.device
            )
        if attr in dict(owner.named_buffers(recurse=False)):
            setattr(owner, attr, tensor)
        else:
            setattr(owner, attr, nn.Parameter(tensor, requires_grad=False))
    if node.kind in (OpKind.BATCH_NORM, OpKind.LAYER_NORM) and "epsilon" in node.attrs:
        module.eps = node.attrs["epsilon"]
