"""Activation statistics collected in one pass over the representative data.

Per node: a histogram with a fixed number of bins over a range that grows as data
arrives (bins merge when it grows, so counts stay exact), the count, sum and sum of
squares of all values, and min, max and mean per channel. Nothing per sample is kept:
memory is O(nodes x bins) whatever the size of the data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class NodeStatistics:
    """Statistics of one node's output activation.

    Attributes:
        counts: histogram counts, one per bin.
        edges: bin edges, ``len(counts) + 1`` of them (left edge first).
        count: number of finite values seen (== counts.sum()).
        sum / sum_squares: of all finite values.
        min / max: of all finite values.
        min_per_channel / max_per_channel / mean_per_channel: along the channel axis.
        nonfinite: number of NaN/inf values skipped.
    """

    counts: np.ndarray
    edges: np.ndarray
    count: int
    sum: float
    sum_squares: float
    min: float
    max: float
    min_per_channel: np.ndarray
    max_per_channel: np.ndarray
    mean_per_channel: np.ndarray
    nonfinite: int = 0
