"""The logging of one PTQ call: its folder, its ``mct.log``, and the observer that writes it.

    with observe_call("resnet18", get_log_folder()) as call:   # /tmp/mct_logs/resnet18_<time>/
        quantize_in_stages(session, call.observer)            #   <stage>/ ... TensorBoard runs
                                                              #   mct.log (the library's python log)

With no log folder, ``call.folder`` is None and nothing is written; either way the
call's progress is shown on the console (`ConsoleProgress`), ending with the line that
opens this call alone in TensorBoard.

A call's ``mct.log`` receives only the lines logged inside that call (by the thread or task
running it), so two calls running at once in one process never mix their lines. A call that
ends with an exception (``KeyboardInterrupt`` included) writes it, with its traceback and
"this run is incomplete", to ``mct.log`` and to the Text summary of its last stage.
"""

from __future__ import annotations

import contextvars
import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from model_compression_toolkit.errors import warn_user
from model_compression_toolkit.observers.console import ConsoleProgress
from model_compression_toolkit.observers.log_folder import LOG_FILE, logger, make_call_folder
from model_compression_toolkit.observers.tensorboard import TensorBoardObserver
from model_compression_toolkit.pipeline.events import Fanout, NullObserver, Observer

_CALL: contextvars.ContextVar[object | None] = contextvars.ContextVar("mct_call", default=None)


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


class CallObserver(Fanout):
    """A logged call's observers: its TensorBoard observer, then its console display.

    ``writer(run_name)`` opens a run in the call folder, as `TensorBoardObserver.writer`
    (the exporter writes its runs with it).
    """

    def __init__(self, tensorboard: TensorBoardObserver, console: ConsoleProgress) -> None:
        super().__init__(tensorboard, console)
        self.writer = tensorboard.writer


class _ThisCall(logging.Filter):
    """Passes the records logged inside one call (in its thread or task) only."""

    def __init__(self, marker: object) -> None:
        super().__init__()
        self.marker = marker

    def filter(self, record: logging.LogRecord) -> bool:
        return _CALL.get() is self.marker


@contextmanager
def observe_call(model_name: str, root: Path | None, label: str = "") -> Iterator[CallLog]:
    """The logging of one PTQ call into ``root`` (the log folder; None: nothing is written),
    and its progress on the console, which ends with the line that opens this call alone
    in TensorBoard.

    Creates the call folder (``<model>_<label>_<time>``), attaches ``<call folder>/mct.log``
    to the library's logger for the lines of this call, and on exit (success or any
    exception, KeyboardInterrupt included) records an exception, closes every writer and
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
    marker = object()
    token = _CALL.set(marker)
    handler: logging.FileHandler | None = None
    observer: TensorBoardObserver | None = None
    try:
        try:
            folder = make_call_folder(root, name)
            handler = logging.FileHandler(folder / LOG_FILE, encoding="utf-8")
        except OSError as exc:
            warn_user(f"Logging is off for this call: cannot create a call folder in {root} ({exc}).", RuntimeWarning)
            folder = None
        if folder is None:
            yield CallLog(folder=None, observer=Fanout(console))
            return
        handler.addFilter(_ThisCall(marker))
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        call = CallLog(folder=folder)
        observer = TensorBoardObserver(folder, call.warnings)
        call.observer = CallObserver(observer, console)
        logger.info("quantization call %r logging to %s", name, folder)
        try:
            yield call
        except BaseException as exc:
            _record_failure(handler, observer, name, exc)
            raise
    finally:
        try:
            if observer is not None:
                observer.close()
        finally:
            if handler is not None:
                logger.removeHandler(handler)
                handler.close()
            _CALL.reset(token)


def _record_failure(handler: logging.Handler, observer: TensorBoardObserver, model_name: str, error: BaseException) -> None:
    """``mct.log`` (only: the exception reaches the caller anyway) and the last stage's Text
    summary say why the run stopped; a failure to say so never hides ``error``."""
    try:
        record = logger.makeRecord(
            logger.name, logging.ERROR, __file__, 0,
            "quantization call %r stopped with %s: this run is incomplete (the stages after the last "
            "one written are missing)", (model_name, type(error).__name__), (type(error), error, error.__traceback__),
        )  # fmt: skip
        handler.handle(record)
        observer.call_failed(error)
    except Exception as failure:  # noqa: BLE001 - the call's own exception is what the user must see
        warnings.warn(f"could not record in the log folder why the call stopped: {failure}", RuntimeWarning, stacklevel=2)
