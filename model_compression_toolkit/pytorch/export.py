"""The quantized graph written for a PyTorch runtime: ONNX (QuantizeLinear/DequantizeLinear) or TorchScript.

For ONNX the graph is built again with two ops of this library's own, which
``torch.onnx.export`` writes as ONNX's quantization ops::

    prev -> conv(dequantize(kernel integers, scales, zero points, axis=0)) -> quantize_dequantize -> next
            |                                                                 |
            int8 initializer -> DequantizeLinear                              QuantizeLinear -> DequantizeLinear

The kernel is stored as the integers the quantized model's weights are made of (per
output channel), each activation is quantized per tensor on its grid, stored as uint8
(`core.export.grids`: the same values, moved by an offset). Everything between is the float
model the quantized model runs, so onnxruntime's graph optimizations can fuse each
``DequantizeLinear -> Conv -> QuantizeLinear`` into an integer kernel (``QLinearConv``).
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import fx, nn

from model_compression_toolkit.core.backend import Exporter, Runtime, Taps, Written
from model_compression_toolkit.core.calibration.quantizers import QuantizedWeights
from model_compression_toolkit.core.export.grids import (
    StoredGrid,
    float_tail_notes,
    integer_values,
    needs_16_bits,
    onnx_problems,
    stored_grid,
)
from model_compression_toolkit.core.export.report import FLOOR_NOISE, ExportedGraph
from model_compression_toolkit.core.graph import Graph, Node
from model_compression_toolkit.errors import ExportError, GraphValidationError, MissingDependencyError
from model_compression_toolkit.pytorch import builder, ops
from model_compression_toolkit.pytorch.onnx_support import (
    NAMESPACE,
    first_line,
    input_names,
    integer_range,
    quiet_onnx_logging,
)


# ------------------------------------------------------------------ the two ops
@torch.library.custom_op(f"{NAMESPACE}::quantize_dequantize", mutates_args=())
def quantize_dequantize(
    x: torch.Tensor, scale: float, zero_point: int, lo: int, hi: int, dtype: str
) -> torch.Tensor:
    """``(clamp(round(x / scale) + zero_point, lo, hi) - zero_point) * scale`` in float32.

    ``zero_point``, ``lo`` and ``hi`` are stored integers of ``dtype`` (`core.export.grids.StoredGrid`).
    """
    y = x.to(torch.float32)
    s = torch.tensor(scale, dtype=torch.float32)
    q = torch.clamp(torch.round(y / s) + zero_point, lo, hi)
    return ((q - zero_point) * s).to(x.dtype)


@quantize_dequantize.register_fake
def _(x: torch.Tensor, scale: float, zero_point: int, lo: int, hi: int, dtype: str) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op(f"{NAMESPACE}::dequantize", mutates_args=())
def dequantize(q: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, axis: int) -> torch.Tensor:
    """``(q - zero_point) * scale`` in float32, per channel along ``axis`` when ``scale`` has one per channel."""
    shape = [1] * q.dim()
    if scale.dim() == 1 and q.dim() > 0:
        shape[axis] = -1
    return (q.to(torch.float32) - zero_point.to(torch.float32).reshape(shape)) * scale.reshape(shape)


@dequantize.register_fake
def _(q: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, axis: int) -> torch.Tensor:
    return torch.empty(q.shape, dtype=torch.float32, device=q.device)


def onnx_translations() -> dict[Any, Any]:
    """``custom_translation_table`` for ``torch.onnx.export``: the two ops as ONNX's own."""
    import onnx_ir as ir
    from onnxscript import opset18 as op

    types = {"int8": ir.DataType.INT8, "uint8": ir.DataType.UINT8, "int16": ir.DataType.INT16}
    types["uint16"] = ir.DataType.UINT16

    def _quantize_dequantize(x, scale: float, zero_point: int, lo: int, hi: int, dtype: str):
        s = op.Constant(value_float=float(scale))
        zp = op.Cast(op.Constant(value_int=int(zero_point)), to=types[dtype])
        q = op.QuantizeLinear(x, s, zp)
        if (lo, hi) != integer_range(dtype):  # a grid narrower than its type: stay on it
            q = op.Clip(
                q,
                op.Cast(op.Constant(value_int=lo), to=types[dtype]),
                op.Cast(op.Constant(value_int=hi), to=types[dtype]),
            )
        return op.DequantizeLinear(q, s, zp)

    def _dequantize(q, scale, zero_point, axis: int):
        return op.DequantizeLinear(q, scale, zero_point, axis=axis)

    return {
        torch.ops.model_compression_toolkit.quantize_dequantize.default: _quantize_dequantize,
        torch.ops.model_compression_toolkit.dequantize.default: _dequantize,
    }


# ------------------------------------------------------------------ the model ONNX is traced from
ACTIVATION_DTYPE = "uint8"  # onnxruntime's fast x86 kernels take uint8 activations with int8 weights


def activation_storage(grid: Any) -> StoredGrid:
    """An activation grid as ONNX stores it: uint8 up to 8 bits, uint16 above."""
    stored = stored_grid(grid, ACTIVATION_DTYPE) or stored_grid(grid, "uint16")
    if stored is None:
        raise ExportError(f"an activation grid of {grid.qmax - grid.qmin + 1} levels does not fit 16 bits")
    return stored


def weight_storage(grid: Any) -> StoredGrid:
    """A weight grid as ONNX stores it: int8 (uint8 for a grid with a zero point) up to 8 bits, 16 bits above."""
    for dtype in ("int8", "uint8", "int16", "uint16"):
        stored = stored_grid(grid, dtype)
        if stored is not None and stored.offset == 0:
            return stored
    stored = stored_grid(grid, "uint8") or stored_grid(grid, "uint16")
    if stored is None:
        raise ExportError(f"a weight grid of {grid.qmax - grid.qmin + 1} levels does not fit 16 bits")
    return stored


class DequantizedWeights(nn.Module):
    """``module`` called with its quantized weights made from stored integers::

        x -> module(x; weight = dequantize(weight_q, weight_scale, weight_zero_point, axis)) -> y

    The float weights are removed from ``module``: the integers are the only copy, and
    ``torch.func.functional_call`` puts the dequantized tensors in their place per call.
    """

    def __init__(self, module: nn.Module, node: Node, quantized: Mapping[str, np.ndarray]) -> None:
        super().__init__()
        self.module = module
        self.node_name = node.name
        self.axes: dict[str, int] = {}
        for wname, cfg in node.quant.weights.items():
            if cfg.grid is None:
                continue
            path = ops.WEIGHT_NAMES.get(node.kind, {}).get(wname, wname)
            owner_path, _, attr = path.rpartition(".")
            owner = module.get_submodule(owner_path) if owner_path else module
            delattr(owner, attr)
            stored = weight_storage(cfg.grid)
            key = path.replace(".", "_")
            # the quantized model's weights (a kernel rounded with its errors compensated is
            # not its float kernel rounded to nearest): on the grid, so exactly their integers
            integers = integer_values(quantized[wname], cfg.grid, cfg.channel_axes, stored)
            self.register_buffer(f"{key}_q", torch.from_numpy(np.ascontiguousarray(integers)))
            self.register_buffer(f"{key}_scale", torch.from_numpy(stored.scale.astype(np.float32)))
            zp = stored.zero_point.astype(stored.dtype)
            self.register_buffer(f"{key}_zero_point", torch.from_numpy(np.ascontiguousarray(zp)))
            axes = cfg.channel_axes if stored.scale.size > 1 else (0,)
            self.axes[path] = int(axes[0]) % max(1, integers.ndim)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        weights = {}
        for path, axis in self.axes.items():
            key = path.replace(".", "_")
            weights[path] = torch.ops.model_compression_toolkit.dequantize(
                getattr(self, f"{key}_q"),
                getattr(self, f"{key}_scale"),
                getattr(self, f"{key}_zero_point"),
                axis,
            )
        if not torch.jit.is_tracing():
            return torch.func.functional_call(self.module, weights, args, kwargs, strict=False)
        for path, value in weights.items():  # torch.jit.trace refuses functional_call (`_write_traced`)
            owner_path, _, attr = path.rpartition(".")
            setattr(self.module.get_submodule(owner_path) if owner_path else self.module, attr, value)
        try:
            return self.module(*args, **kwargs)
        finally:
            for path in weights:
                owner_path, _, attr = path.rpartition(".")
                delattr(self.module.get_submodule(owner_path) if owner_path else self.module, attr)

    def extra_repr(self) -> str:
        return f"node={self.node_name!r}"


def _quantize(fx_graph: fx.Graph, node: Node, value: fx.Node) -> fx.Node:
    act = node.quant.activation
    if act is None or act.grid is None:
        return value
    stored = activation_storage(act.grid)
    args = (value, float(stored.scale), int(stored.zero_point), stored.lo, stored.hi, stored.dtype)
    return fx_graph.call_function(torch.ops.model_compression_toolkit.quantize_dequantize.default, args)


def export_module(graph: Graph) -> fx.GraphModule:
    """The quantized model of ``graph`` in the ops ONNX export writes as QDQ (module docstring).

    Computes what the quantized model computes, but for the float32 rounding of each
    weight's scale; returns a flat tuple of the graph outputs.
    """
    weights = QuantizedWeights(graph)
    fx_graph, root, targets = fx.Graph(), {}, builder._Targets()
    values: dict[str, fx.Node] = {}
    for name in graph.inputs:
        node = graph.node(name)
        target = (node.payload or {}).get("target") or builder._identifier(name)
        values[name] = _quantize(fx_graph, node, fx_graph.placeholder(target))
    for node in graph.nodes():
        if node.name in values:
            continue
        inputs = [values[e.src] for e in graph.in_edges(node.name)]
        out = builder._emit(fx_graph, node, inputs, root, targets, True, weights)
        if any(c.grid is not None for c in node.quant.weights.values()):
            if out.op != "call_module":
                raise GraphValidationError(
                    f"expected {node.name!r} ({node.layer_type}), a layer with quantized weights, to be a module "
                    f"call; it is a {out.op}. This is a bug in the library: please report it."
                )
            root[out.target] = DequantizedWeights(root[out.target], node, weights[node.name])
        values[node.name] = _quantize(fx_graph, node, out)
    fx_graph.output(tuple(values[name] for name, _ in graph.outputs))
    model = fx.GraphModule(root, fx_graph, class_name=graph.name).cpu().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


# ------------------------------------------------------------------ the rounding floor
class RoundingFloor(nn.Module):
    """The quantized model with each quantizer's input moved by float32 rounding noise::

        prev -> x * (1 + noise * u) -> quantize_dequantize -> next      (u uniform in [-1, 1])

    A runtime computes each layer's sums in its own order, so a value within float32
    rounding of a rounding boundary can land one step off; on a deep network each such step
    moves the next layers' sums, and the steps multiply. This model shows how far that
    alone takes the outputs: the parity any runtime can reach. Noise on the model's inputs
    shows nothing, as the input quantizer rounds it away.
    """

    def __init__(self, graph: Graph, noise: float, seed: int = 0) -> None:
        super().__init__()
        self.model, self.noise = export_module(graph), noise
        self.generator = torch.Generator().manual_seed(seed)

    def forward(self, *args: torch.Tensor) -> Any:
        return _Jittered(self.model, self.noise, self.generator).run(*args)


class _Jittered(fx.Interpreter):
    """Runs an export module with `RoundingFloor`'s noise before each ``quantize_dequantize``."""

    def __init__(self, module: fx.GraphModule, noise: float, generator: torch.Generator) -> None:
        super().__init__(module)
        self.noise, self.generator = noise, generator

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        if target is torch.ops.model_compression_toolkit.quantize_dequantize.default:
            x = args[0]
            u = torch.rand(x.shape, generator=self.generator, dtype=torch.float32) * 2 - 1
            args = ((x * (1 + self.noise * u)).to(x.dtype), *args[1:])
        return super().call_function(target, args, kwargs)


# ------------------------------------------------------------------ writing
def write_onnx(
    graph: Graph, example: Sequence[np.ndarray], path: Path, opset: int
) -> tuple[list[str], dict[str, float]]:
    """Export ``graph``'s quantized model to ONNX at ``path``; the notes to show the user and
    the figures of the bias pass (`onnx_model.finish`).

    The batch dimension is dynamic when the model allows it; else the model takes the
    example's batch size only, and a note says so.
    """
    from model_compression_toolkit.pytorch import onnx_model, traced_export

    model = export_module(graph)
    args = tuple(ops.as_tensor(x) for x in _at_least_two(example))
    notes: list[str] = []
    batch = torch.export.Dim("batch")
    dynamic = tuple({0: batch} if a.dim() > 0 else None for a in args)
    try:
        program = _capture(model, args, dynamic)
    except Exception as err:  # noqa: BLE001 - e.g. a model whose batch size is fixed in its code: try without
        if traced_export.reads_constants(err):
            return traced_export.write(model, args, path, graph, opset)
        try:
            program = _capture(model, args, None)
        except Exception as err:  # noqa: BLE001 - torch.export's many error types
            if traced_export.reads_constants(err):
                return traced_export.write(model, args, path, graph, opset)
            raise ExportError(
                f"torch.export could not capture the quantized model: {first_line(err)}"
            ) from err
        notes.append(
            f"the ONNX model takes batches of {len(args[0])} samples only: its batch size is fixed in its code"
        )
    try:
        onnx_program = _export(program, opset, input_names(graph))
    except Exception as err:  # noqa: BLE001 - the ONNX translation's many error types
        raise ExportError(
            f"torch.onnx.export could not export the quantized model: {first_line(err)}"
        ) from err
    figures = onnx_model.finish(onnx_program.model_proto, path, graph)
    return notes, figures


def _at_least_two(example: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The example batch, repeated to two samples if it has one: torch.export treats a
    batch of one as a constant size."""
    return [np.concatenate([x, x]) if np.ndim(x) > 0 and len(x) == 1 else x for x in example]


def _capture(model: nn.Module, args: tuple, dynamic: Any) -> Any:
    """The model as a ``torch.export`` program (``strict=False``)."""
    with warnings.catch_warnings(), quiet_onnx_logging():
        warnings.simplefilter("ignore", (DeprecationWarning, FutureWarning, UserWarning))
        return torch.export.export(model, args, dynamic_shapes=dynamic, strict=False)


def _export(program: Any, opset: int, inputs: list[str]) -> Any:
    """``torch.onnx.export`` of the captured ``program``; the outputs are named afterwards
    (`onnx_model.name_outputs`), as the exporter's own renaming can give two tensors one name."""
    with warnings.catch_warnings(), quiet_onnx_logging():
        warnings.simplefilter("ignore", (DeprecationWarning, FutureWarning, UserWarning))
        return torch.onnx.export(
            program, dynamo=True, opset_version=opset, input_names=inputs,
            custom_translation_table=onnx_translations(), verbose=False, report=False,
        )  # fmt: skip


def write_torchscript(q_model: nn.Module, example: Sequence[np.ndarray], path: Path) -> list[str]:
    """Trace the quantized model itself (fake quantization in float) and save it with ``torch.jit.save``."""
    args = tuple(ops.as_tensor(x) for x in example)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit is deprecated for torch.export
        traced = torch.jit.trace(q_model, args, check_trace=False)
        torch.jit.save(traced, str(path))
    return [
        "TorchScript (torch.jit) is deprecated by PyTorch in favour of torch.export; prefer ONNX to deploy"
    ]


# ------------------------------------------------------------------ the exporters (`core.backend`)
DEFAULT_ONNX_OPSET = 18


def _require(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingDependencyError(
            f"ONNX export needs {', '.join(missing)}, which is not installed. "
            'Install it with: pip install "model_compression_toolkit[export]"'
        )


class _TorchExporter(Exporter):
    """What both PyTorch exporters share: the graph, the quantized model and its layers."""

    def __init__(self, graph: Graph, q_model: nn.Module) -> None:
        self.graph, self.q_model = graph, q_model

    def layers(self) -> list[tuple[str, Any]]:
        return [(name, m) for name, m in self.q_model.named_modules() if name and not list(m.children())]


class OnnxExporter(_TorchExporter):
    """PyTorch -> ONNX with QuantizeLinear/DequantizeLinear pairs, run by onnxruntime."""

    serialization, quantization = "ONNX", "FAKELY_QUANT"
    integer_bias = True  # the file holds int32 biases (`onnx_model.quantize_biases`)

    def __init__(self, graph: Graph, q_model: nn.Module, onnx_opset_version: int | None = None) -> None:
        super().__init__(graph, q_model)
        _require("onnx", "onnxscript", "onnxruntime")
        if onnx_opset_version is not None and (
            isinstance(onnx_opset_version, bool) or not isinstance(onnx_opset_version, int)
        ):
            raise ExportError(
                f"onnx_opset_version must be an integer (13 or later) or None; got {onnx_opset_version!r}"
            )
        self.opset = onnx_opset_version or (21 if needs_16_bits(graph) else DEFAULT_ONNX_OPSET)

    def problems(self) -> list[str]:
        return onnx_problems(self.graph, self.opset)

    def write(self, path: Path, example: Sequence[np.ndarray]) -> Written:
        notes, figures = write_onnx(self.graph, example, path, self.opset)
        if figures.get("quantized_biases"):
            notes.append(
                "each bias of a quantized layer is stored as int32 on the scale input x weight, as integer kernels "
                "add it; the largest change this makes to a bias is "
                f"{figures['bias_rounding_steps']:.4f} steps of its layer's output grid"
            )
        notes += float_tail_notes(self.graph, "onnxruntime runs them as float ops on their dequantized inputs")
        return Written(notes, figures)

    def load(self, path: Path) -> Runtime:
        return OnnxRuntime(path, self.graph)


class OnnxRuntime(Runtime):
    """An exported ONNX file in onnxruntime (CPU); its floor is `RoundingFloor`, its taps
    `pytorch.onnx_taps.OnnxTaps`."""

    def __init__(self, path: Path, graph: Graph) -> None:
        from model_compression_toolkit.pytorch import onnx_model

        self._m, self.path, self._graph = onnx_model, path, graph
        self.session = onnx_model.session(path)
        self.name = onnx_model.runtime_version()

    def run(self, batch: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self._m.run(self.session, list(batch))

    def graph(self) -> ExportedGraph:
        import onnx

        return self._m.describe(onnx.load(str(self.path), load_external_data=False), self.path.name)

    def runtime_graph(self) -> ExportedGraph:
        return self._m.optimized_graph(self.path, self.path.parent)

    def floor_model(self) -> nn.Module:
        return RoundingFloor(self._graph, FLOOR_NOISE)

    def taps(self) -> Taps:
        from model_compression_toolkit.pytorch.onnx_taps import OnnxTaps

        return OnnxTaps(self.path)


class TorchScriptExporter(_TorchExporter):
    """PyTorch -> TorchScript: the quantized model itself, traced (fake quantization in float)."""

    serialization, quantization = "TORCHSCRIPT", "FAKELY_QUANT"

    def __init__(self, graph: Graph, q_model: nn.Module, onnx_opset_version: int | None = None) -> None:
        if onnx_opset_version is not None:
            raise ExportError(
                f"onnx_opset_version={onnx_opset_version!r} applies to ONNX only; leave it out for TorchScript"
            )
        super().__init__(graph, q_model)

    def write(self, path: Path, example: Sequence[np.ndarray]) -> Written:
        return Written(write_torchscript(self.q_model, example, path))

    def load(self, path: Path) -> Runtime:
        return TorchScriptRuntime(path)


class TorchScriptRuntime(Runtime):
    """A TorchScript file in ``torch.jit``: this library's own model, so no taps and no graph."""

    def __init__(self, path: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            self.model = torch.jit.load(str(path))
        self.name = f"torch.jit {torch.__version__}"

    def run(self, batch: Sequence[np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            result = self.model(*(ops.as_tensor(x) for x in batch))
        return [ops.to_numpy(leaf) for leaf in ops.leaves(result)]
