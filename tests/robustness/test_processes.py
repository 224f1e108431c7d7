"""Several processes, and a process that dies: logs stay separate, complete and loadable."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tensorboard.backend.event_processing import event_multiplexer

from model_compression_toolkit.observers.stage_view import stage_run
from tests.fixtures.tb import layer_names, load, run_folders
from tests.robustness.helpers import assert_complete_run, event_files, start_worker, worker_result


def _wait_for(paths: list[Path], procs, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        for proc in procs:
            if proc.poll() is not None:
                raise AssertionError(
                    f"worker exited early ({proc.returncode}):\n{proc.stderr.read()[-3000:]}"
                )
        assert time.monotonic() < deadline, f"workers never wrote {paths}"
        time.sleep(0.05)


def test_two_processes_logging_into_the_same_folder_at_once_give_two_complete_runs(tmp_path):
    """Two processes quantizing into one log folder at the same moment get one call folder
    each (never a shared or merged one), and every stage of both loads in TensorBoard."""
    logs = tmp_path / "logs"
    go = tmp_path / "go"
    ready = [tmp_path / "ready0", tmp_path / "ready1"]
    procs = [start_worker("ptq", logs, r, go) for r in ready]
    try:
        _wait_for(ready, procs, timeout=120)
        go.touch()  # both start quantizing now: their call folders are created in the same second
        results = [worker_result(p, timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    runs = run_folders(logs)
    assert len(runs) == 2
    assert sorted(Path(r["run"]) for r in results) == runs
    for run in runs:
        assert_complete_run(run)
        log = (run / "mct.log").read_text(encoding="utf-8")
        assert log.count("quantization call") == 1, log  # one process per call folder
    multiplexer = event_multiplexer.EventMultiplexer().AddRunsFromDirectory(str(logs))
    multiplexer.Reload()
    graphs = [name for name, tags in multiplexer.Runs().items() if tags["graph"]]
    assert len(graphs) == 2 * 5  # TensorBoard's own multi-run loader sees every stage of both


def test_a_process_killed_during_statistics_collection_leaves_its_finished_stages_loadable(tmp_path):
    """A PTQ process SIGKILLed while collecting statistics leaves the stages it finished
    (initial_graph, after_graph_preparation) complete in TensorBoard, and its python log."""
    logs = tmp_path / "logs"
    started = tmp_path / "statistics_started"
    proc = start_worker("hang", logs, started)
    try:
        _wait_for([started], [proc], timeout=120)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    (run,) = run_folders(logs)
    initial = load(run / stage_run("initial_graph"))
    prepared = load(run / stage_run("after_graph_preparation"))
    assert len(event_files(run / stage_run("initial_graph"))) == 1
    assert len(layer_names(initial)) == 13  # input + the CNN's 12 layers
    assert len(layer_names(prepared)) == 10  # the three batch norms folded away
    for acc in (initial, prepared):
        assert acc.Tags()["run_metadata"] == ["Resources"] and acc.Tags()["tensors"] == ["summary"]
    assert "stage after_graph_preparation done" in (run / "mct.log").read_text(encoding="utf-8")
    multiplexer = event_multiplexer.EventMultiplexer().AddRunsFromDirectory(str(logs))
    multiplexer.Reload()  # the whole folder, as `tensorboard --logdir` loads it: no crash
    assert sum(1 for tags in multiplexer.Runs().values() if tags["graph"]) >= 2
