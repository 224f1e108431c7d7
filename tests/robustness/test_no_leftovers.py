"""After a PTQ call with logging on (successful or failed) nothing is left behind: no
thread, no logging handler, no open file, no hook on the user's model, no warnings filter."""

from __future__ import annotations

import logging
import os
import threading
import warnings

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.errors import RepresentativeDataError
from tests.fixtures.tb import run_folders


def _open_files() -> dict[str, str]:
    """fd -> what it points to, for this process."""
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            out[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the fd listdir itself used, closed by now
            pass
    return out


def _hooks(fw, model) -> list:
    if fw.name != "pytorch":
        return []
    names = (
        "_forward_hooks",
        "_forward_pre_hooks",
        "_backward_hooks",
        "_backward_pre_hooks",
        "_state_dict_hooks",
    )
    return [(k, h, len(getattr(m, h))) for k, m in model.named_modules() for h in names]


def _state(fw, model) -> dict:
    lib = logging.getLogger("model_compression_toolkit")
    return {
        "threads": {(t.name, t.ident) for t in threading.enumerate()},
        "library handlers": list(lib.handlers),
        "root handlers": list(logging.getLogger().handlers),
        "files": _open_files(),
        "hooks": _hooks(fw, model),
        "warnings filters": list(warnings.filters),
    }


def _diff(before: dict, after: dict) -> dict:
    out = {}
    for key in before:
        if key == "files":
            leaked = {fd: p for fd, p in after[key].items() if before[key].get(fd) != p}
            if leaked:
                out[key] = leaked
        elif before[key] != after[key]:
            out[key] = (before[key], after[key])
    return out


@pytest.mark.parametrize("outcome", ["success", "failure"])
def test_a_logged_ptq_call_leaves_no_thread_handler_open_file_or_hook(fw, tmp_path, outcome):
    """Compared before and after a PTQ call with logging on (default configuration, so the
    similarity view is written too) - after one warm-up call, so that the frameworks' own
    lazily started threads exist already - the threads, the library's and the root logger's
    handlers, the open file descriptors, the model's hooks and the warnings filters are
    the same, whether the call succeeds or fails halfway with a bad batch."""
    model = fw.make_digits_cnn()
    if fw.name == "pytorch":
        model.eval()
    shape = (8, 32, 32, 1) if fw.channels_last else (8, 1, 32, 32)
    x = np.random.default_rng(0).random((2, *shape), dtype=np.float32)
    mct.set_log_folder(tmp_path)
    fw.ptq(model, lambda: [[b] for b in x])  # warm-up: framework threads, caches, imports

    before = _state(fw, model)
    if outcome == "success":
        fw.ptq(model, lambda: [[b] for b in x])
    else:
        with pytest.raises(RepresentativeDataError):
            fw.ptq(model, lambda: [[x[0]], "not a batch"])
    after = _state(fw, model)

    assert not _diff(before, after)
    assert len(run_folders(tmp_path)) == 2
    assert not [f for f in _open_files().values() if str(tmp_path) in f]
