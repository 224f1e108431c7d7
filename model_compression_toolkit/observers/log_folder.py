"""Where logs go: the log folder the user sets, and one folder per PTQ call inside it.

    mct.set_log_folder("/tmp/mct_logs")        # checked at once: LogFolderError if unusable
    with mct.log_folder("/tmp/other"):         # only for the calls of this block
        ...
    make_call_folder(root, "resnet18")         # /tmp/mct_logs/resnet18_20250101-120000/

The folder belongs to the thread (or asyncio task) that set it: `set_log_folder` sets it for
the calling context and as the process default, which threads that never set one use. A call
captures its folder when it starts. Names that become file names are made safe here
(`safe_component`, `safe_run_path`).
"""

from __future__ import annotations

import contextvars
import errno
import hashlib
import logging
import os
import tempfile
import time
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from model_compression_toolkit.errors import LogFolderError

LOGGER_NAME = "model_compression_toolkit"
LOG_FILE = "mct.log"
logger = logging.getLogger(LOGGER_NAME)

_UNSET = object()
_default: Path | None = None  # the folder set last, by any thread: for contexts that set none
_context: contextvars.ContextVar = contextvars.ContextVar("mct_log_folder", default=_UNSET)
_HINT = "Give set_log_folder a writable directory, or None to turn logging off."

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
    so an unusable path fails here rather than halfway through a quantization. The folder
    is this thread's (or asyncio task's), and the default of threads that set none; see
    `log_folder` for a folder that holds for one ``with`` block only.

    Args:
        folder: the log folder, or None to turn logging off.
        level: level of the library's python logger (``model_compression_toolkit``).

    Returns:
        The absolute log folder, or None.

    Raises:
        LogFolderError: the path is not a str or os.PathLike, is empty, holds a NUL or a
            name too long for the file system, is a file, a dangling symbolic link or a
            link loop, or cannot be created or written. Nothing is changed then: not the
            folder set before, not the logger's level, not the file system.
    """
    global _default
    path = None if folder is None else _usable_folder(folder)
    logger.setLevel(level)
    _default = path
    _context.set(path)
    return path


@contextmanager
def log_folder(folder: str | os.PathLike | None) -> Iterator[Path | None]:
    """``with mct.log_folder(path):`` logs the calls of the block under ``path`` (None: not
    at all), then restores the folder set before, even when the block raises.

    It holds for the calling thread or asyncio task only; the folder is checked and created
    as by `set_log_folder` (LogFolderError), and the logger's level is left as it is.
    """
    path = None if folder is None else _usable_folder(folder)
    token = _context.set(path)
    try:
        yield path
    finally:
        _context.reset(token)


def get_log_folder() -> Path | None:
    """The log folder of the calling thread or task (`set_log_folder`, `log_folder`), else the
    one set last in the process, or None when logging is off."""
    path = _context.get()
    return _default if path is _UNSET else path


def _usable_folder(folder: object) -> Path:
    """``folder`` as an absolute path to a directory that exists and can be written, or a
    LogFolderError that says why not; when it fails, no folder it created is left."""
    if not isinstance(folder, (str, os.PathLike)):
        what = f"bytes {folder!r}: decode them with os.fsdecode(folder)" if isinstance(folder, bytes) else (
            f"{type(folder).__name__} {folder!r}")  # fmt: skip
        raise LogFolderError(f"expected a log folder as a str or os.PathLike; got {what}. {_HINT}")
    name = os.fspath(folder)
    if not isinstance(name, str):
        raise LogFolderError(f"expected a log folder path as str; {folder!r} gives {type(name).__name__}. {_HINT}")
    if not name:
        raise LogFolderError(
            f"expected a log folder; got an empty path, which would log into the current directory "
            f"without saying so. Write '.' for the current directory. {_HINT}"
        )
    if "\0" in name:
        raise LogFolderError(f"expected a log folder path; got {name!r}, which holds a NUL character. {_HINT}")
    try:
        os.fsencode(name)
    except UnicodeEncodeError as exc:  # a lone surrogate: no file system can name it
        raise LogFolderError(
            f"expected a log folder path the file system can encode; {name!r} holds {exc.object[exc.start:exc.end]!r}, "
            f"which {exc.encoding} cannot encode. {_HINT}"
        ) from None
    path = Path(name).expanduser().absolute()
    _check_names(path)
    _check_links(path)
    if path.exists() and not path.is_dir():
        raise LogFolderError(f"log folder {path} is a file, expected a directory. {_HINT}")
    created = [p for p in (path, *path.parents) if not os.path.lexists(p)]
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".mct-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        for made in created:  # deepest first: leave the file system as it was
            try:
                os.rmdir(made)
            except OSError:
                pass
        reason = exc.strerror or str(exc)
        raise LogFolderError(f"log folder {path} cannot be created or written: {reason}. {_HINT}") from exc
    return path


def _check_names(path: Path) -> None:
    """Every name in ``path`` fits the file system's limits (checked before anything is made)."""
    # os.path.exists, not Path.exists: a name too long for the file system makes the latter raise
    existing = next((p for p in (path, *path.parents) if os.path.exists(p)), Path(path.anchor))
    try:
        name_max = os.pathconf(existing, "PC_NAME_MAX")
        path_max = os.pathconf(existing, "PC_PATH_MAX")
    except (OSError, ValueError, AttributeError):  # no pathconf here: the common limits
        name_max, path_max = 255, 4096
    for part in path.parts[1:]:
        if len(os.fsencode(part)) > name_max:
            raise LogFolderError(
                f"log folder {path} cannot be created: the name {part[:40]!r}... is too long "
                f"({len(os.fsencode(part))} bytes; the file system allows {name_max}). {_HINT}"
            )
    if len(os.fsencode(str(path))) >= path_max:
        raise LogFolderError(
            f"log folder {path} cannot be created: the path is too long ({len(os.fsencode(str(path)))} "
            f"bytes; the file system allows {path_max - 1}). {_HINT}"
        )


def _check_links(path: Path) -> None:
    """No part of ``path`` is a dangling symbolic link or a link loop."""
    for part in reversed((path, *path.parents)):
        if not os.path.islink(part):
            if not os.path.exists(part):
                return  # from here on, folders are created
            continue
        try:
            os.stat(part)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise LogFolderError(f"log folder {path} cannot be used: {part} is a symbolic link loop. {_HINT}") from None
            raise LogFolderError(
                f"log folder {path} cannot be used: {part} is a symbolic link to {os.readlink(part)}, "
                f"which does not exist. Create the target, or give the real folder. {_HINT}"
            ) from None


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
