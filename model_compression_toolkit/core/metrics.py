"""Per-sample error metrics between a float tensor and its quantized counterpart.

All metrics are finite, always:

- cosine similarity: +1 for identical directions; two all-zero samples count as
  identical (1.0), exactly one all-zero sample as unrelated (0.0).
- SQNR in dB: ``10 log10(signal power / noise power)``, clamped to
  [-SQNR_CEILING_DB, SQNR_CEILING_DB]; identical samples get the ceiling.
- MSE and max absolute error.

Non-finite values in either tensor are treated as zero (and counted by the caller).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SQNR_CEILING_DB = 100.0


@dataclass
class SampleMetrics:
    """One value per sample for each metric."""

    cosine: np.ndarray
    mse: np.ndarray
    sqnr_db: np.ndarray
    max_abs: np.ndarray

    @classmethod
    def concat(cls, parts: list[SampleMetrics]) -> SampleMetrics:
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("cosine", "mse", "sqnr_db", "max_abs")))


def _flat(x: np.ndarray) -> np.ndarray:
    """(samples, values), floating point as given (float32 stays float32: no big copies)."""
    x = np.asarray(x)
    x = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(-1, 1)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    if not np.isfinite(x).all():
        x = np.where(np.isfinite(x), x, 0.0)
    return x


def _row_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-row dot products in float64, cast chunk by chunk (no float64 copy of the inputs)."""
    return np.einsum("ij,ij->i", a, b, dtype=np.float64, casting="safe")


def compare(reference: np.ndarray, actual: np.ndarray) -> SampleMetrics:
    """Metrics of ``actual`` against ``reference``, per sample (axis 0 is the sample)."""
    a, b = _flat(reference), _flat(actual)
    if a.shape != b.shape:
        raise ValueError(f"cannot compare tensors of shapes {reference.shape} and {actual.shape}")
    with np.errstate(over="ignore"):
        diff = np.subtract(a, b)
    if not np.isfinite(diff).all():  # float32 extremes: subtract in float64
        diff = np.subtract(a, b, dtype=np.float64)
    signal, noise, norm_b, dot = _row_dot(a, a), _row_dot(diff, diff), _row_dot(b, b), _row_dot(a, b)
    denom = np.sqrt(signal * norm_b)
    with np.errstate(divide="ignore", invalid="ignore"):
        cosine = np.where(denom > 0, dot / np.where(denom > 0, denom, 1.0), 0.0)
        both_zero = (signal == 0) & (norm_b == 0)
        cosine = np.where(both_zero, 1.0, np.clip(cosine, -1.0, 1.0))
        ratio = np.where(noise > 0, signal / np.where(noise > 0, noise, 1.0), np.inf)
        sqnr = np.where(noise > 0, 10 * np.log10(np.maximum(ratio, 1e-300)), SQNR_CEILING_DB)
    sqnr = np.clip(np.nan_to_num(sqnr, nan=-SQNR_CEILING_DB), -SQNR_CEILING_DB, SQNR_CEILING_DB)
    n = max(a.shape[1], 1)
    return SampleMetrics(
        cosine=cosine,
        mse=noise / n,
        sqnr_db=sqnr,
        max_abs=np.abs(diff).max(axis=1) if a.shape[1] else np.zeros(len(a)),
    )
