"""An onnx2torch model as ``torch.export`` can take it: its shapes computed once, for one input.

onnx2torch keeps ONNX's shape arithmetic as it is (``Shape -> Gather -> Concat -> Reshape``, a
detector's anchor grid from ``Range``), and its reshapes, slices, splits and resizes read their
shapes from tensors: ``torch.export`` cannot guard on a tensor's values, so pt2e fails on every
converted model. For one input shape (the peers' exported graphs are static anyway) all of it
is constant:

- every node whose value does not depend on the input's values (only on constants and on the
  input's shape) becomes a constant buffer, computed on the example input;
- every reshape, expand, slice, split, gather and resize left, whose shape arguments are such
  constants, becomes the plain torch call with those shapes as Python values.

The result is checked against the model on the example input (equal outputs) before it is
returned; `static_graph` raises when a node it needs to change is of a kind it does not know.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch
from torch import fx, nn
from torch.utils._pytree import tree_leaves

# onnx2torch modules whose output depends on the input's shape only
_SHAPE_ONLY = {"OnnxShape"}
# onnx2torch modules that read shapes or indices from tensors (`_replacement` says how)
_READS_SHAPES = {"OnnxReshape", "OnnxExpand", "OnnxSlice", "OnnxSplit13", "OnnxGather", "OnnxResize"}


class _Call(nn.Module):
    """A module that calls ``fn(x)``: the replacement of one shape-reading onnx2torch module."""

    def __init__(self, fn, text: str) -> None:
        super().__init__()
        self.fn, self.text = fn, text

    def forward(self, x: torch.Tensor) -> Any:
        return self.fn(x)

    def extra_repr(self) -> str:
        return self.text


def _python(value: Any) -> Any:
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value


def _replacement(module: nn.Module, constants: list[Any], out: Any) -> _Call:
    """The plain torch call computing what ``module`` computed, its other arguments ``constants``."""
    kind = type(module).__name__
    if kind == "OnnxReshape":
        shape = tuple(out.shape)
        return _Call(lambda x: torch.reshape(x, shape), f"reshape {shape}")
    if kind == "OnnxExpand":
        shape = tuple(out.shape)
        return _Call(lambda x: x.expand(shape), f"expand {shape}")
    if kind == "OnnxSlice":
        from onnx2torch.node_converters.slice import _do_slice, _get_slices

        args = [np.asarray(_python(c)) if c is not None else None for c in constants]
        args += [None] * (4 - len(args))
        flip, pos, neg = _get_slices(*(torch.from_numpy(a) if a is not None else None for a in args))
        return _Call(lambda x: _do_slice(x, flip, pos, neg), "slice")
    if kind == "OnnxSplit13":
        split = [int(v) for v in np.asarray(_python(constants[0])).ravel()] if constants else None
        axis, parts = module.axis, module.num_splits
        if split is None:
            return _Call(
                lambda x: torch.split(x, x.shape[axis] // parts, dim=axis), f"split {parts} on {axis}"
            )
        return _Call(lambda x: torch.split(x, split, dim=axis), f"split {split} on {axis}")
    if kind == "OnnxGather":
        axis = module._axis
        index = np.asarray(_python(constants[0]))
        if index.ndim == 0:
            i = int(index)
            return _Call(lambda x: x.select(axis, i), f"select {i} on {axis}")
        flat, shape = [int(v) for v in index.ravel()], tuple(out.shape)
        return _Call(
            lambda x: torch.reshape(torch.index_select(x, axis, torch.tensor(flat)), shape),
            f"gather on {axis}",
        )
    if kind == "OnnxResize":
        from onnx2torch.node_converters.resize import _onnx_mode_to_torch_mode

        size, align = tuple(out.shape[2:]), module.align_corners
        mode = _onnx_mode_to_torch_mode(module.onnx_mode, out.dim() - 2)
        return _Call(
            lambda x: nn.functional.interpolate(x, size=size, mode=mode, align_corners=align),
            f"resize {size} {mode}",
        )
    raise NotImplementedError(f"static_graph: no static form for {kind}")


def static_graph(model: fx.GraphModule, example: torch.Tensor) -> fx.GraphModule:
    """A copy of ``model`` with its shape arithmetic done for ``example``'s shape (module doc)."""
    import copy

    gm = copy.deepcopy(model)
    values: dict[fx.Node, Any] = {}

    class Recorder(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            values[n] = super().run_node(n)
            return values[n]

    with torch.no_grad():
        expected = Recorder(gm).run(example)
    data: dict[fx.Node, bool] = {}
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            data[n] = True
        elif n.op in ("get_attr", "output"):
            data[n] = False
        elif n.op == "call_module" and type(gm.get_submodule(n.target)).__name__ in _SHAPE_ONLY:
            data[n] = False
        else:
            data[n] = any(data[a] for a in n.all_input_nodes)
    constant: dict[fx.Node, Any] = {}
    for k, n in enumerate(list(gm.graph.nodes)):
        if n.op in ("call_module", "call_function", "call_method") and not data[n]:
            if isinstance(values[n], torch.Tensor) and any(data[u] for u in n.users):
                name = f"_static_{k}"
                gm.register_buffer(name, values[n].detach().clone())
                with gm.graph.inserting_before(n):
                    node = gm.graph.get_attr(name)
                n.replace_all_uses_with(node)
                constant[node] = values[n]
                data[node] = False
    known = {**values, **constant}  # every constant argument's value, by node
    for k, n in enumerate(list(gm.graph.nodes)):
        if n.op != "call_module" or not data.get(n):
            continue
        module = gm.get_submodule(n.target)
        if type(module).__name__ not in _READS_SHAPES:
            continue
        bound = inspect.signature(module.forward).bind(*n.args, **n.kwargs)  # arguments by name, in order
        rest = list(bound.arguments.values())[1:]
        if not rest or not all(
            a is None or (isinstance(a, fx.Node) and not data.get(a, False)) for a in rest
        ):
            continue  # no shape argument, or one computed from the input's values: left as it is
        name = f"_static_call_{k}"
        gm.add_module(name, _replacement(module, [None if a is None else known[a] for a in rest], values[n]))
        with gm.graph.inserting_before(n):
            node = gm.graph.call_module(name, (list(bound.arguments.values())[0],))
        n.replace_all_uses_with(node)
        gm.graph.erase_node(n)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    with torch.no_grad():
        got = gm(example)
    tensors = [[t for t in tree_leaves(v) if isinstance(t, torch.Tensor)] for v in (expected, got)]
    for a, b in zip(*tensors):
        if a.shape != b.shape or not torch.allclose(a, b, rtol=1e-5, atol=1e-5):
            raise AssertionError("static_graph: the static model computes another output")
    return gm
