"""Placeholders for the names of MCT modules this library does not provide.

``mct.gptq.get_pytorch_gptq_config`` exists, and so does any attribute of it
(``mct.gptq.RoundingType.STE``): a script imports and reads them without an
AttributeError, and the first call raises `NotProvidedError` saying what to use here.
"""

from __future__ import annotations

from typing import Any, NoReturn

from model_compression_toolkit.errors import NotProvidedError


class NotProvided:
    """A name of an MCT module that is not part of this library: calling it raises."""

    def __init__(self, path: str, instead: str) -> None:
        self._path, self._instead = path, instead

    def __getattr__(self, name: str) -> NotProvided:
        if name.startswith("__"):
            raise AttributeError(name)
        return NotProvided(f"{self._path}.{name}", self._instead)

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotProvidedError(f"{self._path} is not part of this library: {self._instead}")

    def __repr__(self) -> str:
        return f"<{self._path}: not provided by this library>"


def module_getattr(module: str, instead: str):
    """A module ``__getattr__`` giving a `NotProvided` for any public name."""

    def __getattr__(name: str) -> NotProvided:
        if name.startswith("__"):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        return NotProvided(f"{module}.{name}", instead)

    return __getattr__
