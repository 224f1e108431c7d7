"""Build a functional ``keras.Model`` back from a `Graph`.

Float: ``input -> conv -> relu -> ...``, each layer recreated from its class and config
and given the node's weights. Quantized: the weights with a grid are fake-quantized in
numpy, and every node whose output has a grid is followed by its quantizer::

    prev -> conv(fake_quant(kernel), bias) -> ActivationFakeQuant("conv") -> next

The user's layers are never reused, so the user's model is left as it was.
"""

from __future__ import annotations

import copy
import inspect
import re
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np

from model_compression_toolkit.core.backend import Tap
from model_compression_toolkit.core.calibration.quantizers import QuantizedWeights, node_weight
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.errors import GraphValidationError, ModelReadError
from model_compression_toolkit.keras import ops
from model_compression_toolkit.keras.layers import ActivationFakeQuant

# graph.meta key: (inputs, outputs) structures of a model that takes or returns more than a
# flat list (keras_hub's dicts), with the graph's inputs / outputs as leaves in flat order
STRUCTURE_META = "keras_structure"


@dataclass(frozen=True)
class Slot:
    """The place of the node's input ``index`` (its edge ``dst_index``) in the call arguments."""

    index: int


def template(value: Any, refs: list[dict]) -> Any:
    """Serialized call arguments with each ``__keras_tensor__`` replaced by a `Slot`."""
    if isinstance(value, dict):
        if value.get("class_name") == "__keras_tensor__":
            refs.append(value["config"])
            return Slot(len(refs) - 1)
        if "class_name" in value and "config" in value:
            return keras.saving.deserialize_keras_object(value)
        return {k: template(v, refs) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(template(v, refs) for v in value)
    return value


def fill(value: Any, inputs: Sequence[Any]) -> Any:
    """The call arguments with each `Slot` replaced by its input."""
    if isinstance(value, Slot):
        return inputs[value.index]
    if isinstance(value, dict):
        return {k: fill(v, inputs) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(fill(v, inputs) for v in value)
    return value


@dataclass
class _Built:
    """What `build` made a model from (weakly: a model keeps neither the graph nor the
    quantized weights alive), and its layers' output tensors by node."""

    graph: Callable[[], Any]
    quantized: bool
    weights: Callable[[], Any]
    names: _Names  # the layers' names, so that the model's own is none of them
    inputs: list[Any]
    tensors: dict[str, list[Any]]

    def made_from(self, graph: Graph, quantized: bool, weights: Any) -> bool:
        return self.graph() is graph and self.quantized == quantized and self.weights() is weights


def _weak(value: Any) -> Callable[[], Any]:
    """A weak reference to ``value``; for None, or a value that cannot have one (a dict), a
    reference that never matches it again."""
    if value is None:
        return lambda: None
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: _NEVER


_NEVER = object()


# every model `build` made -> how; an entry goes with its model (nothing in it refers to
# the model: its tensors refer to their layers only)
_BUILT: weakref.WeakKeyDictionary[keras.Model, _Built] = weakref.WeakKeyDictionary()


def build(
    graph: Graph,
    quantized: bool,
    extra_outputs: Sequence[str] = (),
    weights: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    tap: Tap | None = None,
    share: keras.Model | TappedModel | None = None,
) -> keras.Model | TappedModel:
    """A new functional model computing ``graph``.

    Args:
        graph: the graph to build.
        quantized: fake-quantize weights and activations that have a grid.
        extra_outputs: nodes whose outputs are returned after the graph outputs, one per
            node (its first: a split's first part).
        weights: quantized weights already computed (node -> weight name -> array).
        tap: receives the extra outputs instead (a `TappedModel` is returned).
        share: a model built here from the same ``graph`` object with the same
            ``quantized`` and ``weights``: the new model is wired over its layers (no new
            layer, no copy of the weights; a ResNet50 build takes 0.5 s). Any other model
            is ignored and the layers are made anew.
    """
    built = _built_like(share, graph, quantized, weights)
    if built is None:
        names = _Names()
        built = _Built(
            _weak(graph), quantized, _weak(weights), names, *_layers(graph, quantized, weights, names)
        )
    tensors = built.tensors
    outputs = [] if tap is not None else [tensors[n][i] for n, i in graph.outputs]
    for name in extra_outputs:
        if name not in tensors:
            raise GraphValidationError(f"extra output {name!r} is not a node of graph {graph.name!r}")
        outputs.extend(tensors[name][:1])  # one value per name, as callers zip them (a split has two)
    inputs: Any = built.inputs[0] if len(built.inputs) == 1 else built.inputs
    result: Any = outputs[0] if len(outputs) == 1 else outputs
    structure = graph.meta.get(STRUCTURE_META)
    if structure is not None:  # the model's own input and output structure (a dict of inputs)
        inputs = keras.tree.pack_sequence_as(structure[0], built.inputs)
        if tap is None and not extra_outputs:
            result = keras.tree.pack_sequence_as(structure[1], outputs)
    model = keras.Model(inputs=inputs, outputs=result, name=built.names.take(graph.name))
    _BUILT[model] = built
    return TappedModel(model, list(extra_outputs), tap) if tap is not None else model


def _built_like(share: Any, graph: Graph, quantized: bool, weights: Any) -> _Built | None:
    """How ``share`` was built, if from ``graph`` with ``quantized`` and ``weights``."""
    model = share.model if isinstance(share, TappedModel) else share
    built = _BUILT.get(model) if isinstance(model, keras.Model) else None
    return built if built is not None and built.made_from(graph, quantized, weights) else None


def _layers(
    graph: Graph, quantized: bool, weights: Mapping[str, Mapping[str, np.ndarray]] | None, names: _Names
) -> tuple[list[Any], dict[str, list[Any]]]:
    """New layers computing ``graph``, called on new inputs: (the inputs in the graph's
    order, node -> its output tensors, after its quantizer when ``quantized``)."""
    if quantized and weights is None:  # each kernel quantized once, also for its corrected bias
        weights = QuantizedWeights(graph)
    inputs: dict[str, Any] = {}
    tensors: dict[str, list[Any]] = {}
    for node in graph.nodes():
        if node.kind == OpKind.INPUT:
            outs = [input_tensor(node, names)]
            inputs[node.name] = outs[0]
        else:
            args = [tensors[e.src][e.src_index] for e in graph.in_edges(node.name)]
            outs = _call(node, args, quantized, names, weights)
        if quantized and node.quant.activation is not None and node.quant.activation.grid is not None:
            outs = [_quantizer(node, names, f"_{i}" if len(outs) > 1 else "")(t) for i, t in enumerate(outs)]
        tensors[node.name] = outs
    return [inputs[n] for n in graph.inputs], tensors


class TappedModel:
    """A model whose outputs, one per named node, go to ``tap`` when a call returns;
    calling it returns None. (A functional model holds every tensor of a call until the
    call returns, so handing them over earlier would free nothing.)"""

    def __init__(self, model: keras.Model, names: list[str], tap: Tap) -> None:
        self.model, self.names, self.tap = model, names, tap

    def __call__(self, inputs: Any, training: bool = False) -> None:
        outputs = keras.tree.flatten(self.model(inputs, training=training))
        for name, value in zip(self.names, outputs, strict=True):
            self.tap(name, keras.ops.convert_to_numpy(value))


class _Names:
    """Unique Keras layer names (no ``/``): ``inner/conv1 -> inner_conv1``."""

    def __init__(self) -> None:
        self._used: set[str] = set()

    def take(self, name: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_.\-]", "_", name) or "layer"
        name, k = base, 1
        while name in self._used:
            name, k = f"{base}_{k}", k + 1
        self._used.add(name)
        return name


def make_layer(cls: type, config: dict, name: str) -> Any:
    """A new layer (or ``keras.ops`` operation) of class ``cls`` from a copy of ``config``.

    A config holding keys its ``__init__`` does not take (keras_hub's ViTPatchingAndEmbedding
    writes ``num_patches``, which it computes) is tried again without them."""
    config = {**copy.deepcopy(config), "name": name}
    try:
        return cls.from_config(config)
    except Exception as e:
        if "enable_unsafe_deserialization" in str(e):  # Keras' safe mode refuses Python code
            raise ModelReadError(
                f"expected layer {name!r} ({cls.__name__}) to be rebuilt with from_config(get_config()); "
                "Keras refuses to rebuild a layer holding Python code (a Lambda's function) while its safe "
                "mode is on. If you trust the model (it is your own code), call "
                "keras.config.enable_unsafe_deserialization() before quantizing; or replace the "
                f"{cls.__name__} with a layer subclass that implements get_config()."
            ) from e
        accepted = _init_keywords(cls)
        if accepted is not None and set(config) - accepted:
            try:
                return cls.from_config({k: v for k, v in config.items() if k in accepted})
            except Exception:
                pass
        raise ModelReadError(
            f"expected layer {name!r} ({cls.__name__}) to be rebuilt with from_config(get_config()); "
            f"it raised {type(e).__name__}: {e}. Make get_config() of {cls.__name__} return every "
            "__init__ argument (or implement from_config)."
        ) from e


def _init_keywords(cls: type) -> set[str] | None:
    """The keywords ``cls.__init__`` and the Keras base classes take, or None if unknown."""
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return None
    return {n for n in params if n != "self"} | {"name", "trainable", "dtype", "autocast", "input_dim"}


def input_tensor(node: Node, names: _Names) -> Any:
    """The ``keras.Input`` of an input node (one made by the core has its shape and dtype
    on the node)."""
    spec = node.payload or {"batch_shape": node.output_shapes[0], "dtype": node.attrs.get("dtype", "float32")}
    return keras.Input(shape=spec["batch_shape"][1:], dtype=spec["dtype"], name=names.take(node.name))


def _call(
    node: Node,
    inputs: list[Any],
    quantized: bool,
    names: _Names,
    weights: Mapping[str, Mapping[str, np.ndarray]] | None,
) -> list[Any]:
    """Recreate the node's layer, call it on its inputs, set its weights; its outputs."""
    payload = node.payload
    config = payload["config"]
    if "bias" in node.weights and config.get("use_bias") is False:  # a folded batch norm gave it one
        config = {**config, "use_bias": True}
    if payload["class"].__module__.startswith("keras."):  # every weight is set below
        config = _zero_initializers(config)
    layer = make_layer(payload["class"], config, names.take(node.name))
    out = layer(*fill(payload["args"], inputs), **fill(payload["kwargs"], inputs))
    if node.weights and (node.kind == OpKind.UNKNOWN or ops.named_layer(layer)):  # names may differ: by order
        layer.set_weights(list(node.weights.values()))
    elif ops.is_layer(layer) and layer.weights:
        layer.set_weights([_weight(node, name, quantized, weights) for name in ops.weight_names(layer)])
    return list(keras.tree.flatten(out))


def _zero_initializers(config: dict) -> dict:
    """``config`` with every weight initializer ``"zeros"``: the layer's weights are set
    right after it is built, and drawing random ones took a fifth of a ResNet50 build."""
    return {k: "zeros" if k.endswith("_initializer") and v is not None else v for k, v in config.items()}


def _weight(
    node: Node, name: str, quantized: bool, weights: Mapping[str, Mapping[str, np.ndarray]] | None
) -> np.ndarray:
    if name not in node.weights:
        raise GraphValidationError(
            f"{node.name!r} ({node.layer_type}) needs a weight {name!r}; the node has {sorted(node.weights)}"
        )
    return node_weight(node, name, quantized, weights)


def _quantizer(node: Node, names: _Names, suffix: str) -> ActivationFakeQuant:
    grid = node.quant.activation.grid
    return ActivationFakeQuant(
        scale=grid.scale,
        zero_point=grid.zero_point,
        qmin=grid.qmin,
        qmax=grid.qmax,
        node_name=node.name,
        channel_axis=node.channel_axis if node.channel_axis is not None else -1,
        name=names.take(f"{node.name}_activation_quant{suffix}"),
    )
