"""The suggested fix's grids of more bits: chosen once per activation and remembered
(`calibration.wider.ActivationGrids`), each the grid a fresh threshold search gives."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.core.calibration.statistics import StatisticsCollector
from model_compression_toolkit.core.calibration.thresholds import fill_activation_config
from model_compression_toolkit.core.calibration.wider import CHOSEN, ActivationGrids
from model_compression_toolkit.core.config import QuantizationErrorMethod as QE
from model_compression_toolkit.core.config import QuantizationMethod as QM
from model_compression_toolkit.core.quant_config import ActivationQuantConfig
from model_compression_toolkit.core.similarity.fix import SuggestedFix, fixed_graph, with_activation_bits
from model_compression_toolkit.core.similarity.parts import OutputImpact
from model_compression_toolkit.core.similarity.trials import MeasuredOnce, SearchStats
from model_compression_toolkit.pipeline.backends import get_backend
from model_compression_toolkit.pipeline.session import Session
from tests.fixtures.digits import representative_dataset


def _stats(x: np.ndarray):
    c = StatisticsCollector(256, None)
    c.update(np.asarray(x, np.float32))
    return c.result()


rng = np.random.default_rng(0)
DATA = {
    "relu": np.maximum(rng.normal(size=4096), 0.0),
    "signed tail": np.concatenate([rng.normal(0.0, 1.0, 4096), [40.0, -3.0]]),
    "shifted relu": np.maximum(rng.normal(size=4096), 0.0) * 5 - 0.3,  # relu -> bn: uniform wins
}
CONFIGS = {
    "chosen grid": dict(method=QM.SYMMETRIC, error_method=QE.MSE, choose_grid=True),
    "uniform": dict(method=QM.UNIFORM, error_method=QE.MSE),
    "power of two, MAE": dict(method=QM.POWER_OF_TWO, error_method=QE.MAE),
    "shift negative": dict(method=QM.SYMMETRIC, error_method=QE.MSE, shift_negative_ratio=0.5),
    "z threshold": dict(method=QM.SYMMETRIC, error_method=QE.LP, z_threshold=3.0),
}


def _same(a: ActivationQuantConfig, b: ActivationQuantConfig) -> None:
    for field in CHOSEN:
        va, vb = getattr(a, field), getattr(b, field)
        if field == "grid":
            for part in ("scale", "zero_point"):
                np.testing.assert_array_equal(getattr(va, part), getattr(vb, part))
            assert (va.qmin, va.qmax) == (vb.qmin, vb.qmax)
        else:
            assert va == vb, (field, va, vb)


@pytest.mark.parametrize("data", list(DATA))
@pytest.mark.parametrize("settings", list(CONFIGS))
def test_a_remembered_grid_is_the_grid_a_fresh_search_gives(data, settings):
    stats = _stats(DATA[data])
    # what the fix starts from: the 8-bit config as the threshold step left it
    base = ActivationQuantConfig(n_bits=8, **CONFIGS[settings])
    fill_activation_config(base, stats, 2.0)
    grids = ActivationGrids({"a": stats})
    for bits in (16, 16, 12, 16):
        fresh, remembered = copy.deepcopy(base), copy.deepcopy(base)
        fresh.n_bits = remembered.n_bits = bits
        fill_activation_config(fresh, stats, 2.0)
        grids.fill("a", remembered, 2.0)
        _same(remembered, fresh)
    assert grids.searches == 2  # 16 bits once, 12 bits once
    # a copy, not the remembered config itself: changing one candidate's grid leaves the next
    remembered.grid.scale = remembered.grid.scale * 2
    again = copy.deepcopy(base)
    again.n_bits = 16
    grids.fill("a", again, 2.0)
    _same(again, fresh)


def test_other_settings_or_another_p_search_again():
    stats = _stats(DATA["signed tail"])
    grids = ActivationGrids({"a": stats})
    for cfg, p in [
        (ActivationQuantConfig(16, QM.SYMMETRIC, QE.LP), 2.0),
        (ActivationQuantConfig(16, QM.SYMMETRIC, QE.LP), 3.0),
        (ActivationQuantConfig(16, QM.UNIFORM, QE.LP), 2.0),
        (ActivationQuantConfig(16, QM.SYMMETRIC, QE.MSE), 2.0),
    ]:
        fresh = copy.deepcopy(cfg)
        fill_activation_config(fresh, stats, p)
        grids.fill("a", cfg, p)
        _same(cfg, fresh)
    assert grids.searches == 4
    assert dict(grids) == {"a": stats} and len(grids) == 1


def _calibrated(model, x_train):
    """(the graph with its thresholds, the collected statistics) of one staged PTQ."""
    with Session(
        model, representative_dataset(x_train), mct.core.CoreConfig(), get_backend(model)
    ) as session:
        graph = session.prepare()
        stats = session.statistics(graph)
        session.select_thresholds(graph)
    return graph, stats


def test_the_fix_graphs_with_remembered_grids_are_those_of_fresh_searches(trained_digits, fw):
    """Every activation at 16 bits, twice, and one activation alone: the same grids as with
    the plain statistics (a search each time), one search per activation in all."""
    model, x_train, _, _ = trained_digits
    graph, stats = _calibrated(model, x_train)
    acts = [n.name for n in graph.nodes() if n.quant.activation is not None and n.quant.activation.grid]
    assert len(acts) > 3
    grids = ActivationGrids(stats)
    every = SuggestedFix(activation_n_bits=16)
    fresh = fixed_graph(graph, every, 2.0, stats)
    for variant in (fixed_graph(graph, every, 2.0, grids), fixed_graph(graph, every, 2.0, grids)):
        for name in acts:
            assert variant.node(name).quant.activation.n_bits == 16
            _same(variant.node(name).quant.activation, fresh.node(name).quant.activation)
    one = with_activation_bits(graph, {acts[1]: 16}, grids)
    _same(one.node(acts[1]).quant.activation, fresh.node(acts[1]).quant.activation)
    assert grids.searches == len([n for n in acts if n in stats])
    # the graph the fix started from keeps its 8-bit grids
    assert all(graph.node(n).quant.activation.n_bits == 8 for n in acts)


def _quantization(graph) -> tuple:
    """Every quantizer of ``graph``: its bits and grid, node by node (None: off)."""

    def grid(g) -> tuple | None:
        return (
            None if g is None else (np.asarray(g.scale).tobytes(), np.asarray(g.zero_point).tobytes(), g.qmin)
        )

    out = []
    for node in graph.nodes():
        act = node.quant.activation
        out.append((node.name, None if act is None else (act.n_bits, grid(act.grid))))
        out += [(node.name, w, c.n_bits, grid(c.grid)) for w, c in sorted(node.quant.weights.items())]
    return tuple(out)


def test_the_fix_search_runs_no_candidate_twice_and_makes_each_graph_once(fw, trained_digits):
    """On the damaged digits CNN the causes' fix is measured while it grows and then judged:
    one run of its model, the same graph object both times; and what the search suggests
    is what a candidate measured on its own gives."""
    from tests.fixtures.counted import analyzed
    from tests.fixtures.damage import outlier_channel

    model, x_train, _, _ = trained_digits
    bad, _names = outlier_channel(fw.name, model, x_train[:256])
    graph, result, counter = analyzed(fw, bad, x_train)
    fix = result.report.fix
    whole = [g for g, quantized, extra in counter.runs if quantized and not extra and g is not None]
    whole = [g for g in whole if [n.name for n in g.nodes()] == [n.name for n in graph.nodes()]]
    assert len(whole) >= 2, counter.runs  # the fix's candidates, run whole
    seen = [_quantization(g) for g in whole]
    assert len(set(seen)) == len(seen), "a candidate's quantization ran twice"
    assert fix.restores, result.report.summary()


class _Counting:
    """A probe that counts its runs: the impact of a graph is its number of nodes."""

    def __init__(self) -> None:
        self.runs: list[tuple[int, str | None]] = []

    def impact(self, variant, at=None):
        self.runs.append((id(variant), at))
        n = float(len(list(variant.nodes())))
        return OutputImpact(sqnr_db=n, whole_db=n)


def test_a_graph_measured_whole_is_measured_once_and_its_graph_made_once(fw, trained_digits):
    model, x_train, _, _ = trained_digits
    graph, stats = _calibrated(model, x_train)
    search = SearchStats(stats)
    probe = MeasuredOnce(_Counting())
    every, every_too = SuggestedFix(activation_n_bits=16), SuggestedFix(activation_n_bits=16, equalize=True)
    first = fixed_graph(graph, every, 2.0, search)
    assert fixed_graph(graph, every_too, 2.0, search) is first  # the same changes: the same graph
    assert fixed_graph(graph, SuggestedFix(weights_n_bits=16), 2.0, search) is not first
    assert fixed_graph(graph.copy(), every, 2.0, search) is not first  # another graph: made again
    assert _quantization(first) == _quantization(fixed_graph(graph, every, 2.0, stats))
    for _ in range(3):
        probe.output_sqnr_db(first)
    probe.impact(first, at="x")  # a cut, never remembered
    probe.impact(first, at="x")
    probe.impact(first.copy())  # an equal graph, not this one: measured
    assert probe.probe.runs == [
        (id(first), None),
        (id(first), "x"),
        (id(first), "x"),
        (probe.probe.runs[-1][0], None),
    ]
    assert probe.runs_saved == 2
