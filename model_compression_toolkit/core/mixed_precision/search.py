"""Mixed precision: one weight bit-width per layer so that the weights fit a memory budget.

``thresholds_selection graph -> check_budget -> sensitivities -> knapsack -> n_bits + grids``

Memory (as in `core.memory`): the weights of a quantized layer count at its bit-width,
every other weight (biases, batch-norm parameters, layers kept float) at 32 bits. All
quantized weight tensors of a layer get the same bit-width.

Sensitivity of layer ``l`` at ``b`` bits: the layer's *local* noise-to-signal ratio,
``mean over samples of ||y_float - y_l,b||^2 / ||y_float||^2`` (1/SQNR, linear, clamped
to the +-100 dB of `core.similarity.metrics`), at its compare point (its own output, or the
activation it is fused with), where ``y_l,b`` is the output of the layer alone, fed
the float model's inputs, with its weights quantized at ``b`` bits and its activation
quantized as configured (`core.similarity.plan.local_graph`), scaled by the layer's *gain*:
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
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from model_compression_toolkit.core.calibration.quantizers import fake_quant
from model_compression_toolkit.core.calibration.thresholds import fill_weights_config
from model_compression_toolkit.core.config import MixedPrecisionConfig, ResourceUtilization
from model_compression_toolkit.core.graph import Graph, Node
from model_compression_toolkit.core.memory import FLOAT_BITS, graph_memory, shared_weights, total
from model_compression_toolkit.core.mixed_precision.knapsack import solve_knapsack
from model_compression_toolkit.core.mixed_precision.result import (
    LOCAL,
    NOT_MEASURED,
    WEIGHTS,
    LayerBits,
    MixedPrecisionResult,
)
from model_compression_toolkit.core.quant_config import NodeQuantConfig, WeightsQuantConfig
from model_compression_toolkit.core.similarity.metrics import compare
from model_compression_toolkit.core.similarity.plan import ComparePoint, Comparison, local_graph, local_group
from model_compression_toolkit.core.similarity.reference import FloatModel, float_chunks, sample_chunks
from model_compression_toolkit.errors import ResourceBudgetError

LOG = logging.getLogger("model_compression_toolkit")
GAIN_SAMPLES = 4  # samples of the per-layer output passes


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
    """Weights whose bits were set by hand (``cfg.manual``) count as fixed, at those bits.
    A shared layer's later calls hold its first call's arrays: counted there only, and given
    its bits after the search (`core.memory.shared_weights`)."""
    names, counts, fixed_bits = [], [], 0
    seen: set[int] = set()
    for node in graph.nodes():
        quantized = node.quant.weights
        own = {name for name, w in node.weights.items() if id(w) not in seen}
        seen.update(id(w) for w in node.weights.values())
        fixed_bits += FLOAT_BITS * sum(w.size for name, w in node.weights.items() if name not in quantized and name in own)
        fixed_bits += sum(node.weights[w].size * c.n_bits for w, c in quantized.items() if c.manual and w in own)
        searched = [w for w, c in quantized.items() if not c.manual and w in own]
        if searched:
            names.append(node.name)
            counts.append(sum(node.weights[w].size for w in searched))
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
    new_biases = new_biases or {}
    added = FLOAT_BITS / 8 * sum(new_biases.values())
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
def search_bit_widths(
    float_model: FloatModel,
    graph: Graph,
    target: ResourceUtilization,
    config: MixedPrecisionConfig,
    l_p_value: float,
    memory_cap: int,
) -> MixedPrecisionResult:
    """Choose each quantized layer's weight bits so the weights fit ``target``; set them in ``graph``.

    Args:
        float_model: the float side the sensitivities are measured against (its backend
            runs the models; its data gives the samples).
        graph: the prepared graph with thresholds selected; its weight configs are changed.
        target: the budget (``weights_memory`` bytes).
        config: the candidate bit-widths and the samples to measure on.
        l_p_value: the p of the ``LP`` error method, for the grids of other bit-widths.
        memory_cap: bytes of layer outputs held at once while measuring.

    Returns:
        The choice, its memory and the measured sensitivities.

    Raises:
        ResourceBudgetError: the budget is below the smallest reachable size (nothing changed).
    """
    problem = check_budget(graph, target, config.candidate_bits)
    bits, budget = problem.bits, float(target.weights_memory)
    if problem.memory(bits[0]) <= budget or not problem.names:
        variants = {bits[0]: _variant(graph, problem.names, bits[0], l_p_value)}
        sens: dict = {}
        how: dict = {}
        choice, samples, solver = [bits[0]] * len(problem.names), 0, "max bits"
    else:
        variants = {b: _variant(graph, problem.names, b, l_p_value) for b in bits}
        sens, how, samples = measure_sensitivities(float_model, graph, problem.names, variants, config.samples, memory_cap)
        costs = np.array([[sens[name][b] for b in bits] for name in problem.names])
        sizes = problem.counts[:, None] * np.asarray(bits, dtype=np.int64)[None, :]
        capacity = math.floor((budget - problem.fixed_bytes) * 8)
        picked, solver = solve_knapsack(costs, sizes, capacity)
        choice = [bits[j] for j in picked]
    for name, b in zip(problem.names, choice):
        graph.node(name).quant.weights = copy.deepcopy(variants[b].node(name).quant.weights)
    for name, holder in shared_weights(graph).items():  # a shared layer's later calls: its bits
        node, held = graph.node(name), graph.node(holder).quant.weights
        for wname in node.quant.weights:
            if wname in held and node.weights.get(wname) is graph.node(holder).weights.get(wname):
                node.quant.weights[wname] = copy.deepcopy(held[wname])
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
            if not cfg.manual and (cfg.n_bits != n_bits or cfg.grid is None):
                cfg.n_bits = n_bits
                fill_weights_config(cfg, node.weights[wname], l_p_value)
    return variant


def weights_nsr(node: Node, configs: dict[str, WeightsQuantConfig]) -> float:
    """``||w - q(w)||^2 / ||w||^2`` over the node's quantized tensors (0 for all-zero weights)."""
    noise = signal = 0.0
    for wname, cfg in configs.items():
        w = np.asarray(node.weights[wname], dtype=np.float64)
        w = np.where(np.isfinite(w), w, 0.0)
        assert cfg.grid is not None, f"{node.name}/{wname}: its grid is chosen before its error is measured"
        noise += float(np.sum((w - fake_quant(w, cfg.grid, cfg.channel_axes)) ** 2))
        signal += float(np.sum(w * w))
    return noise / signal if signal > 0 else 0.0


def _own_points(graph: Graph, points: list[ComparePoint], names: set[str]) -> dict[str, ComparePoint]:
    """Candidate layer -> the compare point whose local group holds it and no other candidate."""
    owner: dict[str, ComparePoint] = {}
    for point in points:
        candidates = {n.name for n in local_group(graph, graph.node(point.name))} & names
        if len(candidates) == 1 and (name := candidates.pop()) not in owner:
            owner[name] = point
    return owner


def _nsr_sum(reference: np.ndarray, actual: np.ndarray) -> float:
    """Sum over samples of the noise-to-signal ratio (`metrics.SampleMetrics.nsr`)."""
    return float(compare(reference, actual).nsr.sum())


def measure_sensitivities(
    float_model: FloatModel,
    graph: Graph,
    names: list[str],
    variants: dict[int, Graph],
    samples: int,
    memory_cap: int,
) -> tuple[dict[str, dict[int, float]], dict[str, str], int]:
    """Sensitivity of every candidate layer at every candidate bit-width (see the module doc).

    Returns:
        name -> bits -> sensitivity, name -> how it was measured, samples used.
    """
    backend = float_model.backend
    plan = Comparison.of(float_model.graph, graph)
    points = plan.points
    owner = _own_points(graph, points, set(names))
    locals_ = {b: local_graph(g, points) for b, g in variants.items()}  # the same point.local in each
    first = next(iter(locals_.values()))
    local_sum = {b: {p.name: 0.0 for p in points} for b in variants}
    seen = 0
    if first.graph.outputs:
        models = {b: backend.build(lg.graph, quantized=True) for b, lg in locals_.items()}
        out_names = [name for name, _ in first.graph.outputs]
        for data, f_out in float_chunks(float_model, plan, samples, memory_cap):
            feeds = first.inputs(data, f_out)
            for b, model in models.items():
                l_out = dict(zip(out_names, backend.forward(model, feeds)))
                for p in points:
                    if p.local:
                        local_sum[b][p.name] += _nsr_sum(f_out[p.reference], l_out[p.local])
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
    for name, out_nsr in output_nsr(float_model, graph, names, variants[low], min(GAIN_SAMPLES, samples)).items():
        base = sens[name][low]
        if base > 0 and out_nsr > 0:  # how much of this layer's noise reaches the output
            gain = out_nsr / base
            sens[name] = {b: v * gain for b, v in sens[name].items()}
            how[name] += ", scaled to the output"
    return sens, how, seen


def output_nsr(float_model: FloatModel, graph: Graph, names: list[str], low: Graph, samples: int) -> dict[str, float]:
    """Per layer: the model output's NSR when only that layer is quantized, at the lowest bits.

    ``float model`` vs ``float model with layer l's weights at b_min``: one build and one
    pass of ``samples`` samples per layer. Dividing by the layer's local NSR at b_min
    gives how much of its noise reaches the output (pooling averages it away, a following
    layer may amplify it); the local NSR at every bit-width is scaled by that gain.
    """
    backend = float_model.backend
    data = next(sample_chunks(float_model.data.samples(samples), samples))
    bare = graph.copy()
    for node in bare.nodes():
        node.quant = NodeQuantConfig()
    reference = backend.forward(backend.build(bare, quantized=False), data)
    out: dict[str, float] = {}
    for name in names:
        single = bare.copy()
        single.node(name).quant.weights = copy.deepcopy(low.node(name).quant.weights)
        single.node(name).quant.input_moments = low.node(name).quant.input_moments
        outputs = backend.forward(backend.build(single, quantized=True), data)
        total_nsr = sum(_nsr_sum(r, o) for r, o in zip(reference, outputs))
        out[name] = total_nsr / (len(data[0]) * max(len(reference), 1))
    return out
