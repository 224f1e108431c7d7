"""Numbers as JSON and the reports can hold them: finite, or None.

Every report the library writes (the similarity report, the mixed-precision choice,
`QuantizationInfo.to_dict`, the TensorBoard tables) holds no NaN or inf: a number that is
not finite is left out, and this module is the one place that decides what that means.
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
