"""Capture a model's computation as a ``torch.fx.GraphModule``, trying one path after another.

``private copy (eval, no hooks, attention decomposed) -> its own graph (a GraphModule)
-> torch.fx -> transformers' fx tracer -> torch.export -> GraphModule``

A model that is a GraphModule already (onnx2torch's conversion of an ONNX file, a model
traced by the user) is read from its own graph: tracing it again would trace into its
leaf modules, and onnx2torch's branch on tensor values. Plain torch.fx keeps the module
structure, so it goes next. Hugging Face models branch on
their inputs in Python and need a tracer that knows them: transformers' own (in the
transformers versions that have ``transformers.utils.fx``) or torch.export, which runs the
model on the sample and records the ATen ops it calls, then hands the same kind of
GraphModule back (`pytorch.aten` names its ops). Each path that fails gives its reason;
if all fail, `capture` raises one ModelReadError quoting every reason.
"""

from __future__ import annotations

import copy
import inspect
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx, nn

from model_compression_toolkit.errors import ModelReadError
from model_compression_toolkit.pytorch import attention, inplace
from model_compression_toolkit.pytorch.model_checks import check_hooks, in_float32

_HOOK_DICTS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called") + (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_backward_hooks",
    "_backward_pre_hooks",
)


@dataclass
class Captured:
    """A traced model. ``fixed``: (position in the signature, name, default) of each argument
    traced as its default; ``out_spec``: the pytree structure of the model's output when
    the graph returns it flat (torch.export), to build the same structure back."""

    gm: fx.GraphModule
    path: str
    fixed: list[tuple[int, str, Any]] = field(default_factory=list)
    out_spec: Any = None
    notes: list[str] = field(default_factory=list)


def input_names(model: nn.Module) -> list[str] | None:
    """``forward``'s parameter names, in order (``*args``/``**kwargs`` left out); None
    without a signature."""
    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return None
    return [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def private_copy(model: nn.Module, sample_inputs: Sequence[Any]) -> tuple[nn.Module, list[str]]:
    """A float32 copy in eval mode without the user's hooks, so running it never calls them,
    with its ``nn.MultiheadAttention`` layers decomposed (`pytorch.attention`), and the
    warnings that say what differs from the user's model (`pytorch.model_checks`)."""
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
            hooks = getattr(module, attr, None)
            if isinstance(hooks, dict):
                hooks.clear()
    attention.decompose(work)
    return work, notes


_CACHE_KEYS = ("past_key_values", "cache")  # the name transformers 5 gives it, and the older one


def without_cache(model: nn.Module, sample: Sequence[torch.Tensor], names: Sequence[str]) -> list[str]:
    """A Hugging Face model that returns a key/value cache (an object, not an activation) is
    read with ``config.use_cache=False``; returns the note that says so, or none."""
    config = getattr(model, "config", None)
    if not getattr(config, "use_cache", False):
        return []
    with torch.no_grad():
        try:
            out = model(**dict(zip(names, sample)))
        except Exception:  # the capture says why the model does not run
            return []
    config.use_cache = False
    if getattr(out, "get", None) is None or all(out.get(k) is None for k in _CACHE_KEYS):
        return []
    return [
        f"{type(model).__name__} was read with config.use_cache=False: its quantized model returns no "
        "key/value cache (past_key_values). Generate with use_cache=False, or take the cache from the float model."
    ]


def capture(model: nn.Module, sample: Sequence[torch.Tensor], names: Sequence[str]) -> Captured:
    """``model`` (a `private_copy`) captured with inputs ``names`` (given ``sample``)."""
    reasons: list[str] = []
    paths = (("graph module", _graph_module), ("torch.fx", _fx), ("transformers.utils.fx", _hf_fx))
    for path, trace in (*paths, ("torch.export", _export)):
        try:
            captured = trace(model, sample, names)
            inplace.redirect(captured.gm)  # later readers of a tensor changed in place read the change
        except (_NotApplicable, inplace.AliasedMutation) as e:
            reasons.append(f"{path}: {e}")
            continue
        except Exception as e:
            reasons.append(f"{path}: {type(e).__name__}: {_first_line(e)}")
            continue
        captured.path = path
        return captured
    raise ModelReadError(
        f"torch.fx could not trace {type(model).__name__}, nor could another capture path; expected a model "
        "one of them can read. " + "; ".join(reasons) + ". Make forward's control flow independent of tensor "
        "values (torch.fx), or make the model exportable: torch.export.export(model, args, kwargs)."
    )


def exported(model: nn.Module, sample: Sequence[torch.Tensor], names: Sequence[str]) -> Captured:
    """``model`` captured by torch.export, for a model torch.fx read but misread."""
    captured = _export(model, sample, names)
    inplace.redirect(captured.gm)
    captured.path = "torch.export"
    return captured


class _NotApplicable(Exception):
    """A capture path that does not apply to this model."""


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else ""


def fixed_defaults(model: nn.Module, names: Sequence[str]) -> list[tuple[int, str, Any]]:
    """(position in the signature, name, default) of each ``forward`` argument not in
    ``names`` whose default is None, a bool or a string: the values tracing specializes
    the model to."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):  # no signature to read: trace every argument
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if any(p.kind not in kinds for p in params):  # *args, **kwargs: leave it to the tracer
        return []
    given = set(names)
    return [
        (i, p.name, p.default)
        for i, p in enumerate(params)
        if p.name not in given and (p.default is None or isinstance(p.default, (bool, str)))
    ]


def _graph_module(model: nn.Module, sample: Sequence[torch.Tensor], names: Sequence[str]) -> Captured:
    """The private copy itself, when it is a GraphModule with a plain signature: its graph
    is the model. (One with a pytree signature, from ``torch.export``, is exported again.)"""
    if not isinstance(model, fx.GraphModule):
        raise _NotApplicable("not a torch.fx.GraphModule")
    if type(model.graph._codegen) is not fx.graph.CodeGen:
        raise _NotApplicable("a GraphModule whose inputs or outputs are a pytree")
    _drop_shape_asserts(model)
    return Captured(model, "graph module")


def _fx(model: nn.Module, sample: Sequence[torch.Tensor], names: Sequence[str]) -> Captured:
    fixed = fixed_defaults(model, names)
    gm = fx.symbolic_trace(model, concrete_args={name: default for _, name, default in fixed} or None)
    if fixed:
        _drop_specialization_checks(gm, [position for position, _, _ in fixed])
    _drop_shape_asserts(gm)
    return Captured(gm, "torch.fx", fixed)


_SHAPE_CHECKS = frozenset(
    {getattr, operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge}
)
_SHAPE_CHECKS |= {operator.and_, operator.or_, operator.not_, operator.getitem, len}


def _drop_shape_asserts(gm: fx.GraphModule) -> None:
    """Remove ``torch._assert`` calls and the shape reads nothing uses any more (timm's
    ``_assert(x.ndim == 4)``): a check of a shape the trace fixed, whose reading of ``x``
    would otherwise make ``conv -> bn`` look shared and stop the batch norm's folding."""
    graph, changed = gm.graph, False
    for node in reversed(list(graph.nodes)):  # users come after: one pass reaches every dead check
        check = node.op == "call_function" and node.target is torch._assert
        pure = node.op == "call_function" and node.target in _SHAPE_CHECKS
        pure = pure or (node.op == "call_method" and node.target in ("size", "dim"))
        if check or (pure and not node.users):
            graph.erase_node(node)
            changed = True
    if changed:
        graph.lint()
        gm.recompile()


def _hf_fx(model: nn.Module, sample: Sequence[torch.Tensor], names: Sequence[str]) -> Captured:
    try:
        from transformers import PreTrainedModel
        from transformers.utils.fx import symbolic_trace
    except ImportError:
        raise _NotApplicable("not in this transformers version (5 and later have no fx tracer)") from None
    if not isinstance(model, PreTrainedModel):
        raise _NotApplicable("not a transformers PreTrainedModel")
    return Captured(symbolic_trace(model, input_names=list(names)), "transformers.utils.fx")


def _export(model: nn.Module, sample: Sequence[torch.Tensor], names: Sequence[str]) -> Captured:
    params = input_names(model) or []
    if set(names) <= set(params):
        program = torch.export.export(model, (), dict(zip(names, sample)), strict=False)
    else:  # forward(*args)
        program = torch.export.export(model, tuple(sample), strict=False)
    gm = program.module()
    if inplace.mutates(gm):  # x[:, 0] = 0, x.relu_(): out-of-place ops that say the same (select_scatter...)
        gm = program.run_decompositions({}).module()
    out_spec = gm._out_spec  # the output's pytree structure: a ModelOutput stays one
    gm.graph._codegen = fx.graph.CodeGen()  # flat inputs and outputs; the builder restores the structure
    for node in reversed(list(gm.graph.nodes)):  # torch.export's checks of its inputs: not the model's
        check = node.op == "call_function" and node.target is torch.ops.aten._assert_tensor_metadata.default
        if check or (node.op == "call_module" and node.target == "_guards_fn"):
            gm.graph.erase_node(node)
    gm._forward_pre_hooks.clear()
    gm.recompile()
    return Captured(gm, "torch.export", out_spec=out_spec)


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
