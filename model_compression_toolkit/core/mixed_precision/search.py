"""Mixed precision: one weight bit-width per layer so that the weights fit a memory budget.

``thresholds_selection graph -> check_budget -> sensitivities -> knapsack -> n_bits + grids``

Memory (as in `core.memory`): the weights of a quantized layer count at its bit-width,
every other weight (biases, batch-norm parameters, layers kept float) at 32 bits. All
quantized weight tensors of a layer get the same bit-width.

Sensitivity of layer ``l`` at ``b`` bits: the layer's *local* noise-to-signal ratio,
``mean over samples of ||y_float - y_l,b||^2 / ||y_float||^2`` (1/SQNR, linear, clamped
to the +-100 dB of `core.metrics`), at its compare point (its own output, or the
activation it is fused with), where ``y_l,b`` is the output of the layer alone, fed
the float model's inputs, with its weights quantized at ``b`` bits and its activation
quantized as configured (`core.similarity.local_graph`), scaled by the layer's *gain*:
the model output's NSR when only that layer's weights are quantized (at the lowest
candidate bits, everything else float) divided by its local NSR at those bits. The local
NSR says how a layer's error grows with fewer bits; the gain says how much of it reaches
the output (global pooling averages noise away, later layers may amplify it).
Local NSRs are measured on the first ``MixedPrecisionConfig.samples`` representative
samples, gains on the first 4. Cost: one float pass with extra outputs, one pass of the
local model (every candidate layer side by side) per candidate bit-width, and one small
pass per candidate layer::

    float(prev) -> [conv__local(w at b bits) -> relu__local(q)]   one local model per b
    float model with only layer l at b_min bits                    one model per layer

A layer with no compare point of its own (its local group holds another candidate layer,
or it cannot be cut out) gets the weights' own quantization NSR, ``||w - q_b(w)||^2 /
||w||^2`` over its quantized tensors.

The objective is the sum of the chosen sensitivities: a first-order model in which the
layers' quantization noises are independent and add up at the output (no interaction
between layers is modelled).

Search: an exact multiple-choice knapsack, ``scipy.optimize.milp`` over binary
``x[l, b]`` with ``sum_b x[l, b] = 1`` and ``sum memory(l, b) x[l, b] <= budget - fixed``,
minimising ``sum sensitivity(l, b) x[l, b]``; if milp is missing or its answer breaks the
budget by a rounding, a dynamic programme over memory in bits (exact when the budget is
at most 10^6 steps of the items' common divisor, else items are rounded up to a coarser
step: the answer still fits the budget). A budget below the smallest reachable size (every
candidate layer at the lowest bits) raises `ResourceBudgetError` before anything changes;
a budget that fits every layer at the highest bits keeps them there without measuring.
"""

from __future__ import annotations

import copy
import csv
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from model_compression_toolkit.core.calibration.quantizers import fake_quant
from model_compression_toolkit.core.calibration.thresholds import fill_weights_config
from model_compression_toolkit.core.config import ResourceUtilization
from model_compression_toolkit.core.graph import Graph, Node
from model_compression_toolkit.core.memory import FLOAT_BITS, graph_memory, total
from model_compression_toolkit.core.quant_config import NodeQuantConfig, WeightsQuantConfig
from model_compression_toolkit.core.similarity.analysis import Comparison, float_chunks
from model_compression_toolkit.core.similarity.metrics import SQNR_CEILING_DB
from model_compression_toolkit.core.similarity.plan import (
    ComparePoint,
    _local_group,
    local_graph,
    sample_chunks,
)
from model_compression_toolkit.errors import ResourceBudgetError

if TYPE_CHECKING:
    from model_compression_toolkit.pipeline.session import Session

LOG = logging.getLogger("model_compression_toolkit")
JSON_FILE, CSV_FILE = "mixed_precision.json", "mixed_precision.csv"
DP_MAX_STEPS = 1_000_000
GAIN_SAMPLES = 4  # samples of the per-layer output passes
LOCAL, WEIGHTS, NOT_MEASURED = "local output", "weights only", "not measured"


@dataclass
class LayerBits:
    """One candidate layer's choice.

    Attributes:
        name: the node.
        bits: the chosen weight bit-width.
        sensitivity: candidate bits -> sensitivity (empty when not measured).
        weights: quantized weight values (the tensors whose bits are chosen).
        bytes: those weights' bytes at the chosen bits.
        measured: how the sensitivity was measured (``LOCAL``, ``WEIGHTS``, ``NOT_MEASURED``).
    """

    name: str
    bits: int
    sensitivity: dict[int, float]
    weights: int
    bytes: float
    measured: str


@dataclass
class MixedPrecisionResult:
    """The bit-widths chosen under a weights-memory budget (all sizes in bytes).

    Attributes:
        layers: one entry per layer with quantized weights, in topological order.
        candidate_bits: the bit-widths a layer could get, highest first.
        budget: the requested ``ResourceUtilization.weights_memory``.
        weights_memory: the weights memory of the chosen configuration.
        weights_memory_8bit: every candidate layer at 8 bits (the rest at 32).
        weights_memory_min: every candidate layer at the lowest candidate bits.
        fixed_memory: weights that are not quantized (32 bits), included in the above.
        objective: sum of the chosen sensitivities, or None when not measured.
        solver: ``"milp"``, ``"dp"`` or ``"max bits"`` (the budget fits the highest bits).
        samples: representative samples the sensitivities were measured on.
    """

    layers: list[LayerBits]
    candidate_bits: tuple[int, ...]
    budget: float
    weights_memory: float
    weights_memory_8bit: float
    weights_memory_min: float
    fixed_memory: float
    objective: float | None = None
    solver: str = "max bits"
    samples: int = 0

    @property
    def bits(self) -> dict[str, int]:
        return {layer.name: layer.bits for layer in self.layers}

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe (no NaN or inf; an infinite budget is None)."""
        return {
            "candidate_bits": list(self.candidate_bits),
            "budget_bytes": _finite(self.budget),
            "weights_memory_bytes": _finite(self.weights_memory),
            "weights_memory_8bit_bytes": _finite(self.weights_memory_8bit),
            "weights_memory_min_bytes": _finite(self.weights_memory_min),
            "fixed_memory_bytes": _finite(self.fixed_memory),
            "objective": _finite(self.objective),
            "solver": self.solver,
            "samples": self.samples,
            "layers": [
                {
                    "name": layer.name,
                    "bits": layer.bits,
                    "weights": layer.weights,
                    "bytes": _finite(layer.bytes),
                    "measured": layer.measured,
                    "sensitivity": {str(b): _finite(s) for b, s in layer.sensitivity.items()},
                }
                for layer in self.layers
            ],
        }

    def write(self, folder: str | Path) -> list[Path]:
        """Write ``mixed_precision.json`` and ``mixed_precision.csv`` into ``folder``."""
        folder = Path(folder)
        json_path, csv_path = folder / JSON_FILE, folder / CSV_FILE
        json_path.write_text(json.dumps(self.to_dict(), indent=2, allow_nan=False), encoding="utf-8")
        with csv_path.open("w", newline="", encoding="utf-8") as f:
            out = csv.writer(f)
            out.writerow(["layer", "bits", "weights", "bytes", "measured"] + [f"sensitivity_{b}" for b in self.candidate_bits])
            for layer in self.layers:
                sens = [_finite(layer.sensitivity.get(b)) for b in self.candidate_bits]
                out.writerow([layer.name, layer.bits, layer.weights, layer.bytes, layer.measured]
                             + ["" if s is None else f"{s:.6g}" for s in sens])  # fmt: skip
        return [json_path, csv_path]

    def summary(self) -> str:
        budget = "none" if not math.isfinite(self.budget) else f"{self.budget:.0f} B"
        head = (
            f"mixed precision ({self.solver}): weights {self.weights_memory:.0f} B for a budget of {budget} "
            f"(all 8-bit: {self.weights_memory_8bit:.0f} B, smallest: {self.weights_memory_min:.0f} B)"
        )
        if self.objective is not None:
            head += f", total sensitivity {self.objective:.4g}"
        width = max((len(layer.name) for layer in self.layers), default=5)
        lines = [head] + [
            f"  {layer.name:<{width}}  {layer.bits:>2} bits  {layer.bytes:>12.0f} B  "
            + "  ".join(f"{b}b: {s:.3g}" for b, s in layer.sensitivity.items())
            for layer in self.layers
        ]
        return "\n".join(lines)


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


# ------------------------------------------------------------------------ the budget
@dataclass
class BudgetProblem:
    """The memory side of the search: who can change bits, and what cannot.

    Attributes:
        names: candidate layers (nodes with quantized weights), in topological order.
        counts: quantized weight values per candidate layer.
        fixed_bytes: every other weight value at 32 bits.
        bits: candidate bit-widths, highest first.
    """

    names: list[str]
    counts: np.ndarray
    fixed_bytes: float
    bits: tuple[int, ...]

    def memory(self, bits: int | Sequence[int]) -> float:
        """Total weights bytes with the candidate layers at ``bits`` (one, or one per layer)."""
        per_layer = np.broadcast_to(np.asarray(bits, dtype=np.int64), self.counts.shape)
        return self.fixed_bytes + float(np.dot(self.counts, per_layer)) / 8


def budget_problem(graph: Graph, candidate_bits: Sequence[int]) -> BudgetProblem:
    names, counts, fixed_bits = [], [], 0
    for node in graph.nodes():
        quantized = node.quant.weights
        fixed_bits += FLOAT_BITS * sum(w.size for name, w in node.weights.items() if name not in quantized)
        if quantized:
            names.append(node.name)
            counts.append(sum(node.weights[w].size for w in quantized))
    bits = tuple(sorted(set(candidate_bits), reverse=True))
    return BudgetProblem(names, np.asarray(counts, dtype=np.int64), fixed_bits / 8, bits)


def check_budget(
    graph: Graph, target: ResourceUtilization, candidate_bits: Sequence[int], new_biases: Mapping[str, int] | None = None
) -> BudgetProblem:
    """The budget problem of ``graph``; `ResourceBudgetError` if no choice of bits meets it.

    Needs only the prepared graph (no statistics), so it can run before any work or log.
    ``new_biases`` (layer -> values) are biases that bias correction may add later, counted
    at 32 bits, so that a budget passing this check is not failed by them afterwards.
    """
    problem = budget_problem(graph, candidate_bits)
    added = FLOAT_BITS / 8 * sum((new_biases or {}).values())
    problem.fixed_bytes += added
    smallest = problem.memory(problem.bits[-1])
    if target.weights_memory < smallest:
        biases = (
            f", and {added:.0f} bytes of the zero biases bias correction gives {len(new_biases)} layers without one"
            if added
            else ""
        )
        raise ResourceBudgetError(
            f"weights_memory={target.weights_memory:.0f} bytes cannot be met: the smallest reachable weights "
            f"memory is {math.ceil(smallest)} bytes (every quantized layer at {problem.bits[-1]} bits, other "
            f"weights at 32 bits{biases}); with 8-bit weights it is {math.ceil(problem.memory(8))} bytes. Give a "
            f"budget of at least {math.ceil(smallest)} bytes, or add lower bit-widths to "
            "MixedPrecisionConfig.candidate_bits."
        )
    return problem


# ------------------------------------------------------------------------ the search
def search_bit_widths(session: Session, graph: Graph, target: ResourceUtilization) -> MixedPrecisionResult:
    """Choose each quantized layer's weight bits so the weights fit ``target``; set them in ``graph``.

    Args:
        session: gives the config, the float graph, the backend and the data.
        graph: the prepared graph with thresholds selected; its weight configs are changed.
        target: the budget (``weights_memory`` bytes).

    Returns:
        The choice, its memory and the measured sensitivities.

    Raises:
        ResourceBudgetError: the budget is below the smallest reachable size (nothing changed).
    """
    mp = session.config.mixed_precision_config
    problem = check_budget(graph, target, mp.candidate_bits)
    bits, budget = problem.bits, float(target.weights_memory)
    l_p = session.config.quantization_config.l_p_value
    if problem.memory(bits[0]) <= budget or not problem.names:
        variants = {bits[0]: _variant(graph, problem.names, bits[0], l_p)}
        choice, sens, how, samples, solver = [bits[0]] * len(problem.names), {}, {}, 0, "max bits"
    else:
        variants = {b: _variant(graph, problem.names, b, l_p) for b in bits}
        sens, how, samples = measure_sensitivities(session, graph, problem.names, variants)
        costs = np.array([[sens[name][b] for b in bits] for name in problem.names])
        sizes = problem.counts[:, None] * np.asarray(bits, dtype=np.int64)[None, :]
        capacity = math.floor((budget - problem.fixed_bytes) * 8)
        picked, solver = solve_knapsack(costs, sizes, capacity)
        choice = [bits[j] for j in picked]
    for name, b in zip(problem.names, choice):
        graph.node(name).quant.weights = copy.deepcopy(variants[b].node(name).quant.weights)
    final = total(graph_memory(graph, True)).weights_bytes
    layers = [
        LayerBits(name, b, dict(sens.get(name, {})), int(n), float(n) * b / 8, how.get(name, NOT_MEASURED))
        for name, b, n in zip(problem.names, choice, problem.counts)
    ]
    objective = float(sum(sens[name][b] for name, b in zip(problem.names, choice))) if sens else None
    result = MixedPrecisionResult(
        layers, bits, budget, final, problem.memory(8), problem.memory(bits[-1]), problem.fixed_bytes,
        objective, solver, samples,
    )  # fmt: skip
    LOG.info(result.summary())
    return result


def _variant(graph: Graph, names: list[str], n_bits: int, l_p_value: float) -> Graph:
    """A copy of ``graph`` with every candidate layer's weights at ``n_bits`` (grids refilled)."""
    variant = graph.copy()
    for name in names:
        node = variant.node(name)
        for wname, cfg in node.quant.weights.items():
            if cfg.n_bits != n_bits or cfg.grid is None:
                cfg.n_bits = n_bits
                fill_weights_config(cfg, node.weights[wname], l_p_value)
    return variant


def weights_nsr(node: Node, configs: dict[str, WeightsQuantConfig]) -> float:
    """``||w - q(w)||^2 / ||w||^2`` over the node's quantized tensors (0 for all-zero weights)."""
    noise = signal = 0.0
    for wname, cfg in configs.items():
        w = np.asarray(node.weights[wname], dtype=np.float64)
        w = np.where(np.isfinite(w), w, 0.0)
        noise += float(np.sum((w - fake_quant(w, cfg.grid, cfg.channel_axes)) ** 2))
        signal += float(np.sum(w * w))
    return noise / signal if signal > 0 else 0.0


def _own_points(graph: Graph, points: list[ComparePoint], names: set[str]) -> dict[str, ComparePoint]:
    """Candidate layer -> the compare point whose local group holds it and no other candidate."""
    owner: dict[str, ComparePoint] = {}
    for point in points:
        candidates = {n.name for n in _local_group(graph, graph.node(point.name))} & names
        if len(candidates) == 1 and (name := candidates.pop()) not in owner:
            owner[name] = point
    return owner


def measure_sensitivities(
    session: Session, graph: Graph, names: list[str], variants: dict[int, Graph]
) -> tuple[dict[str, dict[int, float]], dict[str, str], int]:
    """Sensitivity of every candidate layer at every candidate bit-width (see the module doc).

    Returns:
        name -> bits -> sensitivity, name -> how it was measured, samples used.
    """
    backend, cfg = session.backend, session.config
    n_samples = cfg.mixed_precision_config.samples
    plan = Comparison.of(session.initial, graph)
    points = plan.points
    owner = _own_points(graph, points, set(names))
    locals_ = {b: local_graph(g, points) for b, g in variants.items()}  # the same point.local in each
    first = next(iter(locals_.values()))
    local_sum = {b: {p.name: 0.0 for p in points} for b in variants}
    seen = 0
    if first.graph.outputs:
        models = {b: backend.build(lg.graph, quantized=True) for b, lg in locals_.items()}
        out_names = [name for name, _ in first.graph.outputs]
        chunks = float_chunks(
            backend, session.initial, plan, session.data, n_samples, cfg.debug_config.similarity_memory_cap,
            session.reference,
        )  # fmt: skip
        for data, f_out in chunks:
            feeds = first.inputs(data, f_out)
            signal = {p.name: _power(f_out[p.reference]) for p in points if p.local}
            for b, model in models.items():
                l_out = dict(zip(out_names, backend.run(model, feeds)))
                for p in points:
                    if p.local:
                        local_sum[b][p.name] += _nsr_sum(f_out[p.reference], l_out[p.local], signal[p.name])
                del l_out
            seen += len(data[0])
            del f_out, feeds
    sens: dict[str, dict[int, float]] = {}
    how: dict[str, str] = {}
    for name in names:
        point = owner.get(name)
        if point is not None and point.local and seen:
            sens[name] = {b: local_sum[b][point.name] / seen for b in variants}
            how[name] = LOCAL
        else:
            sens[name] = {b: weights_nsr(g.node(name), g.node(name).quant.weights) for b, g in variants.items()}
            how[name] = WEIGHTS
    low = min(variants)
    for name, out_nsr in output_nsr(session, graph, names, variants[low]).items():
        base = sens[name][low]
        if base > 0 and out_nsr > 0:  # how much of this layer's noise reaches the output
            gain = out_nsr / base
            sens[name] = {b: v * gain for b, v in sens[name].items()}
            how[name] += ", scaled to the output"
    return sens, how, seen


def output_nsr(session: Session, graph: Graph, names: list[str], low: Graph) -> dict[str, float]:
    """Per layer: the model output's NSR when only that layer is quantized, at the lowest bits.

    ``float model`` vs ``float model with layer l's weights at b_min``: one build and one
    pass of ``GAIN_SAMPLES`` samples per layer. Dividing by the layer's local NSR at b_min
    gives how much of its noise reaches the output (pooling averages it away, a following
    layer may amplify it); the local NSR at every bit-width is scaled by that gain.
    """
    backend = session.backend
    n = min(GAIN_SAMPLES, session.config.mixed_precision_config.samples)
    data = next(sample_chunks(session.data.samples(n), n))
    bare = graph.copy()
    for node in bare.nodes():
        node.quant = NodeQuantConfig()
    reference = backend.run(backend.build(bare, quantized=False), data)
    signal = [_power(r) for r in reference]
    out: dict[str, float] = {}
    for name in names:
        single = bare.copy()
        single.node(name).quant.weights = copy.deepcopy(low.node(name).quant.weights)
        outputs = backend.run(backend.build(single, quantized=True), data)
        total_nsr = sum(_nsr_sum(r, o, s) for r, o, s in zip(reference, outputs, signal))
        out[name] = total_nsr / (len(data[0]) * max(len(reference), 1))
    return out


def _rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    x = x.reshape(len(x), -1) if x.ndim > 1 else x.reshape(-1, 1)
    return x if np.isfinite(x).all() else np.where(np.isfinite(x), x, 0)


def _power(x: np.ndarray) -> np.ndarray:
    """Per-sample sum of squares, accumulated in float64."""
    x = _rows(x)
    return np.einsum("ij,ij->i", x, x, dtype=np.float64) if x.dtype != np.float64 else np.einsum("ij,ij->i", x, x)


def _nsr_sum(reference: np.ndarray, actual: np.ndarray, signal: np.ndarray) -> float:
    """Sum over samples of noise power / signal power (1/SQNR, clamped as `metrics.compare` clamps SQNR)."""
    noise = _power(_rows(reference) - _rows(actual))
    floor = 10.0 ** (-SQNR_CEILING_DB / 10)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(signal > 0, noise / np.where(signal > 0, signal, 1.0), np.where(noise > 0, 1 / floor, 0.0))
    return float(np.clip(ratio, floor * (noise > 0), 1 / floor).sum())


# ------------------------------------------------------------------------ the knapsack
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
