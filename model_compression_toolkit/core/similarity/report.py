"""The similarity report: per-layer metrics and the quantizers that cause the damage,
ranked, with one schema for both frameworks.

Schema (`similarity_report.json`; `similarity_report.csv` has one row per layer with the
same per-layer fields except the per-sample list; `similarity_causes.csv` one row per
quantizer):

    {"samples": int, "sqnr_ceiling_db": float, "impact_samples": int,
     "quantized_output_db": float | null,  # every quantizer on, its worst output part
     "impacts_skipped": int,  # candidates not run alone: quantized_output_db bounds them
     "quantized_output_read_as": "rank" | "decision" | null,  # how that figure counts noise
     "error_classes": {"low": ">= 30 dB", "medium": "15 - 30 dB", "high": "< 15 dB"},
     "cause_bound_db": 20.0,
     "causes": [name, ...],          # the quantizers that damage the output on their own
     "suggested_fix": {"activations", "weights", "code", "weights_bytes_before", ...},
     "quantizers": [  # worst first, by the output SQNR with that quantizer alone
        {"rank", "name", "kind", "layer_type", "bits", "sqnr_db", "channel_sqnr_median_db",
         "channel_sqnr_worst_db", "high_error_channels_percent", "zero_rounded_percent",
         "clipped_percent", "channel_range_spread", "lost_input_channels_percent",
         "input_range_spread", "output_sqnr_db", "output_whole_db", "output_part",
         "output_part_distinct", "output_probability", "output_ranked", "cause"}],
     "layers": [  # worst first: by output impact where measured, then by local SQNR
        {"rank", "name", "layer_type", "position", "is_output", "error_class", "role",
         "cosine_mean", "cosine_min", "worst_sample", "sqnr_db", "mse", "max_abs_error",
         "local_cosine_mean", "local_sqnr_db", "local_mse", "local_max_abs_error",
         "weights_bits", "activation_bits", "weights_threshold_max", "activation_threshold",
         "clipped_percent", "channel_sqnr_median_db", "channel_sqnr_worst_db",
         "high_error_channels_percent", "zero_rounded_percent", "channel_range_spread",
         "output_sqnr_db", "cosine_per_sample": [float, ...]}]}

``role`` is ``"cause"`` for a layer whose own quantizers damage the output, ``"inherits"``
for a damaged layer (accumulated error medium or high) that only carries the damage of a
cause before it, and null otherwise. Every number is finite; a metric that does not apply
is null.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from model_compression_toolkit.core.numbers import json_safe
from model_compression_toolkit.core.similarity.causes import CANDIDATE_DB, CAUSE_DB, QuantizerEntry
from model_compression_toolkit.core.similarity.fix import SuggestedFix
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
    """Metrics of one compare point, over all samples.

    The accumulated metrics compare the quantized model with the float model at this
    layer; the local ones, this layer alone quantized, fed the float input. The channel
    measures (``channel_sqnr_*``, ``high_error_channels_percent``, ``zero_rounded_percent``,
    ``channel_range_spread``) are those of its activation quantizer alone on the float
    output (see `core.similarity.channels`); ``output_sqnr_db`` is the model output's SQNR
    with only this layer's quantizers on, where measured.
    """

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
    channel_sqnr_median_db: float | None = None
    channel_sqnr_worst_db: float | None = None
    high_error_channels_percent: float | None = None
    zero_rounded_percent: float | None = None
    channel_range_spread: float | None = None
    output_sqnr_db: float | None = None
    role: str | None = None
    cosine_per_sample: list[float] = field(default_factory=list)
    rank: int = 0

    @property
    def ranking_sqnr_db(self) -> float:
        return self.local_sqnr_db if self.local_sqnr_db is not None else self.sqnr_db

    @property
    def error_class(self) -> str:
        """The class of its own error on its own output (local SQNR, accumulated where none)."""
        return error_class(self.ranking_sqnr_db)

    @property
    def accumulated_class(self) -> str:
        """The class of the accumulated error here: the quantized model against the float one."""
        return error_class(self.sqnr_db)

    @property
    def damage_class(self) -> str:
        """How much this layer's own quantizers damage the *model output*, the error the
        graph is coloured by: ``"high"`` for a cause (`role` ``"cause"``: output SQNR with
        them alone under `CAUSE_DB`), ``"medium"`` under `CANDIDATE_DB`, else ``"low"``
        (their own error was too small to be worth measuring at the output). Where no
        impact was measured at all, the class of the layer's own error (`error_class`)."""
        if self.role == "cause":
            return "high"
        if self.output_sqnr_db is None:
            return self.error_class
        return "medium" if self.output_sqnr_db < CANDIDATE_DB else "low"


def _worst_first(layer: LayerSimilarity) -> tuple:
    """By output impact where measured (worst first), then by local SQNR, then cosine."""
    if layer.output_sqnr_db is not None:
        return (0, layer.output_sqnr_db, layer.cosine_mean)
    return (1, layer.ranking_sqnr_db, layer.cosine_mean)


@dataclass
class SimilarityReport:
    """All compare points, in topological order, and every quantizer ranked by what it
    alone does to the model output (`causes`, `suggested_fix`).

    Attributes:
        samples: the samples compared.
        layers: one entry per compare point, in topological order (`ranked`: worst first).
        quantizers: one entry per quantizer (a layer's activation or its weights), worst
            first by the model output's SQNR with that quantizer alone.
        fix: the smallest change that removes the causes (`suggested_fix`).
        impact_samples: the samples the output impacts were measured on.
        quantized_output_db: the quantized model's output SQNR on those samples, every
            quantizer on: its worst output part, judged as a cause is (None: not measured).
        impacts_skipped: the quantizers not run alone because ``quantized_output_db`` is
            `causes.SKIP_MARGIN_DB` over the cause bar: one alone cannot do worse than all.
        quantized_output_read_as: how ``quantized_output_db`` counts noise: ``"rank"``, a
            softmax read by rank (only the rows whose top class changed: no row changed is
            the ceiling, where the layer table's SQNR of the same output counts every
            value); ``"decision"``, probabilities on the values a decision reads; None,
            every value.
    """

    samples: int
    layers: list[LayerSimilarity]
    quantizers: list[QuantizerEntry] = field(default_factory=list)
    fix: SuggestedFix = field(default_factory=SuggestedFix)
    impact_samples: int = 0
    quantized_output_db: float | None = None
    impacts_skipped: int = 0
    quantized_output_read_as: str | None = None

    def ranked(self) -> list[LayerSimilarity]:
        """Compare points worst first: those whose quantizers were measured by how much they
        damage the output alone, then the others by local SQNR (accumulated where none)."""
        return sorted(self.layers, key=_worst_first)

    def causes(self) -> list[QuantizerEntry]:
        """The quantizers that damage the output on their own (output SQNR under
        `causes.CAUSE_DB`), worst first; empty for a model with nothing wrong."""
        return [q for q in self.quantizers if q.cause]

    def suggested_fix(self) -> SuggestedFix:
        """The smallest change that removes the causes: `KeepFloat` rules that
        ``CoreConfig(keep_float=...)`` takes, with their memory cost (empty if no cause)."""
        return self.fix

    def skip_note(self) -> str:
        """Why no quantizer was run alone (empty when some were, or none needed to be)."""
        if not self.impacts_skipped or self.quantized_output_db is None:
            return ""
        read = {
            "rank": ", a softmax read by rank: only the rows whose top class changed count as noise",
            "decision": ", probabilities on the values a decision reads",
        }.get(self.quantized_output_read_as or "", "")
        if self.quantized_output_read_as == "rank" and self.quantized_output_db >= SQNR_CEILING_DB:
            read = ", a softmax read by rank: no top class changed"
        return (
            f"every quantizer together keeps the outputs at {self.quantized_output_db:.1f} dB (worst part, "
            f"on {self.impact_samples} samples{read}), over the {CAUSE_DB:g} dB bar of a cause: one quantizer "
            f"alone adds no more noise than all of them, so the {self.impacts_skipped} with the largest own error "
            "were not run alone"
        )

    def drop_start(self) -> LayerSimilarity | None:
        """The first compare point, in topological order, whose accumulated error is not
        low (SQNR under 30 dB): where the quantized model starts to drift from the float one."""
        for layer in sorted(self.layers, key=lambda layer: layer.position):
            if layer.accumulated_class != "low":
                return layer
        return None

    def layer(self, name: str) -> LayerSimilarity:
        """The compare point named ``name``."""
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(f"no compare point named {name!r}")

    def quantizer(self, name: str, kind: str) -> QuantizerEntry:
        """The quantizer of layer ``name`` of ``kind`` (``"activation"`` or ``"weights"``)."""
        for entry in self.quantizers:
            if entry.name == name and entry.kind == kind:
                return entry
        raise KeyError(f"no {kind} quantizer of a layer named {name!r}")

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
            "impact_samples": self.impact_samples,
            "quantized_output_db": json_safe(self.quantized_output_db),
            "impacts_skipped": self.impacts_skipped,
            "quantized_output_read_as": self.quantized_output_read_as,
            "error_classes": {"low": ">= 30 dB", "medium": "15 - 30 dB", "high": "< 15 dB"},
            "cause_bound_db": CAUSE_DB,
            "causes": [f"{q.name} ({q.kind})" for q in self.causes()],
            "suggested_fix": json_safe(self.fix.to_dict()),
            "quantizers": [json_safe(asdict(q)) for q in self.quantizers],
            "layers": rows,
        }

    def to_json(self, data: dict[str, Any] | None = None) -> str:
        """`to_dict` as JSON (``data``: `to_dict` already made, for the three files at once)."""
        return json.dumps(self.to_dict() if data is None else data, indent=1, allow_nan=False)

    def to_csv(self, data: dict[str, Any] | None = None) -> str:
        """One row per layer, worst first, without the per-sample cosines."""
        names = [f.name for f in fields(LayerSimilarity) if f.name != "cosine_per_sample"] + ["error_class"]
        return _csv(names, (self.to_dict() if data is None else data)["layers"])

    def causes_csv(self, data: dict[str, Any] | None = None) -> str:
        """One row per quantizer, worst first (``similarity_causes.csv``)."""
        return _csv([f.name for f in fields(QuantizerEntry)], (self.to_dict() if data is None else data)["quantizers"])

    def summary(self, top: int = 5) -> str:
        """A one-screen text summary: the causes, the suggested fix, the worst layers."""
        causes = self.causes()
        lines = [f"similarity on {self.samples} samples"]
        if causes:
            lines.append(
                f"causes (output SQNR with that quantizer alone, on {self.impact_samples} samples; "
                f"under {CAUSE_DB:g} dB damages the output):"
            )
            for q in causes[:top]:
                lines.append(
                    f"  {q.name + ' (' + q.kind + ')':<40} {q.layer_type:<18} output {q.output_sqnr_db:6.1f} dB  "
                    f"own {q.sqnr_db:6.1f} dB, median channel {_db(q.channel_sqnr_median_db)}, "
                    f"{_pct(q.zero_rounded_percent)} rounded to 0"
                )
                if q.output_part is not None or q.input_range_spread is not None or q.output_probability:
                    lines.append(f"      {q.evidence()}")
            lines.append(self.fix.summary())
        elif self.fix:
            lines.append(f"no quantizer damages the output on its own (output SQNR >= {CAUSE_DB:g} dB each)")
            lines.append(self.fix.summary())
        else:
            lines.append(f"no quantizer damages the output on its own (output SQNR >= {CAUSE_DB:g} dB each)")
        if self.impacts_skipped:
            lines.append(f"  {self.skip_note()}")
        lines.append("worst layers first:")
        for layer in self.ranked()[:top]:
            local = f"{layer.local_sqnr_db:6.1f}" if layer.local_sqnr_db is not None else "   n/a"
            role = f"  [{layer.role}]" if layer.role else ""
            lines.append(
                f"  {layer.name:<32} {layer.layer_type:<18} cosine {layer.cosine_mean:.4f} "
                f"(min {layer.cosine_min:.4f})  SQNR {layer.sqnr_db:6.1f} dB  local {local} dB{role}"
            )
        return "\n".join(lines)


def _db(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} dB"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} %"


def _csv(names: list[str], rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=names, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(row)
    return out.getvalue()
