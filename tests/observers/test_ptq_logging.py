"""A PTQ call with a log folder: every stage is in TensorBoard, read back with its own loader."""

from __future__ import annotations

import logging
import os
import time

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.observers.stage_view import stage_run
from model_compression_toolkit.pipeline.events import STAGES
from tests.fixtures.digits import representative_dataset
from tests.fixtures.tb import layer_name, layer_names, load, resources, run_folders

N_BATCHES, BATCH = 5, 32


@pytest.fixture
def logged_run(fw, trained_digits, tmp_path):
    model, x_train, _, _ = trained_digits
    mct.set_log_folder(tmp_path / "logs")
    start = time.time()
    q_model, info = fw.ptq(model, representative_dataset(x_train, N_BATCHES, BATCH))
    return info, start, tmp_path / "logs"


def test_every_stage_is_a_run_with_a_graph_and_real_wall_times(logged_run):
    info, start, logs = logged_run
    (run,) = run_folders(logs)
    assert info.log_folder == run
    for stage in STAGES:
        acc = load(run / stage_run(stage))
        assert acc.Tags()["graph"], stage
        graph = acc.Graph()
        assert len(graph.node) > 5
        for event_list in (acc.Histograms(t) for t in acc.Tags()["histograms"]):
            assert all(start - 1 <= e.wall_time <= time.time() + 1 for e in event_list)
    assert (run / "mct.log").read_text().count("stage") >= len(STAGES)


def test_graph_nodes_are_the_models_layers(fw, logged_run, trained_digits):
    info, _, logs = logged_run
    (run,) = run_folders(logs)
    names = layer_names(load(run / stage_run("initial_graph")))
    model = trained_digits[0]
    if fw.name == "pytorch":
        expected = {name for name, m in model.named_modules() if not list(m.children())}
    else:
        expected = {layer.name for layer in model.layers}
    assert expected <= names
    prepared = layer_names(load(run / stage_run("after_graph_preparation")))
    assert len(prepared) == len(names) - 3  # the three batch norms are folded away
    assert set(info.layers) == prepared


def test_resources_memory_is_positive_and_drops_when_quantized(logged_run):
    _, _, logs = logged_run
    (run,) = run_folders(logs)
    before = resources(load(run / stage_run("initial_graph")))
    after = resources(load(run / stage_run("quantized_graph")))
    assert before and all(v > 0 for v in before.values())
    assert all(v > 0 for v in after.values())
    assert sum(after.values()) < 0.4 * sum(resources(load(run / stage_run("after_graph_preparation"))).values())


def test_histogram_counts_equal_the_values_collected(logged_run):
    _, _, logs = logged_run
    (run,) = run_folders(logs)
    acc = load(run / stage_run("thresholds_selection"))
    shapes = {
        layer_name(n.name): [d.size for d in n.attr["_output_shapes"].list.shape[0].dim]
        for n in acc.Graph().node
        if n.op != "legend"
    }
    tags = acc.Tags()["histograms"]
    assert tags
    for tag in tags:
        events = acc.Histograms(tag)
        assert [e.step for e in events] == [0, 1]  # float, then through the layer's grid
        per_sample = int(np.prod(shapes[tag][1:]))
        for event in events:
            h = event.histogram_value
            assert h.num == N_BATCHES * BATCH * per_sample, tag
            assert sum(h.bucket) == h.num
            assert h.bucket_limit[-1] >= h.max  # right edges: the last limit covers the maximum


def test_per_channel_scalars_use_channel_index_as_step(logged_run):
    _, _, logs = logged_run
    (run,) = run_folders(logs)
    for kind in ("min", "max", "mean"):
        acc = load(run / stage_run("after_statistics_collection") / f"{kind}_per_channel")
        tags = acc.Tags()["scalars"]
        assert tags
        widest = max(len(acc.Scalars(t)) for t in tags)
        assert widest == 64  # the last conv has 64 channels
        steps = [e.step for e in acc.Scalars(tags[0])]
        assert steps == list(range(len(steps)))


def test_two_calls_give_two_complete_runs_and_leave_nothing_open(fw, trained_digits, tmp_path):
    model, x_train, _, _ = trained_digits
    mct.set_log_folder(tmp_path)
    fds_before = len(os.listdir("/proc/self/fd"))
    for _ in range(2):
        fw.ptq(model, representative_dataset(x_train, 2, 16))
    runs = run_folders(tmp_path)
    assert len(runs) == 2
    for run in runs:
        for stage in STAGES:
            assert load(run / stage_run(stage)).Tags()["graph"]
    assert len(os.listdir("/proc/self/fd")) <= fds_before
    assert not logging.getLogger("model_compression_toolkit").handlers or all(
        not isinstance(h, logging.FileHandler) for h in logging.getLogger("model_compression_toolkit").handlers
    )


def test_no_log_folder_writes_nothing(fw, trained_digits, tmp_path, monkeypatch):
    model, x_train, _, _ = trained_digits
    monkeypatch.chdir(tmp_path)
    _, info = fw.ptq(model, representative_dataset(x_train, 2, 16))
    assert info.log_folder is None
    assert list(tmp_path.iterdir()) == []
