"""Typed errors. Every message says what was expected, what was got, and what to do.

`warn_user` issues the library's warnings at the user's own line.
"""

from __future__ import annotations

import sys
import warnings

_PACKAGE = __name__.rpartition(".")[0]
_PASS_THROUGH = ("contextlib",)  # frames between the user's ``with`` and our context managers


def _ours(frame) -> bool:
    name = frame.f_globals.get("__name__", "")
    return name == _PACKAGE or name.startswith(_PACKAGE + ".") or name in _PASS_THROUGH


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """Warn at the line of the user's code that called into this library (not at ours),
    so the warning names the user's call and Python's filters show it once there."""
    frame, level = sys._getframe(1), 2
    while frame.f_back is not None and _ours(frame):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


class MCTError(Exception):
    """Base class of every error this library raises on purpose."""


class ConfigurationError(MCTError, ValueError):
    """A configuration object holds a value outside its allowed range."""


class LogFolderError(MCTError, OSError):
    """The log folder cannot be created or written."""


class RepresentativeDataError(MCTError, TypeError):
    """`representative_data_gen` is not callable, yields nothing, or yields the wrong kind of thing."""


class InputMismatchError(MCTError, ValueError):
    """The representative batches do not fit the model's inputs (count, rank or shape)."""


class ModelReadError(MCTError, TypeError):
    """The model cannot be read into the graph (untraceable, unsupported model kind)."""


class UnsupportedFrameworkError(MCTError, TypeError):
    """The object given is not a model of a framework this library supports."""


class GraphValidationError(MCTError, RuntimeError):
    """A graph transform left the graph inconsistent. This is a bug in the library: please report it."""


class ResourceBudgetError(MCTError, ValueError):
    """A resource budget cannot be met by any configuration."""


class LayerSelectionError(MCTError, ValueError):
    """A layer name, pattern or type given by the user matches no layer of the model."""


class ModelWeightsError(MCTError, ValueError):
    """The model's weights hold values that cannot be quantized (NaN or infinity)."""


class NotProvidedError(MCTError, NotImplementedError):
    """An MCT feature this library does not provide (``mct.gptq``, ``mct.qat``...); the
    message says what to use here instead."""
class ExportError(MCTError, ValueError):
    """The model cannot be written in the format asked for (the format, a layer, a bit width)."""


class ExportPathError(MCTError, OSError):
    """The export's destination cannot be written (a folder, a missing parent, no permission)."""


class MissingDependencyError(MCTError, ImportError):
    """A package an optional feature needs is not installed; the message says which extra installs it."""
