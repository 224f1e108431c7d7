"""What a framework backend provides: the `Backend` protocol.

A backend does only what is framework-specific: read a model into a `Graph`, build a
model back from one, run a model forward, and convert tensors. Everything else is in the
core. The backends (``model_compression_toolkit.pytorch``, ``.keras``) import the core;
the core never imports them (`pipeline.backends` chooses one by the model's type).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from model_compression_toolkit.core.graph import Graph, OpKind

Tap = Callable[[str, np.ndarray], None]  # (node name, its output) during a model run


class Backend(Protocol):
    name: str  # "pytorch" or "keras"
    channels_last: bool

    def model_name(self, model: Any) -> str:
        """A short name for call folders: the model's class name."""

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

    def forward(self, model: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run a built (or the user's) model in inference mode; all outputs as numpy arrays."""


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
