"""The report file of an xquant call, beside its call folders in ``report_dir``::

    <report_dir>/quant_report.json        the result dict (MCT's file name), numbers finite or null
                 <Model>_xquant_repr_<time>/   the comparison on the representative data (TensorBoard
                 <Model>_xquant_val_<time>/    runs and similarity_report.*), on the validation data
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from model_compression_toolkit.core.numbers import json_safe

REPORT_FILE = "quant_report.json"


def write_xquant_report(folder: Path, result: dict[str, Any]) -> Path:
    """``quant_report.json`` in ``folder``."""
    path = Path(folder) / REPORT_FILE
    path.write_text(json.dumps(json_safe(result), indent=1, allow_nan=False), encoding="utf-8")
    return path
