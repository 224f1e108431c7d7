"""The log folder, call folders, python logging, and failures that must not break a call."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

import pytest

from model_compression_toolkit.errors import LogFolderError
from model_compression_toolkit.observers import event_file as ef
from model_compression_toolkit.observers import log_folder as mct_logger
from model_compression_toolkit.observers.call import observe_call
from model_compression_toolkit.observers.log_folder import get_log_folder, set_log_folder
from model_compression_toolkit.observers.stage_view import stage_run
from model_compression_toolkit.observers.tensorboard import TensorBoardObserver
from model_compression_toolkit.pipeline.events import STAGES
from tests.fixtures.observed import load, make_graph, make_reports


def tensorboard_of(call):
    """The call's TensorBoard observer (beside the console's progress display), or None."""
    return next((o for o in call.observer.observers if isinstance(o, TensorBoardObserver)), None)

LIB = logging.getLogger("model_compression_toolkit")


@pytest.fixture(autouse=True)
def logging_off_around_each_test():
    level = LIB.level
    set_log_folder(None)
    yield
    set_log_folder(None)
    LIB.setLevel(level)


def open_fds() -> set[str]:
    fds = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return fds


def all_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*")]


# ---------------------------------------------------------------- set_log_folder
def test_set_log_folder_creates_parents_and_sets_the_level(tmp_path):
    target = tmp_path / "a" / "b" / "logs"
    assert set_log_folder(target, level=logging.DEBUG) == target
    assert target.is_dir() and list(target.iterdir()) == []  # the probe file is gone
    assert get_log_folder() == target
    assert LIB.level == logging.DEBUG
    assert set_log_folder(None) is None and get_log_folder() is None


def test_a_file_is_not_a_log_folder(tmp_path):
    a_file = tmp_path / "f.txt"
    a_file.write_text("x")
    with pytest.raises(LogFolderError, match="is a file") as err:
        set_log_folder(a_file)
    assert str(a_file) in str(err.value)
    assert get_log_folder() is None


def test_a_folder_under_a_file_cannot_be_created(tmp_path):
    a_file = tmp_path / "f.txt"
    a_file.write_text("x")
    with pytest.raises(LogFolderError) as err:
        set_log_folder(a_file / "logs")
    assert str(a_file / "logs") in str(err.value) and "None" in str(err.value)
    assert get_log_folder() is None


def test_an_unwritable_folder_fails_at_once(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(mct_logger.tempfile, "mkstemp", refuse)
    with pytest.raises(LogFolderError, match="Permission denied"):
        set_log_folder(tmp_path / "logs")


# ---------------------------------------------------------------- observe_call
def test_no_log_folder_means_a_null_observer_and_nothing_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with observe_call("m", get_log_folder()) as call:
        assert call.folder is None and tensorboard_of(call) is None  # the console progress only
        reports, _ = make_reports(make_graph())
        for report in reports:
            call.observer.stage_finished(report)
    assert list(tmp_path.iterdir()) == []


def test_run_folder_layout_and_log_file(tmp_path):
    set_log_folder(tmp_path)
    with observe_call("my_model", get_log_folder()) as run:
        assert isinstance(tensorboard_of(run), TensorBoardObserver)
        LIB.info("hello from the library")
        reports, _ = make_reports(make_graph())
        for report in reports:
            run.observer.stage_finished(report)
    assert run.folder.parent == tmp_path
    assert run.folder.name.startswith("my_model_") and len(run.folder.name) == len("my_model_20250101-120000")
    log = (run.folder / "mct.log").read_text()
    assert "hello from the library" in log
    assert all(f"stage {s}" in log for s in STAGES)
    assert {p.name for p in run.folder.iterdir()} == {*map(stage_run, STAGES), "mct.log"}


def test_two_runs_in_the_same_second_get_two_folders(tmp_path, monkeypatch):
    set_log_folder(tmp_path)
    monkeypatch.setattr(mct_logger.time, "strftime", lambda fmt, *a: "20250101-120000")
    folders = []
    for _ in range(3):
        with observe_call("m", get_log_folder()) as run:
            folders.append(run.folder)
    assert [f.name for f in folders] == ["m_20250101-120000", "m_20250101-120000_1", "m_20250101-120000_2"]
    assert sorted(folders) == folders


def test_nothing_is_left_open_after_two_runs_even_on_error(tmp_path):
    set_log_folder(tmp_path)
    handlers = list(LIB.handlers)
    fds = open_fds()
    reports, _ = make_reports(make_graph())
    with observe_call("ok", get_log_folder()) as run:
        for report in reports:
            run.observer.stage_finished(report)
        tensorboard_of(run).writer("extra").add_scalar("x", 1.0)
    with pytest.raises(RuntimeError, match="boom"), observe_call("fails", get_log_folder()) as run:
        run.observer.stage_finished(reports[0])
        tensorboard_of(run).writer("extra").add_scalar("x", 1.0)
        raise RuntimeError("boom")
    assert LIB.handlers == handlers
    leaked = {fd for fd in open_fds() - fds if str(tmp_path) in fd}
    assert not leaked
    assert load(run.folder / "extra").Scalars("x")[0].value == 1.0  # closed, so complete


def test_hostile_names_write_nothing_outside_the_run_folder(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (tmp_path / "x").mkdir()  # a place "../x" could reach
    hostile = {
        "input": "../x",
        "conv": "a/b c",
        "split": "q'\"uote",
        "add": "ünï cødé ✓",
        "dense": "/abs/../../y",
    }
    g = make_graph(hostile)
    reports, _ = make_reports(g)
    set_log_folder(logs)
    with observe_call("../../evil model/ü", get_log_folder()) as run:
        for report in reports:
            run.observer.stage_finished(report)
        tensorboard_of(run).writer("../../escape").add_scalar("../x", 1.0)
        tensorboard_of(run).writer("sim/ ../ok").add_scalar("t", 1.0)
    (only,) = list(logs.iterdir())
    assert only == run.folder
    assert list((tmp_path / "x").iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs", "x"]
    for path in all_files(logs):
        assert path.resolve().is_relative_to(run.folder.resolve())
        assert path.relative_to(logs).parts[0] == run.folder.name
    acc = load(run.folder / stage_run("thresholds_selection"))
    assert set(acc.Tags()["histograms"]) == {hostile["conv"], hostile["add"]}  # tags keep the names
    assert {n.name for n in acc.Graph().node} >= {"a/b c", "ünï cødé ✓"}


def test_a_write_failure_warns_with_the_path_and_quantization_goes_on(tmp_path, monkeypatch):
    set_log_folder(tmp_path)
    reports, _ = make_reports(make_graph())
    with warnings.catch_warnings(record=True) as caught, observe_call("m", get_log_folder()) as run:
        warnings.simplefilter("always")
        run.observer.stage_finished(reports[0])
        monkeypatch.setattr(ef.RunWriter, "_write", _disk_full)
        for report in reports[1:]:
            run.observer.stage_finished(report)  # must not raise
        w = tensorboard_of(run).writer("similarity")
        w.add_scalar("x", 1.0)
        w.flush()
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1
    assert str(run.folder / stage_run(reports[1].name)) in messages[0] and "No space left" in messages[0]
    assert tensorboard_of(run).failed
    monkeypatch.undo()
    first = load(run.folder / stage_run(reports[0].name))  # written before the failure: still readable
    assert [n.name for n in first.Graph().node] == [n.name for n in reports[0].graph.nodes()]
    assert not (run.folder / "similarity").exists()
    assert LIB.handlers == [h for h in LIB.handlers if not isinstance(h, logging.FileHandler)]


def test_a_failing_write_reaches_on_error_without_a_traceback(tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(ef.RunWriter, "_write", _disk_full)
    seen = []
    w = ef.RunWriter(tmp_path / "r", on_error=lambda p, e: seen.append(e))
    w.add_scalar("x", 1.0)
    w.close()
    assert seen and isinstance(seen[0], OSError)
    assert "Traceback" not in capfd.readouterr().err


def _disk_full(self, data):
    raise OSError(28, "No space left on device")

