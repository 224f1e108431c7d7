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

    def is_tensor(self, value: Any) -> bool:
        return keras.ops.is_tensor(value) and not isinstance(value, np.ndarray)

    def to_numpy(self, value: Any) -> np.ndarray:
        if isinstance(value, np.ndarray):
            return value
        if keras.ops.is_tensor(value):
            return keras.ops.convert_to_numpy(value)
        return np.asarray(value)

    def read(self, model: Any, sample_inputs: Sequence[np.ndarray]) -> tuple[Graph, list[str]]:
        return reader.read(model, sample_inputs)

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
