"""Issue 23, point 8: what a PTQ call prints on the console.

Warnings pointed into the library (``runner.py:342``) instead of the user's call; each
unsupported-op warning printed twice (warnings and logging); the progress bar had no total,
covered only the statistics and vanished. Now, run as a user runs a script
(`tests/e2e/user_script.py`, in its own process, its stderr read back): the warning names
the user's line, once; each call has one progress display that names its steps with their
totals and ends with the line that opens the call in TensorBoard.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).with_name("user_script.py")
REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def console(tmp_path_factory) -> tuple[str, str]:
    """(stdout, stderr) of the user's script: a plain call, then a tuned one."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "default"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path_factory.mktemp("console_logs"))],
        capture_output=True, env=env, cwd=tmp_path_factory.mktemp("cwd"), timeout=TIMEOUT_S,
    )  # fmt: skip
    stdout, stderr = done.stdout.decode(), done.stderr.decode()  # bytes: a \r stays a \r
    assert done.returncode == 0, stderr[-3000:]
    return stdout, stderr


def line_of(text: str) -> int:
    """The line of the user's script holding ``text``."""
    (number,) = [i for i, line in enumerate(SCRIPT.read_text().splitlines(), start=1) if text in line]
    return number


def test_an_unsupported_op_warns_once_at_the_users_line(console):
    _, stderr = console
    call = line_of("pytorch_post_training_quantization(Odd()")
    assert stderr.count("is not supported") == 1, stderr  # not again through logging
    assert f"{SCRIPT}:{call}: UserWarning: 'shuffle' (PixelShuffle) is not supported" in stderr, stderr
    assert "model_compression_toolkit/" not in stderr, stderr  # no warning points into the library


def displays(stderr: str, model: str) -> list[str]:
    """The console lines about the calls of ``model`` (a progress display redraws its line with \\r)."""
    return [line for line in stderr.split("\n") if f"{model}: " in line]


def test_each_call_has_one_progress_display_naming_its_steps_and_totals(console):
    _, stderr = console
    progress, done = displays(stderr, "Odd")
    assert re.match(r"Odd: done in [\d.]+ s", done), done
    assert re.search(r"Odd: statistics: \d+ batches", progress), progress
    assert re.search(r"Odd: thresholds: .*\d+/3 ", progress), progress  # conv, ReLU, the input
    assert re.search(r"Odd: similarity: .*\d+/20 ", progress), progress
    tuned, done = displays(stderr, "Sequential")
    assert re.match(r"Sequential: done in [\d.]+ s", done), done
    for step in ("statistics", "thresholds", "similarity", "output impact"):
        assert f"Sequential: {step}: " in tuned, step
    assert re.search(r"Sequential: tuning: .*\d/3 ", tuned), tuned  # TuningConfig.max_trials


def test_each_call_ends_with_the_line_that_opens_it_in_tensorboard(console):
    stdout, stderr = console
    folders = re.findall(r"FOLDER (.+)", stdout)
    closing = re.findall(
        r": done in [\d.]+ s; to see this call: tensorboard --logdir (.+) and open (\S+)", stderr
    )
    assert [c[0] for c in closing] == folders and len(folders) == 2, (closing, folders)
    # the URL opens the call's page in the Quantization dashboard (tests/e2e/test_plugin_e2e.py)
    assert [c[1] for c in closing] == [
        f"http://localhost:6006/#quantization&run={Path(f).name}" for f in folders
    ]
    assert all(Path(f).is_dir() for f in folders)


def test_the_tuning_table_gives_the_sizes_the_log_gives(console):
    """Issue 23, point 7, for a tuned call: the float weights in the tuning table's first row
    and the returned trial's are the sizes ``mct.log`` reports (one definition of each)."""
    from model_compression_toolkit.observers.stage_view import stage_run
    from tests.fixtures.tb import load

    stdout, _ = console
    tuned = Path(re.findall(r"FOLDER (.+)", stdout)[-1])
    log = re.search(r"weights ([\d.]+ \w+) -> ([\d.]+ \w+)", (tuned / "mct.log").read_text())
    (event,) = load(tuned / stage_run("quantized_graph")).Tensors("tuning/trials")
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in event.tensor_proto.string_val[0].decode().splitlines() if line.startswith("|")]  # fmt: skip
    header, body = rows[0], rows[2:]
    weights = header.index("weights memory")
    (returned,) = [r for r in body if "(returned)" in r[0]]
    assert body[0][0] == "0 (float)" and body[0][weights] == log[1], (body[0], log[0])
    assert returned[weights] == log[2], (returned, log[0])
