"""The backend of a model, chosen by its type (a dict, not if-chains).

Backends are imported only when a model of their framework is given, so importing the
library imports neither torch nor TensorFlow.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from model_compression_toolkit.core.backend import Backend
from model_compression_toolkit.errors import UnsupportedFrameworkError

# model base class (module, qualified name) -> backend (module, class)
_BACKENDS: dict[tuple[str, str], tuple[str, str]] = {
    ("torch.nn", "Module"): ("model_compression_toolkit.pytorch.backend", "PytorchBackend"),
    ("keras", "Model"): ("model_compression_toolkit.keras.backend", "KerasBackend"),
}


def _base_class(module: str, name: str):
    top = module.split(".")[0]
    if top not in sys.modules:  # the framework was never imported, so no model can be of it
        return None
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def get_backend(model: Any, expected: str | None = None) -> Backend:
    """The backend for ``model``, chosen by its type.

    Args:
        model: a ``torch.nn.Module`` or a ``keras.Model``.
        expected: the backend the caller's API is for (``"pytorch"``/``"keras"``); a model
            of another framework is an error that names the right function.
    """
    for (module, name), (bmodule, bclass) in _BACKENDS.items():
        base = _base_class(module, name)
        if base is not None and isinstance(model, base):
            backend = getattr(importlib.import_module(bmodule), bclass)()
            if expected is not None and backend.name != expected:
                right = f"mct.ptq.{backend.name}_post_training_quantization"
                raise UnsupportedFrameworkError(
                    f"expected a {expected} model; got a {backend.name} model "
                    f"({type(model).__name__}). Use {right} for it."
                )
            return backend
    want = {"pytorch": "a torch.nn.Module", "keras": "a keras.Model"}.get(
        expected or "", "a torch.nn.Module or a keras.Model"
    )
    raise UnsupportedFrameworkError(f"expected {want}; got {type(model).__module__}.{type(model).__name__}")
