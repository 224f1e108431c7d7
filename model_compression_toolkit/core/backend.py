"""What a framework backend provides, split by capability.

    Backend    read a model into a `Graph`, build a model back from one, run it, convert tensors
    Exporter   write the quantized graph as one file format (``pytorch.export``, ``keras.exporters``)
    Runtime    the written file loaded in its runtime: run it, describe it, expose its tensors
    Taps       a run of the file that exposes every quantized tensor (per-layer parity)

A backend does only what is framework-specific; everything else is in the core, and the
flow that uses an `Exporter` (stage -> write -> load -> parity) is `pipeline.export`. The
backends (``model_compression_toolkit.pytorch``, ``.keras``) import the core; the core never
imports them (`pipeline.backends` chooses one by the model's type or the file's format).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from model_compression_toolkit.core.export.report import ExportedGraph
from model_compression_toolkit.core.graph import Graph, OpKind
from model_compression_toolkit.core.layer_parity import TapPoint

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


class Taps(Protocol):
    """The file run so that every quantized tensor an op writes can be read (``pytorch.onnx_taps``,
    ``keras.tflite_taps``).

    Attributes:
        name: the runtime, as the per-layer table names it.
        points: the quantized tensors ops write, in op order.
    """

    name: str
    points: list[TapPoint]

    def run(
        self, batch: Sequence[np.ndarray], tensors: Sequence[str]
    ) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
        """The file's outputs on one batch, and the values of ``tensors`` (dequantized, float32)."""
        ...


class Runtime(Protocol):
    """A written file loaded in the runtime it is meant for (onnxruntime, TFLite, torch.jit, Keras).

    Attributes:
        name: the runtime and its version (``"onnxruntime 1.32.0"``), for the report.
    """

    name: str

    def run(self, batch: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The file's outputs on one batch, in the graph's output order."""
        ...

    def graph(self) -> ExportedGraph | None:
        """The ops and tensors of the file as the runtime reads it; None when it cannot tell."""
        return None

    def runtime_graph(self) -> ExportedGraph | None:
        """The graph the runtime runs after its own optimizations; None when it cannot tell."""
        return None

    def floor_model(self) -> Any | None:
        """A model of the backend computing the quantized model with float32 rounding noise at
        every quantizer: the parity any runtime can reach. None: the pipeline moves the inputs
        by that noise instead."""
        return None

    def taps(self) -> Taps | None:
        """The file run with its quantized tensors exposed; None for a runtime that runs this
        library's own model (``.keras``, TorchScript, float TFLite), which has none."""
        return None


@dataclass
class Written:
    """What `Exporter.write` tells: notes for the user and numbers for the report.

    Attributes:
        notes: what to know about the file (a fixed batch size, differences the runtime makes).
        figures: numbers worth showing (the largest bias rounding, in steps).
    """

    notes: list[str] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)


class Exporter(Protocol):
    """Writes one quantized graph as one file format, and loads what it wrote.

    Made with ``(graph, q_model, **options)`` by the facade, its class chosen by the format
    (`pipeline.backends.exporter_class`).

    Attributes:
        serialization, quantization: the formats' names (``"ONNX"``, ``"FAKELY_QUANT"``).
        suffix: the suffix the file's name must have, or None for any.
        integer_bias: whether the runtime adds each bias as int32 on ``s_in * s_w``
            (`core.export.grids.integer_biases`), so parity shows what that does alone.
    """

    serialization: ClassVar[str]
    quantization: ClassVar[str]
    suffix: ClassVar[str | None] = None
    integer_bias: ClassVar[bool] = False

    def layers(self) -> list[tuple[str, Any]]:
        """The quantized model's layers, named, as MCT's ``is_layer_exportable_fn`` is given them."""
        ...

    def problems(self) -> list[str]:
        """Why the graph cannot be written in this format: one line per layer, or none."""
        return []

    def write(self, path: Path, example: Sequence[np.ndarray]) -> Written:
        """Write the file at ``path`` (and any side file beside it); ``example`` is one batch."""
        ...

    def load(self, path: Path) -> Runtime:
        """The file at ``path`` in its runtime."""
        ...

    def custom_objects(self) -> dict[str, Any]:
        """What loading the file back needs besides the framework (Keras's ``custom_objects``)."""
        return {}


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
            messages.append(
                f"{names[0]!r} ({layer_type}) is not supported: kept in float and passed through unchanged"
            )
            continue
        listed = ", ".join(repr(n) for n in names[:shown])
        more = (
            f" and {len(names) - shown} more (all in info.unsupported_layers)" if len(names) > shown else ""
        )
        messages.append(
            f"{layer_type} is not supported: its {len(names)} layers {listed}{more} are kept in float "
            "and passed through unchanged"
        )
    return messages
