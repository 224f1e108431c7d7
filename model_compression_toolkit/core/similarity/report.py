"""The similarity report: per-layer metrics, ranked, with one schema for both frameworks.

Schema (`similarity_report.json`; `similarity_report.csv` has one row per layer with the
same per-layer fields except the per-sample list):

    {"samples": int, "sqnr_ceiling_db": float,
     "error_classes": {"low": ">= 30 dB", "medium": "15 - 30 dB", "high": "< 15 dB"},
     "layers": [  # worst first, by local SQNR (accumulated where no local error exists)
        {"rank", "name", "layer_type", "position", "is_output", "error_class",
         "cosine_mean", "cosine_min", "worst_sample", "sqnr_db", "mse", "max_abs_error",
         "local_cosine_mean", "local_sqnr_db", "local_mse", "local_max_abs_error",
         "weights_bits", "activation_bits", "weights_threshold_max", "activation_threshold",
         "clipped_percent", "cosine_per_sample": [float, ...]}]}

Every number is finite; a metric that does not apply is null.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from model_compression_toolkit.core.numbers import json_safe
from model_compression_toolkit.core.similarity.metrics import SQNR_CEILING_DB

# Error classes by SQNR in dB (local where available): colours the quantized graph.
ERROR_CLASS_THRESHOLDS_DB = {"low": 30.0, "medium": 15.0}


def error_class(sqnr_db: float) -> str:
    """``"low"``, ``"medium"`` or ``"high"`` error for an SQNR in dB (see ERROR_CLASS_THRESHOLDS_DB)."""
    if sqnr_db >= ERROR_CLASS_THRESHOLDS_DB["low"]:
        return "low"
    return "medium" if sqnr_db >= ERROR_CLASS_THRESHOLDS_DB["medium"] else "high"


@dataclass
class LayerSimilarity:
    """Metrics of one compare point, over all samples."""

    name: str
    layer_type: str
    position: int
    is_output: bool
    cosine_mean: float
    cosine_min: float
    worst_sample: int
    sqnr_db: float
    mse: float
    max_abs_error: float
    local_cosine_mean: float | None = None
    local_sqnr_db: float | None = None
    local_mse: float | None = None
    local_max_abs_error: float | None = None
    weights_bits: int | None = None
    activation_bits: int | None = None
    weights_threshold_max: float | None = None
    activation_threshold: float | None = None
    clipped_percent: float | None = None
    cosine_per_sample: list[float] = field(default_factory=list)
    rank: int = 0

    @property
    def ranking_sqnr_db(self) -> float:
        return self.local_sqnr_db if self.local_sqnr_db is not None else self.sqnr_db

    @property
    def error_class(self) -> str:
        return error_class(self.ranking_sqnr_db)


@dataclass
class SimilarityReport:
    """All compare points, in topological order (`ranked` gives worst first)."""

    samples: int
    layers: list[LayerSimilarity]

    def ranked(self) -> list[LayerSimilarity]:
        """Compare points worst first: by local SQNR (accumulated where none), then cosine."""
        return sorted(self.layers, key=lambda layer: (layer.ranking_sqnr_db, layer.cosine_mean))

    def layer(self, name: str) -> LayerSimilarity:
        """The compare point named ``name``."""
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(f"no compare point named {name!r}")

    def to_dict(self) -> dict[str, Any]:
        """The report in the schema of the module docstring (worst first, no NaN or inf)."""
        rows = []
        for rank, layer in enumerate(self.ranked(), start=1):
            row = asdict(layer)
            row["rank"] = rank
            row["error_class"] = layer.error_class
            rows.append(json_safe(row))
        return {
            "samples": self.samples,
            "sqnr_ceiling_db": SQNR_CEILING_DB,
            "error_classes": {"low": ">= 30 dB", "medium": "15 - 30 dB", "high": "< 15 dB"},
            "layers": rows,
        }

    def to_json(self) -> str:
        """`to_dict` as JSON."""
        return json.dumps(self.to_dict(), indent=1, allow_nan=False)

    def to_csv(self) -> str:
        """One row per layer, worst first, without the per-sample cosines."""
        names = [f.name for f in fields(LayerSimilarity) if f.name != "cosine_per_sample"] + ["error_class"]
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=names, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        for row in self.to_dict()["layers"]:
            writer.writerow(row)
        return out.getvalue()

    def summary(self, top: int = 5) -> str:
        """A one-screen text summary of the worst layers."""
        lines = [f"similarity on {self.samples} samples, worst layers first (local SQNR where available):"]
        for layer in self.ranked()[:top]:
            local = f"{layer.local_sqnr_db:6.1f}" if layer.local_sqnr_db is not None else "   n/a"
            lines.append(
                f"  {layer.name:<32} {layer.layer_type:<18} cosine {layer.cosine_mean:.4f} "
                f"(min {layer.cosine_min:.4f})  SQNR {layer.sqnr_db:6.1f} dB  local {local} dB"
            )
        return "\n".join(lines)

