"""What a framework backend provides, and how one is chosen from a model's type.

A backend does only what is framework-specific: read a model into a `Graph`, build a
model back from one, run a model, and convert tensors. Everything else is in the core.
Backends are imported lazily, so importing the core imports neither torch nor TensorFlow.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from model_compression_toolkit.core.graph import Graph, OpKind
from model_compression_toolkit.errors import UnsupportedFrameworkError

Tap = Callable[[str, np.ndarray], None]  # (node name, its output) during a model run


class Backend(Protocol):
    name: str  # "pytorch" or "keras"
    channels_last: bool

    def model_name(self, model: Any) -> str:
        """A short name for run folders: the model's class name."""

    def input_count(self, model: Any) -> int | None:
        """How many inputs the model takes, if it can be known without running it."""

    def input_names(self, model: Any) -> list[str] | None:
        """The names of the model's inputs in the order it takes them (the keys a dict batch
        may give), if it names them."""

    def expected_input_shapes(self, model: Any) -> list[tuple | None] | None:
        """The input shapes the model declares (batch as None), if it declares them."""

    def is_tensor(self, value: Any) -> bool:
        """Whether ``value`` is one of the framework's tensors."""

    def to_numpy(self, value: Any) -> np.ndarray:
        """A framework tensor (or array-like) as a numpy array, without copying when possible."""

    def read(self, model: Any, sample_inputs: Sequence[np.ndarray]) -> tuple[Graph, list[str]]:
        """Read ``model`` into a Graph, using ``sample_inputs`` (one batch) for shapes.

        A batch given as a dict arrives as a `core.data.NamedBatch`, whose ``names`` say
        which input each array is.

        Returns the graph and the warnings to show the user (for example the ops kept in
        float because they are not supported). The user's model is not modified.
        Raises ModelReadError for a model that cannot be read and InputMismatchError
        when the sample does not fit the model.
        """

    def build(
        self,
        graph: Graph,
        quantized: bool,
        extra_outputs: Sequence[str] = (),
        weights: Mapping[str, Mapping[str, np.ndarray]] | None = None,
        tap: Tap | None = None,
        share: Any = None,
    ) -> Any:
        """Build a model from ``graph``.

        Float mode uses the graph's float weights and no activation quantizers. Quantized
        mode uses weights quantized on each node's ``quant.weights`` grids and inserts an
        activation fake-quantizer, named after its node, after every node whose
        ``quant.activation`` has a grid. With ``extra_outputs``, the model returns the
        graph outputs followed by the outputs of those nodes (after their quantizer in
        quantized mode). ``weights`` (node -> weight name -> array) are quantized weights
        already computed, used instead of computing them again.

        With ``tap``, the model returns nothing: ``tap(name, array)`` receives the output
        of each ``extra_outputs`` node instead, so that it can be reduced and let go rather
        than held with all the others. PyTorch calls it as soon as the output is computed;
        Keras, whose functional models hold every tensor of a call until it returns, when
        the call returns. The array is only valid during the call to ``tap``.

        ``share``: a model this backend built from the same ``graph`` object with the same
        ``quantized`` and ``weights``, whose layers the new model may reuse instead of
        making its own (Keras does: a build copies every weight; PyTorch's models already
        share the graph's weights and its builds are cheap, so it ignores ``share``).
        """

    def run(self, model: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run a built (or the user's) model in inference mode; all outputs as numpy arrays."""


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


def unsupported_warnings(graph: Graph, shown: int = 5) -> list[str]:
    """One warning per unsupported layer type, naming its layers (the first ``shown`` of them).

    ConvNeXt's 18 ``LayerScale`` modules give one line, not 18; every name is still in
    ``info.unsupported_layers``.
    """
    by_type: dict[str, list[str]] = {}
    for node in graph.nodes():
        if node.kind == OpKind.UNKNOWN:
            by_type.setdefault(node.layer_type, []).append(node.name)
    messages = []
    for layer_type, names in by_type.items():
        if len(names) == 1:
            messages.append(f"{names[0]!r} ({layer_type}) is not supported: kept in float and passed through unchanged")
            continue
        listed = ", ".join(repr(n) for n in names[:shown])
        more = f" and {len(names) - shown} more (all in info.unsupported_layers)" if len(names) > shown else ""
        messages.append(
            f"{layer_type} is not supported: its {len(names)} layers {listed}{more} are kept in float "
            "and passed through unchanged"
        )
    return messages
