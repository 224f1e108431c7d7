"""Where logs go: the log folder the user sets, and one folder per PTQ call inside it.

    mct.set_log_folder("/tmp/mct_logs")        # checked at once: LogFolderError if unusable
    make_call_folder(root, "resnet18")         # /tmp/mct_logs/resnet18_20250101-120000/

Names that become file names are made safe here (`safe_component`, `safe_run_path`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import time
import unicodedata
from pathlib import Path

from model_compression_toolkit.errors import LogFolderError

LOGGER_NAME = "model_compression_toolkit"
LOG_FILE = "mct.log"
logger = logging.getLogger(LOGGER_NAME)

_log_folder: Path | None = None

_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def safe_component(name: str, max_len: int = 80) -> str:
    """A file name made of ``[A-Za-z0-9._-]`` that cannot leave its folder.

    Other characters become ``_``; leading dots are dropped (no ``..``, no hidden files).
    When the name had to change, a short hash of the original is appended so that two
    different names never share a folder.
    """
    original = str(name)
    ascii_name = unicodedata.normalize("NFKD", original).encode("ascii", "ignore").decode()
    clean = "".join(c if c in _SAFE else "_" for c in ascii_name).lstrip(".")[:max_len] or "_"
    if clean != original:
        clean += "-" + hashlib.sha1(original.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return clean


def safe_run_path(root: str | Path, run_name: str) -> Path:
    """``root/<run_name>`` with each ``/``-separated part made safe; always inside ``root``."""
    parts = [safe_component(p) for p in str(run_name).split("/") if p] or ["_"]
    path = Path(root).joinpath(*parts)
    if not path.resolve().is_relative_to(Path(root).resolve()):
        raise ValueError(f"run name {run_name!r} would leave {root}")
    return path


def set_log_folder(folder: str | os.PathLike | None, level: int = logging.INFO) -> Path | None:
    """Log every quantization run under ``folder`` (None: log nothing).

    The folder (and its parents) is created now, and a probe file is written and removed,
    so an unusable path fails here rather than halfway through a quantization.

    Args:
        folder: the log folder, or None to turn logging off.
        level: level of the library's python logger (``model_compression_toolkit``).

    Returns:
        The absolute log folder, or None.

    Raises:
        LogFolderError: the path is a file, or the folder cannot be created or written.
    """
    global _log_folder
    logger.setLevel(level)
    if folder is None:
        _log_folder = None
        return None
    path = Path(folder).expanduser().absolute()
    hint = "Give set_log_folder a writable directory, or None to turn logging off."
    if path.exists() and not path.is_dir():
        raise LogFolderError(f"log folder {path} is a file, expected a directory. {hint}")
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".mct-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise LogFolderError(f"log folder {path} cannot be created or written: {reason}. {hint}") from exc
    _log_folder = path
    return path


def get_log_folder() -> Path | None:
    """The log folder set by `set_log_folder`, or None when logging is off."""
    return _log_folder


def make_call_folder(root: Path, model_name: str) -> Path:
    """``root/<model>_<YYYYmmdd-HHMMSS>[_n]``, created atomically: never shared, never merged."""
    base = f"{safe_component(model_name)}_{time.strftime('%Y%m%d-%H%M%S')}"
    root.mkdir(parents=True, exist_ok=True)
    n = 0
    while True:
        path = root / (base if n == 0 else f"{base}_{n}")
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            n += 1
