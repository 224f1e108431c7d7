"""ONNX export by tracing with real tensors, for models ``torch.export`` cannot capture.

onnx2torch's modules read their constant inputs' values (``Reshape`` asks
``torch.any(shape == 0)``, ``Slice`` calls ``.numpy()`` on its axes). ``torch.export``
lifts every tensor attribute to an input without a value, so such a branch is
data-dependent to it, though it is the same on every call; a trace takes the branch the
constant takes::

    export module -> torch.onnx.export(dynamo=False): a trace with real tensors

The exporter traces the model itself (`_Traced`), not a ``torch.jit.trace`` of it: it
needs the rank of every tensor it splits, and in a ScriptModule a tensor attribute read by
``prim::GetAttr`` has none (PP-OCR's recognizer: ``for start, end in zip(starts, ends)``
in onnx2torch's Slice unbinds its constant bounds: "Input rank must be known at export
time"). Freezing the ScriptModule instead would fold each weight's ``dequantize`` into a
float constant.
"""

from __future__ import annotations

import io
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.errors import ExportError
from model_compression_toolkit.pytorch import onnx_support

TRACED_OPSET = 17  # the TorchScript exporter's newest well-supported opset


def reads_constants(err: BaseException) -> bool:
    """Whether torch.export stopped at code reading a tensor's values: a data-dependent
    branch, or ``.numpy()`` on a lifted constant."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, GuardOnDataDependentSymNode) or "not supported for tensor subclasses" in str(
            seen
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def write(
    model: nn.Module, args: tuple, path: Path, graph: Graph, opset: int
) -> tuple[list[str], dict[str, float]]:
    """Export the export module ``model`` (`export.export_module`) by tracing it with
    ``args``; the notes and the figures of the bias pass (`onnx_model.finish`), as
    `export.write_onnx` returns them.

    The batch dimension stays dynamic when the traced file runs a batch of another size; a
    module that reads its input's shape as numbers (onnx2torch's Softmax reshapes to the
    shape it read) keeps the example's batch size as a constant, and then the file takes
    that batch size only, and a note says so.
    """
    from model_compression_toolkit.pytorch import onnx_model

    opset = min(opset, TRACED_OPSET)
    register_symbolics(opset)
    proto, notes = _trace(model, args, graph, opset, dynamic=True), []
    if not _runs_one_sample(proto, args):
        proto = _trace(model, args, graph, opset, dynamic=False)
        notes.append(
            f"the ONNX model takes batches of {len(args[0])} samples only: traced, its code holds the batch size "
            "as a constant"
        )
    return notes, onnx_model.finish(proto, path, graph)


def _trace(model: nn.Module, args: tuple, graph: Graph, opset: int, dynamic: bool) -> Any:
    """The ModelProto of the TorchScript exporter's trace of ``model``."""
    import onnx

    buffer = io.BytesIO()
    names = onnx_support.input_names(graph)
    axes = {n: {0: "batch"} for n, a in zip(names, args) if a.dim() > 0} if dynamic else None
    with (
        warnings.catch_warnings(),
        torch.no_grad(),
        onnx_support.quiet_onnx_logging(),
        _opset_for_converted(opset),
    ):
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(
                _Traced(model), args, buffer, dynamo=False, opset_version=opset, input_names=names,
                dynamic_axes=axes,
            )  # fmt: skip
        except Exception as err:  # noqa: BLE001 - the TorchScript exporter's many error types
            raise ExportError(
                f"torch.onnx.export (traced) could not export the quantized model: {onnx_support.first_line(err)}"
            ) from err
    return onnx.load_model_from_string(buffer.getvalue())


def _runs_one_sample(proto: Any, args: tuple) -> bool:
    """Whether onnxruntime runs the traced file on the example's first sample alone (a
    batch size other than the trace's). Files over 2 GiB are not tried."""
    import onnxruntime as ort

    if any(a.dim() == 0 or len(a) < 2 for a in args) or proto.ByteSize() > 2**31 - 1:
        return True
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
        session.run(None, {i.name: a[:1].numpy() for i, a in zip(session.get_inputs(), args)})
    except Exception:  # noqa: BLE001 - onnxruntime's errors: a shape it cannot reshape
        return False
    return True


@contextmanager
def _opset_for_converted(opset: int) -> Iterator[None]:
    """onnx2torch's modules read the export's opset from ``torch.onnx.symbolic_helper``:
    its ``GLOBALS``, or (torch 1.x) ``_export_onnx_opset_version``. Once any import names
    the submodule ``torch.onnx.symbolic_helper``, that name holds torch's backward-compatible
    module, which has neither, and a converted model's export fails with an AttributeError
    depending on what was imported before. That module gets the opset while the export runs."""
    compat = sys.modules.get("torch.onnx.symbolic_helper")
    if compat is None or hasattr(compat, "GLOBALS") or hasattr(compat, "_export_onnx_opset_version"):
        yield
        return
    compat._export_onnx_opset_version = opset
    try:
        yield
    finally:
        del compat._export_onnx_opset_version


class _Traced(nn.Module):
    """``model`` behind a plain module: the exporter traces it itself, and so knows the
    shape of every parameter and buffer (an ``fx.GraphModule`` passed as it is would be
    taken for a program: "'Graph' object has no attribute 'outputs'")."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: torch.Tensor) -> Any:
        return self.model(*args)


def register_symbolics(opset: int) -> None:
    """The library's two ops as ONNX's own, for the TorchScript exporter
    (`export.onnx_translations` does it for dynamo)."""
    from torch.onnx import register_custom_op_symbolic, symbolic_helper, symbolic_opset11

    types = {"int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16, "uint16": torch.uint16}

    @symbolic_helper.parse_args("v", "f", "i", "i", "i", "s")
    def quantize_dequantize(
        g: Any, x: Any, scale: float, zero_point: int, lo: int, hi: int, dtype: str
    ) -> Any:
        s = g.op("Constant", value_t=torch.tensor(scale, dtype=torch.float32))
        zp = g.op("Constant", value_t=torch.tensor(zero_point, dtype=types[dtype]))
        q = g.op("QuantizeLinear", x, s, zp)
        if (lo, hi) != onnx_support.integer_range(dtype):  # a grid narrower than its type: stay on it
            bounds = [g.op("Constant", value_t=torch.tensor(v, dtype=types[dtype])) for v in (lo, hi)]
            q = g.op("Clip", q, *bounds)
        return g.op("DequantizeLinear", q, s, zp)

    @symbolic_helper.parse_args("v", "v", "v", "i")
    def dequantize(g: Any, q: Any, scale: Any, zero_point: Any, axis: int) -> Any:
        return g.op("DequantizeLinear", q, scale, zero_point, axis_i=axis)

    register_custom_op_symbolic(f"{onnx_support.NAMESPACE}::quantize_dequantize", quantize_dequantize, opset)
    # the exporter writes ``clamp`` but not its alias ``clip`` (onnx2torch's Clip calls torch.clip)
    register_custom_op_symbolic("aten::clip", symbolic_opset11.clamp, opset)
    register_custom_op_symbolic(f"{onnx_support.NAMESPACE}::dequantize", dequantize, opset)
