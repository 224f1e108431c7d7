"""The Keras 3 backend: read, build and run ``keras.Model`` objects (channels-last).

``keras.Model -> reader.read -> Graph -> builder.build -> keras.Model``
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import keras
import numpy as np

from model_compression_toolkit.core.backend import Tap
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.keras import builder, reader


class KerasBackend:
    """What the core needs from Keras; everything else is framework-agnostic."""

    name = "keras"
    channels_last = True

    def model_name(self, model: Any) -> str:
        """The model's class name, or its own name for plain Functional/Sequential models."""
        cls = type(model).__name__
        return model.name if cls in ("Functional", "Sequential") else cls

    def _inputs(self, model: Any) -> list[Any] | None:
        try:
            return list(model.inputs) if model.inputs is not None else None
        except (AttributeError, ValueError):  # an unbuilt Sequential or a subclassed model
            return None

    def input_count(self, model: Any) -> int | None:
        inputs = self._inputs(model)
        return None if inputs is None else len(inputs)

    def input_names(self, model: Any) -> list[str] | None:
        """The names of the model's inputs (its ``keras.Input`` layers), in ``model.inputs`` order."""
        inputs = self._inputs(model)
        return None if inputs is None else [t.name for t in inputs]

    def expected_input_shapes(self, model: Any) -> list[tuple | None] | None:
        inputs = self._inputs(model)
        return None if inputs is None else [(None, *tuple(t.shape)[1:]) for t in inputs]

    def expected_input_dtypes(self, model: Any) -> list[str | None] | None:
        """The dtype each input is declared with (``keras.Input(..., dtype=...)``), as a name."""
        inputs = self._inputs(model)
        return None if inputs is None else [None if t.dtype is None else str(t.dtype) for t in inputs]

    def is_tensor(self, value: Any) -> bool:
        return keras.ops.is_tensor(value) and not isinstance(value, np.ndarray)

    def to_numpy(self, value: Any) -> np.ndarray:
        if isinstance(value, np.ndarray):
            return value
        if keras.ops.is_tensor(value):
            return keras.ops.convert_to_numpy(value)
        return np.asarray(value)

    def read(self, model: Any, sample_inputs: Sequence[np.ndarray]) -> tuple[Graph, list[str]]:
        """The graph and the read's warnings, the first saying so when the model is not float32."""
        graph, warnings = reader.read(model, sample_inputs)
        note = precision_warning(model, self.model_name(model))
        return graph, ([note] if note else []) + warnings

    def build(
        self,
        graph: Graph,
        quantized: bool,
        extra_outputs: Sequence[str] = (),
        weights: Mapping[str, Mapping[str, np.ndarray]] | None = None,
        tap: Tap | None = None,
        share: Any = None,
    ) -> Any:
        return builder.build(graph, quantized, extra_outputs, weights, tap, share)

    def forward(self, model: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """All outputs of ``model`` in inference mode, flattened, as numpy arrays (none
        for a model built with a tap)."""
        args = [keras.ops.convert_to_tensor(x) for x in inputs]
        inner = model.model if isinstance(model, builder.TappedModel) else model
        structure = getattr(inner, "input", None) if isinstance(inner, keras.Model) else None
        if isinstance(structure, dict):  # a model taking a dict: the list in its flat order
            out = model(keras.tree.pack_sequence_as(structure, args), training=False)
        else:
            out = model(args[0] if len(args) == 1 else args, training=False)
        return [] if out is None else [self.to_numpy(t) for t in keras.tree.flatten(out)]


def precision_warning(model: Any, name: str) -> str | None:
    """The warning for a model whose layers compute or keep weights in another float type
    than float32 (a ``float16``/``mixed_bfloat16`` policy, float64 weights), as PyTorch's
    reader says it for half-precision modules; None for a float32 model."""
    layers = [model, *getattr(model, "_flatten_layers", lambda: model.layers)()]
    policies = {getattr(getattr(layer, "dtype_policy", None), "name", None) for layer in layers}
    dtypes = {str(w.dtype) for w in model.weights}
    other = sorted(p for p in policies | dtypes if p and p not in ("float32", "int32", "int64", "bool"))
    if not other:
        return None
    return (
        f"{name} uses {' and '.join(other)} (Keras dtype policy or weights): it is read, calibrated and "
        "quantized in float32, so the quantized model computes in float32 (and takes float32 inputs). "
        "Its grids are the same; evaluate both models in float32 to compare them, or rebuild the float "
        "model under keras.config.set_dtype_policy('float32') to quantize what it computes in float32."
    )
