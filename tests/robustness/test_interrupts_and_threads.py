"""Ctrl-C at any point, two threads logging at once, and a data generator that never ends."""

from __future__ import annotations

import itertools
import logging
import os
import threading

import numpy as np
import pytest
from tensorboard.compat.proto import event_pb2

import model_compression_toolkit as mct
from model_compression_toolkit.core.calibration.statistics import StatisticsCollector
from model_compression_toolkit.observers import event_file
from tests.fixtures.tb import run_folders
from tests.robustness.helpers import small_mlp

X = np.random.default_rng(0).standard_normal((32, 6)).astype(np.float32)
LIB = logging.getLogger("model_compression_toolkit")


def _open_files_under(folder) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(folder)):
            found.append(target)
    return found


def _progress_bars() -> int:
    from tqdm.auto import tqdm

    return len(getattr(tqdm, "_instances", ()))


WHERE = ["opening the first run", "opening a later run", "reading a batch", "collecting statistics"]


@pytest.mark.parametrize("where", WHERE)
def test_ctrl_c_anywhere_leaves_no_open_file_handler_thread_or_running_generator(
    fw, tmp_path, monkeypatch, where
):
    """A KeyboardInterrupt while a run's event file is being opened (its first record), while
    a batch is read, or while one is reduced to statistics (the user's generator suspended
    mid-iteration): the interrupt reaches the caller, and even with its traceback
    kept alive (as a notebook keeps the last one), no file of the log folder is open, the
    mct.log handler is gone, no thread or progress bar is left and the user's generator was
    closed (its ``finally`` ran). mct.log says the run was interrupted."""
    model = small_mlp(fw)
    mct.set_log_folder(tmp_path)
    fw.ptq(model, lambda: [[X[:16]], [X[16:]]])  # warm-up: the frameworks' own threads start
    threads, handlers, bars = set(threading.enumerate()), list(LIB.handlers), _progress_bars()
    closed = threading.Event()

    def gen():
        try:
            for i in range(4):
                if where == "reading a batch" and i == 2:
                    raise KeyboardInterrupt
                yield [X[8 * i : 8 * (i + 1)]]
        finally:
            closed.set()

    if where == "collecting statistics":
        real_update, updates = StatisticsCollector.update, itertools.count(1)

        def update_or_interrupt(self, x):
            if next(updates) == 4:  # the first update of the second batch (3 activations a batch)
                raise KeyboardInterrupt
            return real_update(self, x)

        monkeypatch.setattr(StatisticsCollector, "update", update_or_interrupt)
    elif where != "reading a batch":
        real, opened = event_file.frame_record, itertools.count(1)
        stop_at = 1 if where == "opening the first run" else 2  # the 1st or the 2nd event file opened

        def frame_or_interrupt(data: bytes) -> bytes:
            if event_pb2.Event.FromString(data).file_version and next(opened) == stop_at:
                raise KeyboardInterrupt  # the file is open, its first record not yet written
            return real(data)

        monkeypatch.setattr(event_file, "frame_record", frame_or_interrupt)
    with pytest.raises(KeyboardInterrupt) as interrupted:
        fw.ptq(model, gen)
    monkeypatch.undo()
    assert interrupted.value.__traceback__ is not None  # the frames are still alive
    assert _open_files_under(tmp_path) == []
    assert LIB.handlers == handlers
    assert set(threading.enumerate()) <= threads
    assert _progress_bars() == bars
    assert closed.is_set()
    (call,) = [run for run in run_folders(tmp_path) if "KeyboardInterrupt" in (run / "mct.log").read_text()]
    assert "incomplete" in (call / "mct.log").read_text()


def test_two_threads_log_into_their_own_folders_and_their_own_mct_log(fw, tmp_path):
    """Thread A sets its log folder, thread B sets another, then A quantizes and, while A is
    in the middle of its statistics, B runs a whole call. Each call folder is in its own
    thread's log folder, and each mct.log holds only its own call's lines (B's similarity
    summary in B's, none of it in A's); the log folder used to be the last one set in the
    process, and every mct.log received every thread's lines."""
    roots = {"A": tmp_path / "a", "B": tmp_path / "b"}
    a_set, b_set, a_in_call, b_done = (threading.Event() for _ in range(4))
    results, errors = {}, []

    def thread_a():
        try:
            mct.set_log_folder(roots["A"])
            a_set.set()
            assert b_set.wait(60)

            def gen():
                yield [X[:16]]
                a_in_call.set()  # A's mct.log handler is attached: B runs its whole call now
                assert b_done.wait(120)
                yield [X[16:]]

            results["A"] = fw.ptq(small_mlp(fw, "ModelA"), gen, no_similarity_config())
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)
        finally:
            a_set.set()
            a_in_call.set()

    def thread_b():
        try:
            assert a_set.wait(60)
            mct.set_log_folder(roots["B"])
            b_set.set()
            assert a_in_call.wait(60)
            config = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=True))
            results["B"] = fw.ptq(small_mlp(fw, "ModelB"), lambda: [[X]], config)
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)
        finally:
            b_set.set()
            b_done.set()

    workers = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(300)
    assert not errors and not any(w.is_alive() for w in workers), errors
    for name, root in roots.items():
        (call,) = run_folders(root)
        assert results[name][1].log_folder == call
        assert call.name.startswith(f"Model{name}_")
        log = (call / "mct.log").read_text()
        other = "B" if name == "A" else "A"
        assert f"Model{name}" in log and f"Model{other}" not in log, (name, log)
    assert "similarity on" in (run_folders(roots["B"])[0] / "mct.log").read_text()
    assert "similarity on" not in (run_folders(roots["A"])[0] / "mct.log").read_text()


def no_similarity_config() -> mct.core.CoreConfig:
    return mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))


def test_log_folder_as_a_context_manager_sets_it_for_the_block_only(tmp_path):
    """``with mct.log_folder(path):`` logs the calls of the block under ``path`` and restores
    the folder set before (None included) when the block ends, even by an exception."""
    mct.set_log_folder(tmp_path / "outer")
    with mct.log_folder(tmp_path / "inner") as folder:
        assert folder == tmp_path / "inner" and mct.get_log_folder() == folder
        with mct.log_folder(None):
            assert mct.get_log_folder() is None
        assert mct.get_log_folder() == folder
    assert mct.get_log_folder() == tmp_path / "outer"
    with pytest.raises(ZeroDivisionError), mct.log_folder(tmp_path / "inner"):
        raise ZeroDivisionError
    assert mct.get_log_folder() == tmp_path / "outer"


# ---------------------------------------------------------------- a generator that never ends
def test_an_infinite_generator_reads_the_documented_number_of_batches(fw):
    """A representative_data_gen that never ends is read for QuantizationConfig's
    calibration_batches batches (500 by default), then the call returns (it used to run
    forever)."""
    default = mct.core.QuantizationConfig().calibration_batches
    assert default == 500
    reads = itertools.count()

    def forever():
        while True:
            next(reads)
            yield [X[:2]]

    q_model, _ = fw.ptq(small_mlp(fw), forever)
    assert q_model is not None and next(reads) == default


def test_the_batch_limit_is_a_config_field_and_the_progress_says_it(fw, capsys, caplog):
    """``calibration_batches=3`` reads 3 batches; the progress display says how many batches
    will be read, and the log says the reading stopped at the limit."""
    reads = itertools.count()

    def forever():
        while True:
            next(reads)
            yield [X[:2]]

    config = mct.core.CoreConfig(quantization_config=mct.core.QuantizationConfig(calibration_batches=3))
    with caplog.at_level(logging.INFO, logger="model_compression_toolkit"):
        fw.ptq(small_mlp(fw), forever, config)
    assert next(reads) == 3
    assert "3 batches" in capsys.readouterr().err
    assert any("calibration_batches=3" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "10"])
def test_a_bad_batch_limit_is_a_configuration_error(bad):
    with pytest.raises(mct.errors.ConfigurationError, match="calibration_batches"):
        mct.core.QuantizationConfig(calibration_batches=bad).validate()
