"""What the PyTorch reader checks on the user's model and on its private copy.

    check_not_meta(model)            a model on the meta device: ModelReadError
    in_float32(copy)                 a float16 / bfloat16 / float64 copy made float32: the warning
    check_hooks(copy, sample)        hooks that change the output: ModelReadError; others: the warning

The quantized model is built from the graph and cannot call the user's forward hooks or
pre-hooks, so a hook that changes what the model computes would silently give a different
function. The copy runs once on the sample with its hooks and once without: a difference
(or a failure only with the hooks) is refused by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from model_compression_toolkit.errors import ModelReadError
from model_compression_toolkit.pytorch.ops import as_tensor, map_structure


def check_not_meta(model: nn.Module) -> None:
    """Refuse a model whose tensors are on the ``meta`` device (shapes, no values)."""
    on_meta = [name for name, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta]
    if on_meta:
        shown = ", ".join(on_meta[:3]) + (f" and {len(on_meta) - 3} more" if len(on_meta) > 3 else "")
        raise ModelReadError(
            f"expected a model with weights; the tensors of {type(model).__name__} ({shown}) are on the "
            "'meta' device, which holds shapes but no values. Load its weights first: "
            "model.to_empty(device='cpu') then model.load_state_dict(state_dict), or load the model "
            "without device_map='meta' / low_cpu_mem_usage tricks."
        )


def in_float32(work: nn.Module) -> str | None:
    """Make the private copy float32; the warning that says so, if it was not."""
    dtypes = sorted(
        {
            str(t.dtype).removeprefix("torch.")
            for t in (*work.parameters(), *work.buffers())
            if t.is_floating_point() and t.dtype != torch.float32
        }
    )
    if not dtypes:
        return None
    work.float()
    back = ", ".join(f"q_model.to(torch.{d})" for d in dtypes)
    return (
        f"{type(work).__name__} holds {' and '.join(dtypes)} weights: it is read, calibrated and "
        f"quantized in float32, so the quantized model computes in float32 (and takes float32 "
        f"inputs). To run it in the original precision, convert it: {back}."
    )


def forward_hooks(model: nn.Module) -> list[str]:
    """Each forward hook and pre-hook of ``model``, described: ``forward hook 'f' on 'conv1' (Conv2d)``."""
    found = []
    for path, module in model.named_modules():
        where = (
            f"{path!r} ({type(module).__name__})" if path else f"the model itself ({type(module).__name__})"
        )
        for kind, attr in (("forward pre-hook", "_forward_pre_hooks"), ("forward hook", "_forward_hooks")):
            for hook in getattr(module, attr, {}).values():
                found.append(f"{kind} {getattr(hook, '__name__', type(hook).__name__)!r} on {where}")
    return found


def check_hooks(work: nn.Module, sample_inputs: Sequence[Any]) -> str | None:
    """Run ``work`` on the sample with its hooks and without, and remove them; refuse hooks
    that change the output (the quantized model cannot call them), else the warning that
    names them (None when there are none)."""
    hooks = forward_hooks(work)
    if not hooks:
        return None
    name = type(work).__name__
    device = next((t.device for t in (*work.parameters(), *work.buffers())), torch.device("cpu"))
    inputs = [as_tensor(x, device) for x in sample_inputs]
    keywords = getattr(sample_inputs, "names", None)  # a dict batch: forward's keyword inputs

    def run() -> Any:
        return work(**dict(zip(keywords, inputs))) if keywords else work(*inputs)

    listed = "; ".join(hooks)
    how = (
        "Put what they do into the model's forward (or a module of their own), or, to quantize the "
        "model without them, remove them first (handle.remove() on the handle that "
        "register_forward_hook / register_forward_pre_hook returned)."
    )
    with torch.no_grad():
        try:
            hooked: list[torch.Tensor] | None = _flat_tensors(run())
            failure = None
        except Exception as e:  # noqa: BLE001 - compared with the run without hooks below
            hooked, failure = None, e
        for module in work.modules():
            module._forward_hooks.clear()
            module._forward_pre_hooks.clear()
        try:
            plain = _flat_tensors(run())
        except Exception:  # noqa: BLE001 - the read itself reports what the model cannot run on
            return f"{name} has hooks the quantized model does not call: {listed}."
    if failure is not None:
        raise ModelReadError(
            f"expected hooks the quantized model can do without; {name} runs on the representative data "
            f"without its hooks but fails with them ({type(failure).__name__}: {failure}): {listed}. {how}"
        ) from failure
    difference = _difference(hooked, plain)
    if difference:
        raise ModelReadError(
            f"expected hooks that do not change the model's output, since the quantized model cannot call "
            f"them; {name} has {listed}, and with them its output on the representative data differs "
            f"({difference}). {how}"
        )
    return (
        f"{name} has hooks that the quantized model does not call: {listed}. They do not change the "
        "model's output on the representative data, so the model is quantized without them."
    )


def _flat_tensors(value: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    map_structure(value, lambda leaf: out.append(leaf) if isinstance(leaf, torch.Tensor) else None)
    return out


def _difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> str:
    """How two flattened outputs differ ("" when they are equal, NaN included)."""
    if len(a) != len(b):
        return f"{len(a)} output tensors with the hooks, {len(b)} without"
    for i, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape:
            return f"output {i} has shape {tuple(x.shape)} with the hooks, {tuple(y.shape)} without"
        same = (x == y) | (x.isnan() & y.isnan()) if x.is_floating_point() else x == y
        if not bool(same.all()):
            gap = (x.double() - y.double()).abs().nan_to_num(nan=float("inf")).max().item()
            return f"output {i}: by up to {gap:.4g}"
    return ""


# Float tolerance of the read check: the read graph calls the same ops on the same weights,
# so only the order of float sums may differ; a misread differs by tens of percent.
_READ_RTOL = 1e-3


def check_read(
    work: nn.Module,
    gm: Any,
    graph: Any,
    inputs: Sequence[torch.Tensor],
    keywords: Sequence[str] | None,
    node_names: dict[str, str],
) -> None:
    """Refuse a graph that does not compute what the model computes (`ModelReadError`).

    ``work`` (the private copy) and the float model built back from ``graph`` run on the
    first batch (``inputs``, copied: an in-place op must not write the user's batch); an
    output that differs beyond float tolerance names the first layer whose output differs
    from the same fx node of ``gm`` (the captured graph, names mapped by ``node_names``),
    else the output. A model whose own output changes from run to run is not checked.
    """
    from model_compression_toolkit.pytorch import builder

    def run_model() -> list[torch.Tensor]:
        fresh = [t.clone() for t in inputs]
        with torch.no_grad():
            return _flat_tensors(work(**dict(zip(keywords, fresh))) if keywords else work(*fresh))

    want = run_model()
    with torch.no_grad():
        got = _flat_tensors(builder.build(graph, False)(*(t.clone() for t in inputs)))
    bad = _first_mismatch(want, got)
    if bad is None or _first_mismatch(want, run_model()) is not None:
        return  # the same, or the model itself differs from run to run (random ops): nothing to compare
    index, how = bad
    where = _first_layer(gm, graph, inputs, node_names)
    raise ModelReadError(
        f"expected the graph read from {type(work).__name__} to compute what the model computes; on the "
        f"first representative batch its output {index} {how}{where}. The reader did not follow what the "
        "model does there (a tensor changed in place through another view of it, or `x += y` on a tensor "
        "another name still holds). Assign the result instead (z = z.relu(), z = z + y) and quantize "
        "again, or report the model."
    )


def _first_mismatch(want: list[torch.Tensor], got: list[torch.Tensor]) -> tuple[int | str, str] | None:
    if len(want) != len(got):
        return "count", f"is {len(got)} tensors where the model returns {len(want)}"
    for i, (a, b) in enumerate(zip(want, got)):
        how = _mismatch(a, b)
        if how:
            return i, how
    return None


def _mismatch(want: torch.Tensor, got: torch.Tensor) -> str:
    """How ``got`` differs from ``want`` beyond float tolerance ("" when it does not)."""
    if tuple(want.shape) != tuple(got.shape):
        return f"has shape {tuple(got.shape)} where the model's has {tuple(want.shape)}"
    a, b = want.detach().to("cpu", torch.float64), got.detach().to("cpu", torch.float64)
    if not (want.is_floating_point() or want.is_complex()):
        wrong = (a != b).double().mean().item()
        return f"differs in {wrong:.1%} of its values" if wrong > 1e-3 else ""
    finite = a.isfinite()
    if not bool((finite == b.isfinite()).all()) or not bool((a[~finite] == b[~finite]).all()):
        return "has NaN or infinite values where the model's has others"
    if not bool(finite.any()):
        return ""
    scale = a[finite].abs().max().item()
    gap = (a - b)[finite].abs().max().item()
    return (
        f"differs by up to {gap:.3g} (the model's largest value is {scale:.3g})"
        if gap > _READ_RTOL * scale + 1e-6
        else ""
    )


def _first_layer(gm: Any, graph: Any, inputs: Sequence[torch.Tensor], node_names: dict[str, str]) -> str:
    """ ", first at layer 'b' (Linear)": the first graph node whose float output differs from
    its fx node's output in ``gm``, or "" when every layer agrees (the capture itself differs)."""
    from torch import fx

    from model_compression_toolkit.pytorch import builder

    reference: dict[str, torch.Tensor] = {}

    class _Record(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            result = super().run_node(n)
            if isinstance(result, torch.Tensor) and n.name in node_names:
                reference[node_names[n.name]] = result.detach().clone()  # before a later op writes it
            return result

    built: dict[str, torch.Tensor] = {}

    def tap(name: str, value: Any) -> None:
        built[name] = torch.as_tensor(value).clone()

    try:
        with torch.no_grad():
            _Record(gm).run(*(t.clone() for t in inputs))
            names = [n.name for n in graph.nodes() if n.name in reference]
            builder.build(graph, False, names, tap=tap)(*(t.clone() for t in inputs))
    except Exception:  # noqa: BLE001 - the message then names the output only
        return ""
    for node in graph.nodes():
        if (
            node.name in reference
            and node.name in built
            and _mismatch(reference[node.name], built[node.name])
        ):
            return f", first at layer {node.name!r} ({node.layer_type})"
    return ""
