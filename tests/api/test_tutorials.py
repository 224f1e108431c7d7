"""Every tutorial runs end to end in smoke mode and prints what it promises.

The tutorials are started together, each as ``python tutorials/<x>.py --smoke --log-folder
<tmp>`` in its own process (one thread each, so they share the cores instead of fighting
over them); each test then waits for its own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from model_compression_toolkit.observers.stage_view import stage_run

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 240
TUTORIALS = {
    "pytorch_ptq_tensorboard": ["tutorials/pytorch_ptq_tensorboard.py"],
    "keras_ptq_tensorboard": ["tutorials/keras_ptq_tensorboard.py"],
    # PyTorch, its default: the Keras path differs only in the model it builds, and costs
    # another TensorFlow start-up and training.
    "debug_accuracy_drop": ["tutorials/debug_accuracy_drop.py"],
}


class Started:
    """A tutorial process and its log folder; `result` waits for it once."""

    def __init__(self, args: list[str], log_folder: Path) -> None:
        self.log_folder = log_folder
        env = dict(os.environ, OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2", MPLBACKEND="Agg")
        self.proc = subprocess.Popen(
            [sys.executable, *args, "--smoke", "--log-folder", str(log_folder)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._result: tuple[int, str, str] | None = None

    def result(self) -> tuple[int, str, str]:
        if self._result is None:
            try:
                out, err = self.proc.communicate(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                out, err = self.proc.communicate()
                pytest.fail(f"timed out after {TIMEOUT_S} s:\n{out}\n{err[-3000:]}")
            self._result = (self.proc.returncode, out, err)
        return self._result


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    root = tmp_path_factory.mktemp("tutorials")
    procs = {name: Started(args, root / name) for name, args in TUTORIALS.items()}
    yield procs
    for p in procs.values():
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.communicate()


def finished(started, name: str) -> str:
    code, out, err = started[name].result()
    assert code == 0, f"{name} exited with {code}\n--- stdout\n{out}\n--- stderr\n{err[-3000:]}"
    return out


def percent(out: str, label: str) -> float:
    match = re.search(rf"^{label}:\s+(\d+\.\d+) %$", out, re.MULTILINE)
    assert match, f"no line '{label}: <x> %' in:\n{out}"
    return float(match[1])


@pytest.mark.parametrize("name", ["pytorch_ptq_tensorboard", "keras_ptq_tensorboard"])
def test_ptq_tensorboard_tutorial_tours_every_dashboard(started, name):
    out = finished(started, name)
    log_folder = started[name].log_folder
    assert 0 <= percent(out, "float accuracy") <= 100
    assert 0 <= percent(out, "quantized accuracy") <= 100
    for dashboard in ("GRAPHS", "HISTOGRAMS / DISTRIBUTIONS", "SCALARS", "IMAGES", "TEXT"):
        assert f"\n{dashboard}" in out, dashboard
    for stage in ("initial_graph", "after_graph_preparation", "quantized_graph"):
        assert f"/{stage_run(stage)} " in out, stage
    assert "Resources" in out and "Cosine similarity/0_summary" in out
    assert f"tensorboard --logdir {log_folder.resolve()}" in out
    (run,) = [p for p in log_folder.iterdir() if p.is_dir()]
    assert (run / stage_run("quantized_graph")).is_dir() and (run / "similarity_report.json").is_file()


def test_debug_tutorial_finds_the_cause_and_its_fix_recovers(started):
    out = finished(started, "debug_accuracy_drop")
    float_acc = percent(out, "float accuracy")
    damaged = percent(out, "quantized accuracy")
    recovered = percent(out, "recovered accuracy")
    assert damaged < float_acc and recovered > damaged, out
    assert re.search(r"^first cause: .+ \(activation\), output SQNR alone -?\d+\.\d dB$", out, re.MULTILINE), out
    assert re.search(r"^the planted outlier was in '.+': found$", out, re.MULTILINE), out
    # the fix is integer: the outlier channel's scale moved into the next conv (channels
    # equalized), pasteable as printed; the planted layer stays an 8-bit integer output
    assert "core_config = mct.core.CoreConfig(" in out and "activation_channel_equalization=True" in out
    assert "8-bit output (integer, not float)" in out
    assert "they only inherit it" in out
    assert percent(out, "tuned accuracy") > damaged
    assert re.search(r"tune_1_acc_\d+\.\d{4}, tune_2_acc_\d+\.\d{4}", out), out
    assert re.search(r"logs of this call: .+_with-fix_\d{8}-\d{6}$", out, re.MULTILINE), out  # the named call
    assert "tensorboard --logdir_spec damaged:" in out
    assert "tensorboard --logdir" in out
