"""The exact multiple-choice knapsack mixed precision solves: one option per layer, least
summed cost within a size budget (`scipy.optimize.milp`, or a dynamic programme)."""

from __future__ import annotations

import math
from functools import reduce

import numpy as np

from model_compression_toolkit.errors import ResourceBudgetError

DP_MAX_STEPS = 1_000_000


def solve_knapsack(costs: np.ndarray, sizes: np.ndarray, capacity: int, method: str = "milp") -> tuple[list[int], str]:
    """Pick one option per row minimising the summed cost with the summed size <= capacity.

    Args:
        costs: (layers, options) sensitivities.
        sizes: (layers, options) non-negative integer sizes (bits).
        capacity: the largest total size allowed.
        method: ``"milp"`` (falls back to the DP), or ``"dp"``.

    Returns:
        The option index per row, and the solver that produced it.
    """
    costs = np.nan_to_num(np.asarray(costs, dtype=np.float64), nan=1e30, posinf=1e30)
    sizes = np.asarray(sizes, dtype=np.int64)
    base = sizes.min(axis=1)
    extra, room = sizes - base[:, None], int(capacity - base.sum())
    if room < 0:
        raise ResourceBudgetError(f"no choice fits: the smallest total size is {int(base.sum())}, capacity {capacity}")
    if method == "milp":
        picked = _milp(costs, extra, room)
        if picked is not None:
            return picked, "milp"
    return _dp(costs, extra, room), "dp"


def _milp(costs: np.ndarray, extra: np.ndarray, room: int) -> list[int] | None:
    try:
        from scipy.optimize import Bounds, LinearConstraint, milp
    except ImportError:
        return None
    n_layers, n_opts = costs.shape
    scale = (float(np.abs(costs).max()) or 1.0) / 1e6  # HiGHS stops within an absolute gap of 1e-6
    size_scale = float(max(room, 1))
    one_hot = np.kron(np.eye(n_layers), np.ones((1, n_opts)))
    for slack in (0.0, 1e-6, 1e-4):  # tighten if rounding let the answer break the budget
        constraints = [
            LinearConstraint(one_hot, 1, 1),
            LinearConstraint(extra.reshape(1, -1) / size_scale, -np.inf, 1.0 - slack),
        ]
        res = milp(costs.ravel() / scale, constraints=constraints, integrality=np.ones(costs.size),
                   bounds=Bounds(0, 1), options={"mip_rel_gap": 0.0})  # fmt: skip
        if res.x is None:
            return None
        picked = [int(j) for j in np.argmax(res.x.reshape(n_layers, n_opts), axis=1)]
        if int(extra[np.arange(n_layers), picked].sum()) <= room:
            return picked
    return None


def _dp(costs: np.ndarray, extra: np.ndarray, room: int) -> list[int]:
    """Exact multiple-choice knapsack by dynamic programming over the size (see module doc)."""
    n_layers, n_opts = costs.shape
    step = reduce(math.gcd, (int(s) for s in extra.ravel() if s), 0) or 1
    if room // step > DP_MAX_STEPS:
        step = max(step, math.ceil(room / DP_MAX_STEPS))
    units = -(-extra // step)  # rounded up: a coarse answer still fits
    cap = room // step + 1
    dp = np.zeros(cap)  # least cost of the rows so far within each capacity
    choice = np.zeros((n_layers, cap), dtype=np.int32)
    for i in range(n_layers):
        new = np.full(cap, np.inf)
        for j in range(n_opts):
            u = int(units[i, j])
            if u >= cap:
                continue
            cand = np.full(cap, np.inf)
            cand[u:] = dp[: cap - u] + costs[i, j]
            better = cand < new
            new[better], choice[i, better] = cand[better], j
        dp = new
    picked, c = [0] * n_layers, cap - 1
    for i in reversed(range(n_layers)):
        picked[i] = int(choice[i, c])
        c -= int(units[i, picked[i]])
    return picked
