"""The log folder going wrong: deleted or re-pointed mid-run, unusable paths given to
set_log_folder, and a run that fails after files were written."""

from __future__ import annotations

import logging
import os
import shutil
import warnings

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.errors import LogFolderError, RepresentativeDataError
from model_compression_toolkit.observers.stage_view import stage_run
from tests.fixtures.tb import load, run_folders
from tests.robustness.helpers import small_mlp, tree

X = np.random.default_rng(0).standard_normal((32, 6)).astype(np.float32)
LIB = logging.getLogger("model_compression_toolkit")
WRITTEN_BEFORE = tuple(map(stage_run, ("initial_graph", "after_graph_preparation")))  # the runs written before statistics


def _ptq_with(fw, while_reading, config=None):
    """A PTQ call whose statistics pass calls ``while_reading()`` between its two batches."""

    def gen():
        yield [X[:16]]
        while_reading()
        yield [X[16:]]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        q_model, info = fw.ptq(small_mlp(fw), gen, config)
    return q_model, info, [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("deleted", ["call folder", "log folder"])
def test_a_folder_deleted_mid_run_is_one_warning_saying_what_was_lost_and_is_not_recreated(
    fw, tmp_path, deleted
):
    """The call folder (or the whole log folder) removed while statistics are collected: one
    warning names the folder and what was lost with it (the stages written so far and
    mct.log), nothing is recreated behind the user's back, and the model comes back."""
    root = tmp_path / "logs"
    mct.set_log_folder(root)

    def delete():
        (call,) = run_folders(root)
        shutil.rmtree(call if deleted == "call folder" else root)

    q_model, info, shown = _ptq_with(fw, delete)
    assert q_model is not None
    lost = [m for m in shown if "deleted" in m]
    assert len(lost) == 1, shown
    for name in (*WRITTEN_BEFORE, "mct.log"):
        assert name in lost[0], lost[0]
    assert str(info.log_folder) in lost[0] and lost[0] in info.warnings
    assert not info.log_folder.exists()
    assert deleted == "call folder" or not root.exists()


def test_a_log_folder_symlink_re_pointed_mid_run_does_not_split_the_run(fw, tmp_path):
    """The log folder is a symlink re-pointed elsewhere mid-run: the run is not split between
    two folders; one warning says the call folder moved away, and its stages stay where
    they were written."""
    first, second, link = tmp_path / "first", tmp_path / "second", tmp_path / "logs"
    first.mkdir()
    second.mkdir()
    link.symlink_to(first)
    mct.set_log_folder(link)

    def re_point():
        (tmp_path / "new_link").symlink_to(second)
        os.replace(tmp_path / "new_link", link)

    _, _, shown = _ptq_with(fw, re_point)
    assert len([m for m in shown if "deleted or moved" in m]) == 1, shown
    assert list(second.iterdir()) == []
    (call,) = run_folders(first)
    assert {p.name for p in call.iterdir()} >= {*WRITTEN_BEFORE, "mct.log"}


BAD_FOLDERS = {
    "empty string": ("", "empty"),
    "bytes": (b"/tmp/logs", "bytes"),
    "int": (5, "int"),
    "NUL": ("logs\0x", "NUL"),
    "over-long name": ("new/" + "x" * 300, "too long"),
    "dangling symlink": ("dangling", "does not exist"),
    "symlink loop": ("loop", "loop"),
    "inside a symlink loop": ("loop/sub", "loop"),
}


@pytest.mark.parametrize("case", list(BAD_FOLDERS))
def test_an_unusable_log_folder_is_a_log_folder_error_that_changes_nothing(tmp_path, monkeypatch, case):
    """Each unusable folder gives a LogFolderError saying what was wrong; the folder set
    before, the logger's level and the file system are exactly as they were (an empty
    string used to log into the current directory; the others raised raw TypeError,
    ValueError or OSError, and every refused call changed the level)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop")
    previous = mct.set_log_folder(tmp_path / "previous", level=logging.WARNING)
    before = tree(tmp_path)
    value, said = BAD_FOLDERS[case]
    with pytest.raises(LogFolderError) as err:
        mct.set_log_folder(value, level=logging.DEBUG)
    assert said in str(err.value), str(err.value)
    assert "None to turn logging off" in str(err.value)
    assert mct.get_log_folder() == previous
    assert LIB.level == logging.WARNING
    assert tree(tmp_path) == before


def test_a_failed_run_records_its_exception_in_mct_log_and_the_last_stage_summary(fw, tmp_path):
    """A call that fails after two stages were written: mct.log ends with the exception and
    "this run is incomplete", and the Text summary of the last stage written says the same
    (a partial run used to be told only by a missing last line)."""
    mct.set_log_folder(tmp_path)
    with pytest.raises(RepresentativeDataError):
        fw.ptq(small_mlp(fw), lambda: [[X[:16]], "not a batch"])
    (call,) = run_folders(tmp_path)
    log = (call / "mct.log").read_text()
    assert "RepresentativeDataError" in log and "this run is incomplete" in log
    summaries = load(call / WRITTEN_BEFORE[-1]).Tensors("summary")
    last = summaries[-1].tensor_proto.string_val[0].decode("utf-8")
    assert len(summaries) == 2 and "this run is incomplete" in last and "RepresentativeDataError" in last
    assert (
        "incomplete"
        not in load(call / WRITTEN_BEFORE[0]).Tensors("summary")[-1].tensor_proto.string_val[0].decode()
    )
