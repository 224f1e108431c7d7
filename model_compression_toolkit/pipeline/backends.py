"""What the facades get from the backends, each chosen by a dict (not if-chains):

    model type                         -> its `Backend`                        `get_backend`
    (serialization, quantization)      -> the `Exporter` class writing it      `exporter_class`
    file suffix of a saved model       -> the backend's function loading it   `load_saved_model`

Backends are imported only when a model, format or file of their framework is given, so
importing the library imports neither torch nor TensorFlow, and no facade imports a backend.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from model_compression_toolkit.core.backend import Backend, Exporter
from model_compression_toolkit.errors import ExportError, ExportPathError, UnsupportedFrameworkError

# model base class (module, qualified name) -> backend (module, class)
_BACKENDS: dict[tuple[str, str], tuple[str, str]] = {
    ("torch.nn", "Module"): ("model_compression_toolkit.pytorch.backend", "PytorchBackend"),
    ("keras", "Model"): ("model_compression_toolkit.keras.backend", "KerasBackend"),
}


# (serialization, quantization) -> (module, class) of the exporter writing it
_EXPORTERS: dict[tuple[str, str], tuple[str, str]] = {
    ("ONNX", "FAKELY_QUANT"): ("model_compression_toolkit.pytorch.export", "OnnxExporter"),
    ("TORCHSCRIPT", "FAKELY_QUANT"): ("model_compression_toolkit.pytorch.export", "TorchScriptExporter"),
    ("KERAS", "FAKELY_QUANT"): ("model_compression_toolkit.keras.exporters", "KerasExporter"),
    ("TFLITE", "INT8"): ("model_compression_toolkit.keras.exporters", "TFLiteInt8Exporter"),
    ("TFLITE", "FAKELY_QUANT"): ("model_compression_toolkit.keras.exporters", "TFLiteFakeQuantExporter"),
}
# suffix of a saved quantized model -> (module, function) loading it
_LOADERS: dict[str, tuple[str, str]] = {
    ".keras": ("model_compression_toolkit.keras.export", "load_quantized"),
    ".h5": ("model_compression_toolkit.keras.export", "load_quantized"),  # Keras's legacy format
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


def exported_formats() -> Iterable[tuple[str, str]]:
    """The (serialization, quantization) pairs some backend writes, by name."""
    return tuple(_EXPORTERS)


def exporter_class(serialization: str, quantization: str) -> type[Exporter]:
    """The `Exporter` writing ``serialization`` with ``quantization`` (names, as in
    `exported_formats`); its backend is imported now."""
    entry = _EXPORTERS.get((serialization, quantization))
    if entry is None:
        raise ExportError(
            f"no exporter writes {serialization} with {quantization}; the pairs written are "
            + ", ".join(f"{s}/{q}" for s, q in _EXPORTERS)
        )
    module, name = entry
    return getattr(importlib.import_module(module), name)


def load_saved_model(path: Path, **options: Any) -> Any:
    """The quantized model saved at ``path``, loaded by the backend its suffix names."""
    entry = _LOADERS.get(path.suffix)
    if entry is None:
        raise ExportPathError(
            f"expected a saved quantized model ({', '.join(_LOADERS)}); got {path.name!r}. "
            "Write one with mct.exporter.keras_export_model (a .keras file)."
        )
    module, name = entry
    return getattr(importlib.import_module(module), name)(path, **options)
