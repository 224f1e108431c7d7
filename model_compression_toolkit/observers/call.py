"""The logging of one PTQ call: its folder, its ``mct.log``, and the observer that writes it.

    with observe_call("resnet18", get_log_folder()) as call:   # /tmp/mct_logs/resnet18_<time>/
        quantize_in_stages(session, call.observer)            #   <stage>/ ... TensorBoard runs
                                                              #   mct.log (the library's python log)

With no log folder, ``call.folder`` is None and nothing is written; either way the
call's progress is shown on the console (`ConsoleProgress`), ending with the line that
opens this call alone in TensorBoard.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from model_compression_toolkit.errors import warn_user
from model_compression_toolkit.observers.console import ConsoleProgress
from model_compression_toolkit.observers.log_folder import LOG_FILE, logger, make_call_folder
from model_compression_toolkit.observers.tensorboard import TensorBoardObserver
from model_compression_toolkit.pipeline.events import Fanout, NullObserver, Observer


@dataclass
class CallLog:
    """One call's logging.

    Attributes:
        folder: the call folder (``info.log_folder``), or None when logging is off.
        observer: the observer the pipeline reports to.
        warnings: the warnings the observer showed (for ``info.warnings``).
    """

    folder: Path | None
    observer: Observer = field(default_factory=NullObserver)
    warnings: list[str] = field(default_factory=list)


@contextmanager
def observe_call(model_name: str, root: Path | None, label: str = "") -> Iterator[CallLog]:
    """The logging of one PTQ call into ``root`` (the log folder; None: nothing is written),
    and its progress on the console, which ends with the line that opens this call alone
    in TensorBoard.

    Creates the call folder (``<model>_<label>_<time>``), attaches ``<call folder>/mct.log``
    to the library's logger, and on exit (success or exception) closes every writer and
    removes the handler. If the folder cannot be created, warns and the call goes on
    without logging.
    """
    console = ConsoleProgress(model_name)
    call = CallLog(folder=None, observer=Fanout(console))
    try:
        with _log_folder(model_name if not label else f"{model_name}_{label}", root, console) as call:
            yield call
    except BaseException:
        console.close(call.folder, failed=True)
        raise
    console.close(call.folder)


@contextmanager
def _log_folder(name: str, root: Path | None, console: ConsoleProgress) -> Iterator[CallLog]:
    if root is None:
        yield CallLog(folder=None, observer=Fanout(console))
        return
    try:
        folder = make_call_folder(root, name)
        handler = logging.FileHandler(folder / LOG_FILE, encoding="utf-8")
    except OSError as exc:
        warn_user(f"Logging is off for this call: cannot create a call folder in {root} ({exc}).", RuntimeWarning)
        yield CallLog(folder=None, observer=Fanout(console))
        return
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    call = CallLog(folder=folder)
    observer = TensorBoardObserver(folder, call.warnings)
    call.observer = Fanout(observer, console)
    try:
        logger.info("quantization call %r logging to %s", name, folder)
        yield call
    finally:
        try:
            observer.close()
        finally:
            logger.removeHandler(handler)
            handler.close()
