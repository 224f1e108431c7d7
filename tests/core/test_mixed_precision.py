"""Mixed precision under a weights-memory budget, for both frameworks, and the knapsack itself."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.core.mixed_precision.knapsack import solve_knapsack
from model_compression_toolkit.core.mixed_precision.result import JSON_FILE
from model_compression_toolkit.errors import ResourceBudgetError
from model_compression_toolkit.observers.stage_view import stage_run
from tests.fixtures.digits import accuracy, representative_dataset
from tests.fixtures.tb import load, resources, run_folders

CONFIG = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))
_RUNS: dict[str, dict] = {}


@pytest.fixture
def runs(fw, trained_digits, tmp_path_factory):
    """An all-8-bit run and a run at 50 % of its weights memory, both logged (once per framework)."""
    if fw.name not in _RUNS:
        model, x_train, x_test, y_test = trained_digits
        logs = tmp_path_factory.mktemp(f"mp_{fw.name}")
        gen = representative_dataset(x_train)
        mct.set_log_folder(logs / "plain")
        _, plain = fw.ptq(model, gen, CONFIG)
        budget = 0.5 * plain.memory.weights_quantized_bytes
        mct.set_log_folder(logs / "mixed")
        q_model, mixed = fw.ptq(
            model, gen, core_config=CONFIG, target_resource_utilization=mct.core.ResourceUtilization(weights_memory=budget)
        )
        mct.set_log_folder(None)
        _RUNS[fw.name] = {
            "plain": plain, "mixed": mixed, "budget": budget,
            "accuracy": accuracy(fw.predict(q_model), x_test, y_test),
        }  # fmt: skip
    return _RUNS[fw.name]


def test_half_of_the_8bit_memory_is_met(fw, runs):
    result, info, budget = runs["mixed"].mixed_precision, runs["mixed"], runs["budget"]
    assert result is not None
    assert result.weights_memory <= budget
    assert info.memory.weights_quantized_bytes <= budget
    assert math.isclose(result.weights_memory, info.memory.weights_quantized_bytes)
    assert any(layer.bits < 8 for layer in result.layers)
    assert {layer.name for layer in result.layers} == {n for n, li in info.layers.items() if li.weights}
    for layer in result.layers:  # the grids follow the chosen bits
        for cfg in info.layers[layer.name].weights.values():
            assert cfg["n_bits"] == layer.bits
            assert cfg["grid"]["qmax"] == 2 ** (layer.bits - 1) - 1
    assert result.objective is not None and math.isfinite(result.objective)
    json.dumps(info.to_dict(), allow_nan=False)
    print(f"\n{fw.name}: quantized accuracy at 50 % budget {runs['accuracy']:.1f} %\n{result.summary()}")
    assert math.isfinite(runs["accuracy"]) and 0 <= runs["accuracy"] <= 100


def test_accuracy_at_half_budget_stays_sensible(runs):
    assert runs["accuracy"] > 50


def test_logged_run_shows_the_chosen_bits(runs):
    plain_run = run_folders(runs["plain"].log_folder.parent)[0]
    mixed_run = runs["mixed"].log_folder
    assert (mixed_run / JSON_FILE).is_file()
    written = json.loads((mixed_run / JSON_FILE).read_text())
    assert written["weights_memory_bytes"] <= runs["budget"]
    plain_bytes = sum(resources(load(plain_run / stage_run("quantized_graph"))).values())
    mixed_acc = load(mixed_run / stage_run("quantized_graph"))
    assert sum(resources(mixed_acc).values()) < plain_bytes
    assert "Weights final bit-width config" in mixed_acc.Tags()["images"]


def test_impossible_budget_fails_before_any_log_folder(fw, trained_digits, tmp_path):
    model, x_train, _, _ = trained_digits
    mct.set_log_folder(tmp_path / "logs")
    target = mct.core.ResourceUtilization(weights_memory=10)
    with pytest.raises(ResourceBudgetError) as err:
        fw.ptq(model, representative_dataset(x_train, 1), core_config=CONFIG, target_resource_utilization=target)
    message = str(err.value)
    assert "smallest reachable weights memory is 6444 bytes" in message  # 23824 weights at 2 bits + 122 floats
    assert "10 bytes" in message and "8-bit" in message
    assert run_folders(tmp_path / "logs") == []


def _brute_force(costs: np.ndarray, sizes: np.ndarray, capacity: int) -> float:
    rows = np.arange(len(costs))
    best = math.inf
    for combo in itertools.product(range(costs.shape[1]), repeat=len(costs)):
        if sizes[rows, combo].sum() <= capacity:
            best = min(best, float(costs[rows, combo].sum()))
    return best


@pytest.mark.parametrize("method", ["milp", "dp"])
def test_knapsack_matches_brute_force(method):
    rng = np.random.default_rng(0)
    for _ in range(30):
        layers = int(rng.integers(1, 6))
        counts = rng.integers(1, 200, size=layers)
        bits = np.array([8, 4, 2])
        sizes = counts[:, None] * bits[None, :]
        costs = np.sort(rng.random((layers, 3)) * 10.0 ** rng.uniform(-6, 0, size=(layers, 1)), axis=1)
        capacity = int(rng.integers(sizes[:, -1].sum(), sizes[:, 0].sum() + 1))
        picked, solver = solve_knapsack(costs, sizes, capacity, method=method)
        rows = np.arange(layers)
        assert solver == method
        assert sizes[rows, picked].sum() <= capacity
        assert costs[rows, picked].sum() == pytest.approx(_brute_force(costs, sizes, capacity), rel=1e-9, abs=1e-15)


def test_the_budget_check_before_any_work_counts_the_biases_bias_correction_adds(tmp_path):
    """Layers without a bias get one from bias correction, after the statistics. The check
    made before any work counts them, so the smallest budget it names is met, not failed
    once the logs are half written."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, bias=False), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 4, bias=False)
    ).eval()
    x = np.random.default_rng(0).standard_normal((16, 3, 8, 8)).astype(np.float32) + 1.0

    def gen():
        yield [x[:8]]
        yield [x[8:]]

    def ptq(weights_memory: float):
        target = mct.core.ResourceUtilization(weights_memory=weights_memory)
        return mct.ptq.pytorch_post_training_quantization(model, gen, core_config=CONFIG, target_resource_utilization=target)

    mct.set_log_folder(tmp_path / "logs")
    try:
        with pytest.raises(ResourceBudgetError) as err:
            ptq(10)
        # 216 + 1152 kernel values at 2 bits, and 8 + 4 bias values at 32 bits
        assert "smallest reachable weights memory is 390 bytes" in str(err.value)
        assert "48 bytes of the zero biases bias correction gives 2 layers" in str(err.value)
        assert run_folders(tmp_path / "logs") == []
        _, info = ptq(390)
    finally:
        mct.set_log_folder(None)
    assert info.mixed_precision.weights_memory <= 390
    assert {layer.bits for layer in info.mixed_precision.layers} == {2}
    assert len(run_folders(tmp_path / "logs")) == 1
