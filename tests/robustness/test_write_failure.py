"""A disk that fills up during PTQ: the quantized model still comes back, one warning names
the path that failed, and what was written before stays readable."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.observers import event_file
from model_compression_toolkit.observers.stage_view import stage_run
from tests.fixtures.tb import load, run_folders
from tests.robustness.helpers import no_similarity

FAILING_STAGE = stage_run("after_statistics_collection")


class _FullDisk:
    """A real file whose writes fail as on a full disk (ENOSPC); everything else is real."""

    def __init__(self, real):
        self._real = real

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self._real, name)


def _open_filling_up(path, mode="r", *args, **kwargs):
    """``open`` as the event writer sees it: files of the failing stage onward hit a full disk."""
    real = open(path, mode, *args, **kwargs)
    late = {FAILING_STAGE, stage_run("thresholds_selection"), stage_run("quantized_graph")}
    if "w" in mode and late & set(Path(path).parts):
        return _FullDisk(real)
    return real


def _ptq_catching_warnings(fw, model, data_gen, config=None):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        q_model, info = fw.ptq(model, data_gen, config)
    stopped = [str(w.message) for w in caught if "TensorBoard logging stopped" in str(w.message)]
    return q_model, info, stopped


def _data(fw):
    shape = (8, 32, 32, 1) if fw.channels_last else (8, 1, 32, 32)
    x = np.random.default_rng(0).random((3, *shape), dtype=np.float32)
    return x, (lambda: [[b] for b in x])


def _model(fw):
    model = fw.make_digits_cnn()
    return model.eval() if fw.name == "pytorch" else model


def test_an_injected_enospc_keeps_ptq_going_warns_once_and_keeps_earlier_stages(fw, tmp_path, monkeypatch):
    """Event-file writes failing with ENOSPC from the statistics stage on: PTQ returns a
    working quantized model, exactly one RuntimeWarning names the failing run path and the
    OS error, the stages written before load in TensorBoard, the partly written stage does
    not break the loader, and the next PTQ call logs completely again."""
    model = _model(fw)
    x, data_gen = _data(fw)
    logs = tmp_path / "logs"
    mct.set_log_folder(logs)
    monkeypatch.setattr(event_file, "open", _open_filling_up, raising=False)
    q_model, info, stopped = _ptq_catching_warnings(fw, model, data_gen)

    out = fw.predict(q_model)(x[0])
    assert out.shape == (8, 10) and np.isfinite(out).all()
    (run,) = run_folders(logs)
    assert info.log_folder == run
    assert len(stopped) == 1, stopped
    assert str(run / FAILING_STAGE) in stopped[0] and "No space left on device" in stopped[0]
    for stage in ("initial_graph", "after_graph_preparation"):
        acc = load(run / stage_run(stage))
        assert len(acc.Graph().node) > 5 and acc.Tags()["run_metadata"] == ["Resources"], stage
    load(run / FAILING_STAGE)  # what little was written does not break TensorBoard's loader
    assert not (run / stage_run("quantized_graph")).exists()  # logging stopped for this run
    assert "stage quantized_graph done" in (run / "mct.log").read_text(encoding="utf-8")

    monkeypatch.undo()
    _, info2, stopped2 = _ptq_catching_warnings(fw, model, data_gen, no_similarity())
    assert not stopped2
    assert load(info2.log_folder / stage_run("quantized_graph")).Tags()["graph"]  # the failure was for that run only


def _mount_tiny_tmpfs(where: Path, size: str) -> None:
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small filesystem needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs: room for the first two stages of the digits CNN, not for the rest."""
    disk = tmp_path / "disk"
    _mount_tiny_tmpfs(disk, "64k")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def _check_full_disk_run(fw, disk, config):
    model = _model(fw)
    x, data_gen = _data(fw)
    mct.set_log_folder(disk / "logs")
    q_model, info, stopped = _ptq_catching_warnings(fw, model, data_gen, config)
    out = fw.predict(q_model)(x[0])
    assert out.shape == (8, 10) and np.isfinite(out).all()
    (run,) = run_folders(disk / "logs")
    assert len(stopped) == 1 and str(run) in stopped[0] and "No space left on device" in stopped[0], stopped
    for stage in ("initial_graph", "after_graph_preparation"):
        assert len(load(run / stage_run(stage)).Graph().node) > 5, stage
    for folder in run.rglob("*"):
        if folder.is_dir():
            load(folder)  # every partly written run still loads


def test_a_really_full_filesystem_keeps_ptq_going(fw, tiny_disk):
    """On a real 64 KiB filesystem that fills up mid-run (similarity analysis off): PTQ
    returns a working quantized model, one warning names the failing path, and the stages
    written before the disk filled load in TensorBoard."""
    _check_full_disk_run(fw, tiny_disk, no_similarity())


def test_a_really_full_filesystem_keeps_ptq_going_with_the_similarity_report(fw, tiny_disk):
    """As above with the default configuration, which also writes the similarity report
    files (similarity_report.json/.csv) into the call folder."""
    _check_full_disk_run(fw, tiny_disk, None)
