"""What an export tells its observer: the file written, the graph a runtime reads from it,
and how closely the runtime computes what the quantized model computes.

    quantized model ---- representative batches ----> outputs (simulation)
    exported file  ---- the same batches, runtime --> outputs (runtime)   ->  OutputParity per output

Pure numpy: no framework, no runtime, no file is touched here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from model_compression_toolkit.core.layer_parity import LayerParity, LayerTable

# An output matches when it is within one quantization step everywhere, or, where the
# runtime rounds in another order than the simulation, when its cosine is at least this.
PARITY_MIN_COSINE = 0.999
PARITY_MAX_STEPS = 1.0
# The relative input noise of the sensitivity floor: about the rounding error of a float32
# sum of a few dozen terms, the order in which a runtime's arithmetic differs.
FLOOR_NOISE = 1e-6
# A network that turns float32 rounding into whole steps (PP-OCRv4's recognizer: the quantized
# model in PyTorch on 1 thread against 2 threads lands at a cosine of 0.992 on one batch) cannot
# be held to 0.999 by any runtime. Its file matches when no layer departs on its own (the
# per-layer table) and each output is within this many times the floor's distance (one draw
# of the noise; draws and thread counts land within 2x of each other).
FLOOR_REACH = 2.0


@dataclass
class ExportedTensor:
    """A tensor of an exported model as its runtime holds it."""

    name: str
    dtype: str
    shape: tuple
    scale: list[float] | None = None
    zero_point: list[int] | None = None
    constant: bool = False


@dataclass
class ExportedOp:
    """One op of an exported model: its type and the tensors it reads and writes."""

    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExportedGraph:
    """The ops of an exported model, as the runtime reads the file (or runs it)."""

    name: str
    ops: list[ExportedOp]
    tensors: dict[str, ExportedTensor]
    inputs: list[str]
    outputs: list[str]

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for op in self.ops:
            counts[op.op_type] = counts.get(op.op_type, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


@dataclass
class OutputParity:
    """One output of the exported model against the same output of the quantized model.

    Attributes:
        name: the output (the layer producing it).
        samples: how many samples were compared.
        step: the output's quantization step (its grid's scale), or None when the output is float.
        max_abs: largest absolute difference.
        mean_abs: mean absolute difference.
        max_steps: ``max_abs / step``: 1.0 means one grid step somewhere.
        max_reference: the largest absolute value of the quantized model's output (float32
            represents it to a relative 6e-8, which is allowed on top of a step).
        equal_fraction: fraction of the values that are the same (within 1 % of a step;
            of 1e-6 of the output's range for a float output).
        cosine: cosine similarity of the two outputs, flattened.
        sqnr_db: signal (the quantized model's output) to difference ratio, in dB; inf when equal.
        top1_agreement: for 2-D outputs (classifier logits), the fraction of samples whose
            largest class is the same; else None.
        floor_cosine / floor_max_steps: the quantized model against itself with float32
            rounding noise (`FLOOR_NOISE`) before every quantizer (PyTorch; Keras: on its
            inputs): how far any runtime that rounds in
            another order can be expected to land, on a network that amplifies one-step
            differences. None when not measured.
        bias_cosine / bias_max_steps: the quantized model with its biases rounded to int32 as
            the runtime adds them (`core.export.grids.integer_biases`) against the quantized model:
            what that documented difference alone does. None for runtimes adding float biases.
    """

    name: str
    samples: int
    step: float | None
    max_abs: float
    mean_abs: float
    max_steps: float | None
    equal_fraction: float
    cosine: float
    sqnr_db: float
    top1_agreement: float | None = None
    max_reference: float = 0.0
    floor_cosine: float | None = None
    floor_max_steps: float | None = None
    bias_cosine: float | None = None
    bias_max_steps: float | None = None

    @property
    def ok(self) -> bool:
        """Within one step everywhere, or a cosine of at least `PARITY_MIN_COSINE`."""
        slack = 8 * float(np.finfo(np.float32).eps) * self.max_reference
        within = self.step is not None and self.max_abs <= PARITY_MAX_STEPS * self.step + slack
        return within or self.cosine >= PARITY_MIN_COSINE

    @property
    def within_floor(self) -> bool:
        """On a network whose own float32 rounding moves this output under `PARITY_MIN_COSINE`
        (the floor), the runtime no further than `FLOOR_REACH` times the floor's distance.
        Where the runtime adds int32 biases, the floor is the farther of the two references:
        that rounding is a difference the file is documented to make, and such a network
        amplifies it as it does the float32 noise."""
        references = [c for c in (self.floor_cosine, self.bias_cosine) if c is not None]
        if not references or min(references) >= PARITY_MIN_COSINE:
            return False
        return 1 - self.cosine <= FLOOR_REACH * (1 - min(references))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}


def compare_output(
    name: str, reference: np.ndarray, exported: np.ndarray, step: float | None
) -> OutputParity:
    """How far ``exported`` is from ``reference`` (the quantized model's output)."""
    ref = np.asarray(reference, dtype=np.float64)
    out = np.asarray(exported, dtype=np.float64).reshape(ref.shape)
    diff = np.abs(out - ref)
    max_abs = float(diff.max()) if diff.size else 0.0
    span = float(np.ptp(ref)) if ref.size else 0.0
    tolerance = 0.01 * step if step else 1e-6 * max(span, 1e-12)
    norms = float(np.linalg.norm(ref)) * float(np.linalg.norm(out))
    cosine = float(np.dot(ref.ravel(), out.ravel()) / norms) if norms > 0 else (1.0 if max_abs == 0 else 0.0)
    noise = float(np.sum(diff**2))
    signal = float(np.sum(ref**2))
    sqnr = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal > 0 else -math.inf)
    top1 = None
    if ref.ndim == 2 and ref.shape[1] > 1:
        top1 = float(np.mean(ref.argmax(axis=1) == out.argmax(axis=1)))
    return OutputParity(
        name=name,
        samples=int(ref.shape[0]) if ref.ndim else 1,
        step=step,
        max_abs=max_abs,
        mean_abs=float(diff.mean()) if diff.size else 0.0,
        max_steps=max_abs / step if step else None,
        equal_fraction=float(np.mean(diff <= tolerance)) if diff.size else 1.0,
        cosine=min(1.0, cosine),
        sqnr_db=sqnr,
        top1_agreement=top1,
        max_reference=float(np.abs(ref).max()) if ref.size else 0.0,
    )


def compare_outputs(
    names: Sequence[str],
    reference: Sequence[Sequence[np.ndarray]],
    exported: Sequence[Sequence[np.ndarray]],
    steps: Sequence[float | None],
    floor: Sequence[Sequence[np.ndarray]] | None = None,
    integer_bias: Sequence[Sequence[np.ndarray]] | None = None,
) -> list[OutputParity]:
    """Per output, over all batches: ``reference[b][i]`` against ``exported[b][i]``.

    ``floor``: the reference on noisy inputs (`perturbed`); ``integer_bias``: the reference
    model with int32 biases. Each, when given, is compared with the reference too.
    """
    for other in (exported, floor, integer_bias):
        if other is not None and len(other) != len(reference):
            raise ValueError(f"{len(reference)} reference batches against {len(other)} others")

    def joined(batches: Sequence[Sequence[np.ndarray]], i: int) -> np.ndarray:
        return np.concatenate([np.asarray(batch[i]) for batch in batches])

    result = []
    for i, name in enumerate(names):
        ref = joined(reference, i)
        parity = compare_output(name, ref, joined(exported, i), steps[i])
        if floor is not None:
            noisy = compare_output(name, ref, joined(floor, i), steps[i])
            parity.floor_cosine, parity.floor_max_steps = noisy.cosine, noisy.max_steps
        if integer_bias is not None:
            rounded = compare_output(name, ref, joined(integer_bias, i), steps[i])
            parity.bias_cosine, parity.bias_max_steps = rounded.cosine, rounded.max_steps
        result.append(parity)
    return result


def perturbed(batch: Sequence[np.ndarray], seed: int = 0, noise: float = FLOOR_NOISE) -> list[np.ndarray]:
    """``batch`` with each floating value multiplied by ``1 + noise * u``, u uniform in [-1, 1]."""
    rng = np.random.default_rng(seed)
    out = []
    for x in batch:
        x = np.asarray(x)
        if np.issubdtype(x.dtype, np.floating):
            x = (x * (1 + noise * rng.uniform(-1, 1, size=x.shape))).astype(x.dtype)
        out.append(x)
    return out


class Parity(list):
    """The outputs' parity (a list of `OutputParity`), with the per-layer table beside it.

    Attributes:
        layers: the `LayerTable`, or None for a format without one.
    """

    def __init__(self, outputs: Sequence[OutputParity], layers: LayerTable | None = None) -> None:
        super().__init__(outputs)
        self.layers = layers

    @property
    def first_departure(self) -> LayerParity | None:
        """The first layer, in topological order, where the runtime departs by more than one step."""
        return None if self.layers is None else self.layers.first_departure


@dataclass
class ExportReport:
    """One export, as the observer (the TensorBoard log) sees it.

    Attributes:
        model_name: the quantized model's name.
        framework: ``"pytorch"`` or ``"keras"``.
        serialization_format / quantization_format: the formats' names (``"ONNX"``, ``"FAKELY_QUANT"``).
        path: the file written.
        file_bytes: its size (with any side file).
        runtime: what ran it for the parity check (``"onnxruntime 1.32.0"``).
        data: where the compared inputs came from (representative data, or synthetic).
        parity: one entry per output.
        graph: the exported model as the runtime reads it.
        runtime_graph: the graph the runtime runs after its own optimizations, when it
            can tell (onnxruntime's fused integer kernels), else None.
        notes: what the user should know (fixed batch size, differences the runtime makes).
        figures: other numbers worth showing (e.g. the largest bias rounding, in steps).
        layers: the per-layer parity (`core.layer_parity`): each quantized layer's tensor in
            the runtime against the quantized model's; None for a format without one.
    """

    model_name: str
    framework: str
    serialization_format: str
    quantization_format: str
    path: str
    file_bytes: int
    runtime: str
    data: str
    parity: list[OutputParity]
    graph: ExportedGraph | None = None
    runtime_graph: ExportedGraph | None = None
    notes: list[str] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)
    layers: LayerTable | None = None

    @property
    def parity_ok(self) -> bool:
        """Every output within one step or at a cosine of 0.999 (`OutputParity.ok`); or, on a
        network whose own float32 rounding moves its outputs further (`OutputParity.within_floor`),
        every layer of the file within one step of the quantized model's where its inputs
        agree: the per-layer table measured and naming no departure."""
        if all(p.ok for p in self.parity):
            return True
        measured = self.layers is not None and any(row.tensor is not None for row in self.layers.rows)
        return measured and self.first_departure is None and all(p.ok or p.within_floor for p in self.parity)

    @property
    def first_departure(self) -> LayerParity | None:
        """The first layer, in topological order, where the runtime departs by more than one step."""
        return None if self.layers is None else self.layers.first_departure

    def to_dict(self) -> dict[str, Any]:
        out = {
            k: getattr(self, k)
            for k in ("model_name", "framework", "serialization_format", "quantization_format", "path")
            + ("file_bytes", "runtime", "data", "notes", "figures")
        }
        out["parity"] = [p.to_dict() for p in self.parity]
        out["parity_ok"] = self.parity_ok
        out["layers"] = None if self.layers is None else self.layers.to_dict()
        for name in ("graph", "runtime_graph"):
            g = getattr(self, name)
            out[f"{name}_ops"] = g.op_counts() if g is not None else None
        return out


def _text(value: float | None) -> str:
    return "-" if value is None else f"{value:.5f}"


def parity_warning(report: ExportReport) -> str | None:
    """What to tell the user when an output of the file misses parity, or None when all match."""
    worst = [p for p in report.parity if not p.ok]
    if not worst or report.parity_ok:
        return None
    rows = "; ".join(
        f"{p.name}: {p.max_steps or 0:.2f} steps, cosine {p.cosine:.5f} (the quantized model against itself "
        f"with float32 rounding noise: cosine {_text(p.floor_cosine)}; with the runtime's int32 "
        f"biases: {_text(p.bias_cosine)})"
        for p in worst
    )
    first = report.first_departure
    return (
        f"the exported model at {report.path} differs from the quantized model by more than one quantization "
        f"step and a cosine of 0.999 on {rows}. The file was written; a network that turns float rounding noise "
        "into such differences will differ on any runtime. See the export run or the result's parity."
        + (f" The first layer where the runtime departs is {first.layer!r}." if first is not None else "")
    )
