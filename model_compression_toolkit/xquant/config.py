"""`XQuantConfig`: where an xquant report goes and what it measures, as in MCT."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from model_compression_toolkit.errors import ConfigurationError

METRICS = ("mse", "cs", "sqnr")


@dataclass
class XQuantConfig:
    """Configuration of an xquant report.

    Args:
        report_dir: the folder the report is written into (created if needed).
        custom_similarity_metrics: name -> ``metric(float_tensor, quantized_tensor)``
            returning a number, called at every compare point for every batch (PyTorch:
            torch tensors; Keras: numpy arrays) and averaged.
        quantize_reported_dir: where MCT reads its quantization log from; not read here
            (the troubleshooting recomputes statistics from the models), a note says so.
        threshold_quantize_error: per metric, the value past which a layer is degraded
            (troubleshooting). ``sqnr`` is in dB here (MCT: a linear ratio): -10 dB is
            MCT's 0.1.
        is_detect_under_threshold_quantize_error: per metric, True: degraded below the
            threshold (cosine similarity, SQNR); False: above it (MSE).
        threshold_degrade_layer_ratio: above this fraction of degraded layers, the
            troubleshooting gives general advice instead of per-layer causes.
        threshold_zscore_outlier_removal: a layer whose float output reaches this many
            standard deviations from its mean has outliers (``z_threshold`` advice).
        threshold_ratio_unbalanced_concatenation: a concatenation whose inputs' ranges
            differ by more than this factor is unbalanced.
        threshold_bitwidth_mixed_precision_with_model_output_loss_objective: mixed
            precision that left the last layer at this many weight bits or fewer is flagged.
    """

    report_dir: str
    custom_similarity_metrics: Mapping[str, Callable[[Any, Any], Any]] | None = None
    quantize_reported_dir: str | None = None
    threshold_quantize_error: Mapping[str, float] = field(
        default_factory=lambda: {"mse": 0.1, "cs": 0.1, "sqnr": -10.0}
    )
    is_detect_under_threshold_quantize_error: Mapping[str, bool] = field(
        default_factory=lambda: {"mse": False, "cs": True, "sqnr": True}
    )
    threshold_degrade_layer_ratio: float = 0.5
    threshold_zscore_outlier_removal: float = 5.0
    threshold_ratio_unbalanced_concatenation: float = 16.0
    threshold_bitwidth_mixed_precision_with_model_output_loss_objective: int = 2

    def validate(self) -> None:
        if not isinstance(self.report_dir, (str, bytes)) and not hasattr(self.report_dir, "__fspath__"):
            raise ConfigurationError(f"report_dir must be a folder path; got {self.report_dir!r}")
        metrics = self.custom_similarity_metrics or {}
        if not isinstance(metrics, Mapping) or not all(isinstance(k, str) and callable(v) for k, v in metrics.items()):
            raise ConfigurationError(
                "custom_similarity_metrics must be a dict of name -> callable(float_tensor, quantized_tensor); "
                f"got {self.custom_similarity_metrics!r}"
            )
        clash = sorted(set(metrics) & set(METRICS))
        if clash:
            raise ConfigurationError(f"custom_similarity_metrics may not reuse the built-in names {clash}; rename them")
        for name, value in self.threshold_quantize_error.items():
            if not isinstance(value, (int, float)) or math.isnan(value):
                raise ConfigurationError(f"threshold_quantize_error[{name!r}] must be a number; got {value!r}")
        r = self.threshold_degrade_layer_ratio
        if not isinstance(r, (int, float)) or not 0 < r <= 1:
            raise ConfigurationError(f"threshold_degrade_layer_ratio must be in (0, 1]; got {r!r}")
