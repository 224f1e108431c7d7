"""A 1000-layer model quantizes and logs every stage with bounded memory."""

from __future__ import annotations

from pathlib import Path

from model_compression_toolkit.observers.stage_view import stage_run
from tests.fixtures.tb import load
from tests.robustness.helpers import assert_complete_run, start_worker, worker_result

PEAK_GROWTH_BOUND_MIB = 1536


def test_a_thousand_layer_model_quantizes_and_logs_with_bounded_memory(tmp_path):
    """nn.Sequential of 500 x (Linear(16, 16) + ReLU), two small batches, logging on with
    the default configuration: PTQ finishes, the quantized model runs, every stage holds
    the whole graph, and the peak RSS of the process grows by less than 1.5 GiB (VmHWM,
    measured in a fresh subprocess, so other tests do not count)."""
    proc = start_worker("big", tmp_path / "logs")
    result = worker_result(proc, timeout=400)
    print(
        f"\n1000-layer PTQ with logging: peak RSS {result['peak_mib']:.0f} MiB, grew by "
        f"{result['growth_mib']:.0f} MiB over {result['base_mib']:.0f} MiB, {result['seconds']:.1f} s"
    )
    assert result["finite"]
    assert result["growth_mib"] < PEAK_GROWTH_BOUND_MIB, result
    assert result["layers"] >= 1000  # the input, 500 linear layers and 500 ReLUs (no layer lost)
    run = Path(result["run"])
    assert_complete_run(run)
    assert len(load(run / stage_run("initial_graph")).Graph().node) == 1001
