"""Shapes and dtypes of a traced model, from running it on the sample, node by node.

The reader (`pytorch.reader`) runs the model on the representative data's first batch and
on a batch of another size: a dimension that changes with the batch size is the batch
dimension (None in the graph's shapes). A failure says at which node, and when integer or
bool inputs are why, that they must be float.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import fx

from model_compression_toolkit.errors import InputMismatchError
from model_compression_toolkit.pytorch.ops import as_tensor


class _Shapes(fx.Interpreter):
    """Runs the traced model on a sample node by node, recording the shapes of the tensors
    each node returns, whether any of them is floating-point, each input's dtype, and the
    node it is running, to say where the model failed. (torch.fx's ShapeProp records the
    same, but its first run imports the symbolic-shapes machinery and sympy: half a second
    of every first PTQ call.)"""

    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__(gm)
        self.current: fx.Node | None = None
        self.shapes: dict[str, list[tuple]] = {}
        self.floating: dict[str, bool] = {}
        self.complex: set[str] = set()  # nodes whose tensors are complex (torch.fft's)
        self.dtypes: dict[str, str] = {}

    def run_node(self, n: fx.Node) -> Any:
        self.current = n
        result = super().run_node(n)
        tensors = _tensors(result)
        self.shapes[n.name] = [tuple(int(d) for d in t.shape) for t in tensors]
        self.floating[n.name] = any(t.is_floating_point() for t in tensors)
        if any(t.is_complex() for t in tensors):
            self.complex.add(n.name)
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
            run.run(*(t.clone() for t in inputs))  # an in-place op must not write the user's batch
    except Exception as e:
        cause = e.__cause__ or e
        at = run.current
        where = "" if at is None else f" at {at.target if at.op == 'call_module' else at.name!r}"
        raise RuntimeError(f"{type(cause).__name__}{where}: {cause}") from cause
    return run


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def propagate(
    gm: fx.GraphModule, sample: Sequence[Any], model_name: str
) -> tuple[dict[str, list[tuple]], dict[str, str], dict[str, bool], set[str]]:
    """Shapes on the sample, with None on the dims that change with the batch size, the
    inputs' dtypes, whether each node's output holds a floating-point tensor, and the nodes
    whose outputs hold a complex one."""
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
    batch = next((t.shape[0] for t in inputs if t.dim() > 0), None)
    real = None
    if batch is not None and batch > 2:  # 2 samples and 1 tell the batch dims as the batch does
        few = [t[:2] if t.dim() > 0 and t.shape[0] == batch else t for t in inputs]
        with contextlib.suppress(RuntimeError):  # a model that runs on its batch size only
            real, inputs, batch = _run_shapes(gm, few), few, 2
    try:
        real = real if real is not None else _run_shapes(gm, inputs)
    except RuntimeError as e:
        _check_dtypes(gm, inputs, placeholders, model_name, e)
        raise InputMismatchError(
            f"expected inputs that {expected} can run on; got inputs of shapes {given}, on which "
            f"torch failed with {e}. Check the shapes the representative data yields."
        ) from e
    if batch is None:
        return real.shapes, real.dtypes, real.floating, real.complex
    alt_inputs = [
        (t[:1] if batch > 1 else torch.cat([t, t])) if t.dim() > 0 and t.shape[0] == batch else t
        for t in inputs
    ]
    try:
        alt = _run_shapes(gm, alt_inputs).shapes
    except RuntimeError:  # a model fixed to one batch size (or a captured graph): dim 0 is the batch
        alt = None
    shapes = {name: _batch_none(shapes, alt and alt.get(name), batch) for name, shapes in real.shapes.items()}
    return shapes, real.dtypes, real.floating, real.complex


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
