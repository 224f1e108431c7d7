"""The report files of a PTQ call, beside its TensorBoard runs::

    <call folder>/similarity_report.json   the ranked similarity report (`SimilarityReport.to_json`)
                  similarity_report.csv    one row per compare point
                  similarity_causes.csv    one row per quantizer, worst first
                  mixed_precision.json     the bit-widths chosen under a budget
                  mixed_precision.csv
"""

from __future__ import annotations

from pathlib import Path

from model_compression_toolkit.core.mixed_precision.result import CSV_FILE, JSON_FILE, MixedPrecisionResult
from model_compression_toolkit.core.similarity.report import SimilarityReport

SIMILARITY_JSON, SIMILARITY_CSV = "similarity_report.json", "similarity_report.csv"
CAUSES_CSV = "similarity_causes.csv"


def write_similarity_report(folder: Path, report: SimilarityReport) -> list[Path]:
    """``similarity_report.json``, ``similarity_report.csv`` (a row per layer) and
    ``similarity_causes.csv`` (a row per quantizer) in ``folder``."""
    paths = [folder / SIMILARITY_JSON, folder / SIMILARITY_CSV, folder / CAUSES_CSV]
    data = report.to_dict()
    for path, text in zip(paths, (report.to_json(data), report.to_csv(data), report.causes_csv(data))):
        path.write_text(text, encoding="utf-8")
    return paths


def write_mixed_precision(folder: Path, result: MixedPrecisionResult) -> list[Path]:
    """``mixed_precision.json`` and ``.csv`` in ``folder``."""
    paths = [folder / JSON_FILE, folder / CSV_FILE]
    paths[0].write_text(result.to_json(), encoding="utf-8")
    paths[1].write_text(result.to_csv(), encoding="utf-8", newline="")
    return paths
