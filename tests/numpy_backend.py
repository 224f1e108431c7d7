"""A tiny numpy `Backend`, for tests only: the backend contract holds without a framework,
and the pipeline runs without torch or TensorFlow.

The model type is a `NumpyModel`: named inputs of a given width and layers that read
earlier layers or inputs by name (Keras-like: channels last, kernels ``(in, out)``)::

    x (N, 6) -> Dense d1 -> ReLU relu -> Dense d2 -> output

``NumpyModel --read--> Graph --build--> BuiltModel``: a quantized build computes with
`node_weight`'s weights (the core's fake quant, bias correction included) and puts a
float32 fake quantizer after every node whose output has a grid. ``Scale`` is a layer
this backend does not support: it is read as UNKNOWN, kept and run in float.

Imports numpy and the core only (no pytest), so a subprocess can use it with torch and
TensorFlow blocked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from model_compression_toolkit.core.backend import Tap, unsupported_warnings
from model_compression_toolkit.core.calibration.quantizers import QuantizedWeights, fake_quant, node_weight
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.core.quant_config import QuantGrid
from model_compression_toolkit.errors import GraphValidationError, InputMismatchError, ModelReadError

Weights = Mapping[str, Mapping[str, np.ndarray]]


@dataclass
class Layer:
    """One layer: ``op`` (``Dense``, ``ReLU``, ``Add``, ``Scale``) applied to ``inputs``."""

    name: str
    op: str
    inputs: tuple[str, ...]
    weights: dict[str, np.ndarray] = field(default_factory=dict)  # Dense: kernel (in, out), bias
    factor: float = 1.0  # Scale's multiplier


def dense(name: str, src: str, kernel: np.ndarray, bias: np.ndarray | None = None) -> Layer:
    weights = {"kernel": np.asarray(kernel, np.float32)}
    if bias is not None:
        weights["bias"] = np.asarray(bias, np.float32)
    return Layer(name, "Dense", (src,), weights)


def relu(name: str, src: str) -> Layer:
    return Layer(name, "ReLU", (src,))


def add(name: str, a: str, b: str) -> Layer:
    return Layer(name, "Add", (a, b))


def scale(name: str, src: str, factor: float) -> Layer:
    """A layer the backend does not support."""
    return Layer(name, "Scale", (src,), factor=factor)


def _dense(ins: list[np.ndarray], weights: Mapping[str, np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
    y = ins[0] @ weights["kernel"]
    return y + weights["bias"] if "bias" in weights else y


# op -> (kind, what it computes from its inputs, weights and attributes)
OPS: dict[str, tuple[OpKind, Callable[..., np.ndarray]]] = {
    "Dense": (OpKind.DENSE, _dense),
    "ReLU": (OpKind.ACTIVATION, lambda ins, w, a: np.maximum(ins[0], 0)),
    "Add": (OpKind.ADD, lambda ins, w, a: ins[0] + ins[1]),
    "Scale": (OpKind.UNKNOWN, lambda ins, w, a: ins[0] * np.float32(a["factor"])),
}


@dataclass
class NumpyModel:
    """The user's model: ``inputs`` (name -> features), ``layers`` in order, ``outputs``."""

    inputs: dict[str, int]
    layers: list[Layer]
    outputs: list[str]
    name: str = "numpy_model"

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        values = dict(zip(self.inputs, arrays, strict=True))
        for layer in self.layers:
            attrs = {"factor": layer.factor}
            values[layer.name] = OPS[layer.op][1]([values[s] for s in layer.inputs], layer.weights, attrs)
        return [values[name] for name in self.outputs]


@dataclass
class Step:
    """One node of a built model: its op, inputs, weights (as used) and output quantizer."""

    name: str
    op: str
    inputs: list[str]
    weights: dict[str, np.ndarray]
    attrs: dict[str, Any]
    grid: QuantGrid | None = None  # float32, as activations flow
    axes: tuple[int, ...] = ()


class BuiltModel:
    """A model `NumpyBackend.build` made; calling it runs its steps in order.

    With a tap, each extra output goes to the tap as soon as it is computed and the call
    returns nothing.
    """

    def __init__(self, graph: Graph, quantized: bool, weights: Any, steps: list[Step], extras: list[str], tap: Tap | None):
        self.source = (graph, quantized, weights)
        self.steps, self.extras, self.tap = steps, extras, tap
        self.inputs = list(graph.inputs)
        self.outputs = [name for name, _ in graph.outputs]

    def made_from(self, graph: Graph, quantized: bool, weights: Any) -> bool:
        g, q, w = self.source
        return g is graph and q == quantized and w is weights

    def layer_weights(self, name: str) -> dict[str, np.ndarray]:
        """The weights the node ``name`` computes with (quantized ones in a quantized build)."""
        return next(step.weights for step in self.steps if step.name == name)

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        if len(arrays) != len(self.inputs):
            raise ValueError(f"expected {len(self.inputs)} inputs {self.inputs}; got {len(arrays)}")
        values = dict(zip(self.inputs, arrays))
        tapped = set(self.extras) if self.tap is not None else set()
        for step in self.steps:
            if step.op != "Input":
                values[step.name] = OPS[step.op][1]([values[s] for s in step.inputs], step.weights, step.attrs)
            if step.grid is not None:
                values[step.name] = fake_quant(values[step.name], step.grid, step.axes)
            if step.name in tapped:
                self.tap(step.name, values[step.name])
        if self.tap is not None:
            return []
        return [values[name] for name in [*self.outputs, *self.extras]]


class NumpyBackend:
    """`core.backend.Backend` for `NumpyModel`s (channels last)."""

    name = "numpy"
    channels_last = True

    def model_name(self, model: NumpyModel) -> str:
        return model.name

    def input_count(self, model: NumpyModel) -> int | None:
        return len(model.inputs)

    def input_names(self, model: NumpyModel) -> list[str] | None:
        return list(model.inputs)

    def expected_input_shapes(self, model: NumpyModel) -> list[tuple | None] | None:
        return [(None, width) for width in model.inputs.values()]

    def is_tensor(self, value: Any) -> bool:
        return False  # numpy arrays are the only tensors, and the core takes them as they are

    def to_numpy(self, value: Any) -> np.ndarray:
        return np.asarray(value)

    def read(self, model: NumpyModel, sample_inputs: Sequence[np.ndarray]) -> tuple[Graph, list[str]]:
        if not isinstance(model, NumpyModel):
            raise ModelReadError(f"expected a NumpyModel; got {type(model).__name__}")
        want = self.expected_input_shapes(model)
        got = [np.shape(a) for a in sample_inputs]
        if len(got) != len(want) or any(len(g) != 2 or g[1] != w[1] for g, w in zip(got, want)):
            raise InputMismatchError(
                f"expected {len(want)} input(s) of shapes {want} for {model.name}; got {len(got)} of shapes {got}. "
                "Give one (N, features) array per input."
            )
        graph = Graph(model.name, self.name)
        widths: dict[str, int] = {}
        for (name, width), array in zip(model.inputs.items(), sample_inputs):
            attrs = {"dtype": str(np.asarray(array).dtype)}
            graph.add_node(Node(name, OpKind.INPUT, "Input", attrs, output_shapes=[(None, width)], channel_axis=-1))
            graph.inputs.append(name)
            widths[name] = width
        for layer in model.layers:
            graph.add_node(_node(layer, widths))
            for index, src in enumerate(layer.inputs):
                graph.add_edge(src, layer.name, 0, index)
        graph.outputs = [(name, 0) for name in model.outputs]
        graph.validate()
        return graph, unsupported_warnings(graph)

    def build(
        self,
        graph: Graph,
        quantized: bool,
        extra_outputs: Sequence[str] = (),
        weights: Weights | None = None,
        tap: Tap | None = None,
        share: Any = None,
    ) -> BuiltModel:
        for name in extra_outputs:
            if name not in graph:
                raise GraphValidationError(f"extra output {name!r} is not a node of graph {graph.name!r}")
        if isinstance(share, BuiltModel) and share.made_from(graph, quantized, weights):
            steps = share.steps  # the same weight arrays, not computed again
        else:
            steps = _steps(graph, quantized, weights)
        return BuiltModel(graph, quantized, weights, steps, list(extra_outputs), tap)

    def forward(self, model: NumpyModel | BuiltModel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(value) for value in model(*inputs)]


def _node(layer: Layer, widths: dict[str, int]) -> Node:
    """The node of ``layer``, its output width recorded in ``widths``."""
    if layer.op not in OPS:
        raise ModelReadError(f"{layer.name!r}: expected an op among {sorted(OPS)}; got {layer.op!r}")
    missing = [s for s in layer.inputs if s not in widths]
    if missing:
        raise ModelReadError(f"{layer.name!r} reads {missing}, which no earlier layer or input gives")
    ins = [widths[s] for s in layer.inputs]
    kind, out = OPS[layer.op][0], ins[0]
    node = Node(layer.name, kind, layer.op, weights={k: v.copy() for k, v in layer.weights.items()}, channel_axis=-1)
    if layer.op == "Dense":
        if layer.weights["kernel"].shape[0] != ins[0]:
            raise ModelReadError(f"{layer.name!r}: kernel {layer.weights['kernel'].shape} on {ins[0]} features")
        out = layer.weights["kernel"].shape[1]
        node.kernel_axes, node.kernel_in_axis = {"kernel": (1,)}, {"kernel": 0}
    elif layer.op == "ReLU":
        node.attrs["function"] = "relu"
    elif layer.op == "Scale":
        node.attrs["factor"] = layer.factor
    if layer.op == "Add" and ins[0] != ins[1]:
        raise ModelReadError(f"{layer.name!r} adds {ins[0]} features to {ins[1]}")
    node.input_shapes = [(None, w) for w in ins]
    node.output_shapes = [(None, out)]
    widths[layer.name] = out
    return node


def _steps(graph: Graph, quantized: bool, weights: Weights | None) -> list[Step]:
    if quantized and weights is None:  # each kernel quantized once, also for its corrected bias
        weights = QuantizedWeights(graph)
    steps = []
    for node in graph.nodes():
        used = {name: node_weight(node, name, quantized, weights) for name in node.weights}
        op = "Input" if node.kind == OpKind.INPUT else node.layer_type
        if op != "Input" and op not in OPS:
            raise GraphValidationError(f"{node.name!r}: the numpy backend cannot run {op!r}")
        step = Step(node.name, op, [e.src for e in graph.in_edges(node.name)], used, dict(node.attrs))
        act = node.quant.activation
        if quantized and act is not None and act.grid is not None:
            step.grid = dataclasses.replace(
                act.grid, scale=np.float32(act.grid.scale), zero_point=np.float32(act.grid.zero_point)
            )
            step.axes = (-1,) if np.size(act.grid.scale) > 1 else ()
        steps.append(step)
    return steps
