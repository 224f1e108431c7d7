"""What mixed precision chose: the bit-width of every candidate layer and the memory it takes."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from typing import Any

from model_compression_toolkit.core.numbers import finite_or_none

JSON_FILE, CSV_FILE = "mixed_precision.json", "mixed_precision.csv"
LOCAL, WEIGHTS, NOT_MEASURED = "local output", "weights only", "not measured"



@dataclass
class LayerBits:
    """One candidate layer's choice.

    Attributes:
        name: the node.
        bits: the chosen weight bit-width.
        sensitivity: candidate bits -> sensitivity (empty when not measured).
        weights: quantized weight values (the tensors whose bits are chosen).
        bytes: those weights' bytes at the chosen bits.
        measured: how the sensitivity was measured (``LOCAL``, ``WEIGHTS``, ``NOT_MEASURED``).
    """

    name: str
    bits: int
    sensitivity: dict[int, float]
    weights: int
    bytes: float
    measured: str


@dataclass
class MixedPrecisionResult:
    """The bit-widths chosen under a weights-memory budget (all sizes in bytes).

    Attributes:
        layers: one entry per layer with quantized weights, in topological order.
        candidate_bits: the bit-widths a layer could get, highest first.
        budget: the requested ``ResourceUtilization.weights_memory``.
        weights_memory: the weights memory of the chosen configuration.
        weights_memory_8bit: every candidate layer at 8 bits (the rest at 32).
        weights_memory_min: every candidate layer at the lowest candidate bits.
        fixed_memory: weights that are not quantized (32 bits), included in the above.
        objective: sum of the chosen sensitivities, or None when not measured.
        solver: ``"milp"``, ``"dp"`` or ``"max bits"`` (the budget fits the highest bits).
        samples: representative samples the sensitivities were measured on.
    """

    layers: list[LayerBits]
    candidate_bits: tuple[int, ...]
    budget: float
    weights_memory: float
    weights_memory_8bit: float
    weights_memory_min: float
    fixed_memory: float
    objective: float | None = None
    solver: str = "max bits"
    samples: int = 0

    @property
    def bits(self) -> dict[str, int]:
        return {layer.name: layer.bits for layer in self.layers}

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe (no NaN or inf; an infinite budget is None)."""
        return {
            "candidate_bits": list(self.candidate_bits),
            "budget_bytes": finite_or_none(self.budget),
            "weights_memory_bytes": finite_or_none(self.weights_memory),
            "weights_memory_8bit_bytes": finite_or_none(self.weights_memory_8bit),
            "weights_memory_min_bytes": finite_or_none(self.weights_memory_min),
            "fixed_memory_bytes": finite_or_none(self.fixed_memory),
            "objective": finite_or_none(self.objective),
            "solver": self.solver,
            "samples": self.samples,
            "layers": [
                {
                    "name": layer.name,
                    "bits": layer.bits,
                    "weights": layer.weights,
                    "bytes": finite_or_none(layer.bytes),
                    "measured": layer.measured,
                    "sensitivity": {str(b): finite_or_none(v) for b, v in layer.sensitivity.items()},
                }
                for layer in self.layers
            ],
        }

    def to_json(self) -> str:
        """`to_dict` as JSON (``mixed_precision.json``)."""
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def to_csv(self) -> str:
        """One row per layer: bits, size, how measured, the sensitivity at each candidate
        (``mixed_precision.csv``; ``\\r\\n`` line ends, as the csv module writes them)."""
        buffer = io.StringIO()
        out = csv.writer(buffer)
        out.writerow(["layer", "bits", "weights", "bytes", "measured"] + [f"sensitivity_{b}" for b in self.candidate_bits])
        for layer in self.layers:
            sens = [finite_or_none(layer.sensitivity.get(b)) for b in self.candidate_bits]
            out.writerow([layer.name, layer.bits, layer.weights, layer.bytes, layer.measured]
                         + ["" if s is None else f"{s:.6g}" for s in sens])  # fmt: skip
        return buffer.getvalue()

    def summary(self) -> str:
        budget = "none" if not math.isfinite(self.budget) else f"{self.budget:.0f} B"
        head = (
            f"mixed precision ({self.solver}): weights {self.weights_memory:.0f} B for a budget of {budget} "
            f"(all 8-bit: {self.weights_memory_8bit:.0f} B, smallest: {self.weights_memory_min:.0f} B)"
        )
        if self.objective is not None:
            head += f", total sensitivity {self.objective:.4g}"
        width = max((len(layer.name) for layer in self.layers), default=5)
        lines = [head] + [
            f"  {layer.name:<{width}}  {layer.bits:>2} bits  {layer.bytes:>12.0f} B  "
            + "  ".join(f"{b}b: {s:.3g}" for b, s in layer.sensitivity.items())
            for layer in self.layers
        ]
        return "\n".join(lines)
