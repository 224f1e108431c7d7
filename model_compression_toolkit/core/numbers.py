"""Numbers as JSON and the reports can hold them: finite, or None.

Every report the library writes (the similarity report, the mixed-precision choice,
`QuantizationInfo.to_dict`, the TensorBoard tables) holds no NaN or inf: a number that is
not finite is left out, and this module is the one place that decides what that means.
It also writes sizes the one way every report shows them (`format_bytes`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def finite_or_none(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (a bool is not), else None."""
    if value is None or isinstance(value, (bool, np.bool_, str, bytes)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def format_bytes(n: float) -> str:
    """Bytes as every report writes them: ``812 B``, ``56.4 KiB``, ``3.2 MiB``, ``1.1 GiB``."""
    for unit in ("B", "KiB", "MiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def json_safe(value: Any) -> Any:
    """A copy of ``value`` that JSON holds: numpy arrays and scalars become lists and numbers,
    floats that are not finite become None, dicts, lists and tuples are walked."""
    if isinstance(value, (np.ndarray, np.generic)):
        value = value.tolist()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
