"""Shared by the robustness tests: small models, configs, tree snapshots, subprocess runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import model_compression_toolkit as mct
from model_compression_toolkit.observers.stage_view import stage_run
from model_compression_toolkit.pipeline.events import STAGES
from tests.fixtures.tb import load

REPO = Path(__file__).resolve().parents[2]
WORKER = "tests.robustness.worker"


def no_similarity() -> mct.core.CoreConfig:
    """The cheapest full pipeline: every stage logged, no float-vs-quantized analysis."""
    return mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))


def tree(root: Path) -> set[Path]:
    """Every path under ``root`` (files and folders)."""
    return set(Path(root).rglob("*"))


def event_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.startswith("events.out.tfevents."))


def assert_complete_run(run: Path) -> None:
    """Every stage of ``run`` loads with TensorBoard's loader: one event file, a graph, its data."""
    for stage in STAGES:
        folder = run / stage_run(stage)
        assert len(event_files(folder)) == 1, (run, stage)
        acc = load(folder)
        assert acc.Tags()["graph"] and len(acc.Graph().node) > 5, (run, stage)
        if stage == "after_statistics_collection":
            for field in ("min_per_channel", "max_per_channel", "mean_per_channel"):
                assert load(folder / field).Tags()["scalars"], (run, stage, field)
        if stage == "thresholds_selection":
            assert acc.Tags()["histograms"] and acc.Tags()["images"], (run, stage)
        if stage == "quantized_graph":
            assert any(t.endswith("/weights") for t in acc.Tags()["histograms"]), run


def worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["TQDM_DISABLE"] = "1"
    return env


def start_worker(*args: Any) -> subprocess.Popen:
    """``python -m tests.robustness.worker <args>`` from the repository root."""
    return subprocess.Popen(
        [sys.executable, "-m", WORKER, *map(str, args)],
        cwd=REPO,
        env=worker_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def worker_result(proc: subprocess.Popen, timeout: float) -> dict:
    """Wait for a worker and parse the JSON line it printed last; fail with its stderr."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"worker timed out after {timeout} s:\n{err[-3000:]}") from None
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{err[-3000:]}"
    return json.loads(out.strip().splitlines()[-1])


def small_mlp(fw: Any, name: str = "mlp", bias1: float = 0.0) -> Any:
    """``fc1 -> relu -> fc2`` (6 -> 8 -> 3) named ``name`` (the PyTorch class or the Keras
    model), with weights drawn from a fixed seed; ``bias1`` shifts fc1's outputs."""
    import numpy as np

    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((6, 8)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)
    b1, b2 = np.full(8, bias1, np.float32), np.full(3, 0.5, np.float32)
    if fw.name == "pytorch":
        from collections import OrderedDict

        import torch
        from torch import nn

        cls = type(name, (nn.Sequential,), {})
        model = cls(OrderedDict(fc1=nn.Linear(6, 8), relu=nn.ReLU(), fc2=nn.Linear(8, 3))).eval()
        with torch.no_grad():
            for layer, w, b in ((model.fc1, w1, b1), (model.fc2, w2, b2)):
                layer.weight.copy_(torch.from_numpy(w.T.copy()))
                layer.bias.copy_(torch.from_numpy(b))
        return model
    import keras

    inputs = keras.Input((6,), name="x")
    h = keras.layers.ReLU(name="relu")(keras.layers.Dense(8, name="fc1")(inputs))
    model = keras.Model(inputs, keras.layers.Dense(3, name="fc2")(h), name=name)
    model.get_layer("fc1").set_weights([w1, b1])
    model.get_layer("fc2").set_weights([w2, b2])
    return model
