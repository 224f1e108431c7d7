"""Read a Functional or Sequential ``keras.Model`` into the neutral `Graph`.

``model -> get_config() (layers, inbound nodes) -> one Node per layer call -> shapes from
compute_output_spec(sample shapes) -> Graph``

Each call of a layer is one node (a shared layer ``d`` gives ``d``, ``d_1``, ...); a
Functional or Sequential model called inside the model is flattened into its layers,
named after it (``inner/conv1``). A node's inputs are the Keras tensors in its call
arguments, flattened in order; ``node.payload`` keeps the layer class, its config and the
call arguments with each input replaced by a `Slot`, which is all the builder needs.
The user's model is only read: an unbuilt Sequential model, which has no weights yet, is
refused rather than built.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Sequence
from typing import Any

import keras
import numpy as np

from model_compression_toolkit.core.backend import unsupported_warnings
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.errors import InputMismatchError, ModelReadError
from model_compression_toolkit.keras import ops
from model_compression_toolkit.keras.builder import STRUCTURE_META, fill, make_layer, template

Source = tuple[str, int]  # (graph node, output index)
_HOW_TO = (
    "Expected a Functional or Sequential model (Functional or Sequential models nested in them "
    "are supported too). Wrap it into a functional model whose layers are its layers: "
    "inputs = keras.Input(shape); functional = keras.Model(inputs, model.call(inputs)); "
    "or write it with the functional API."
)


def read(model: Any, sample_inputs: Sequence[np.ndarray]) -> tuple[Graph, list[str]]:
    """Read ``model`` into a validated Graph and the warnings for layers kept in float."""
    view, config = functional_config(model, sample_inputs)
    check_names(model, view.inputs, getattr(sample_inputs, "names", None))
    check_inputs(view.inputs, sample_inputs)
    graph = Graph(model.name, "keras")
    reader = _Reader(graph)
    graph.outputs = reader.expand(view, config, "", None)
    order = {t.name: i for i, t in enumerate(view.inputs)}  # the order of model.inputs and of the batches
    graph.inputs.sort(key=lambda name: order.get(name, len(order)))
    structure = _structure(model, graph)
    if structure is not None:
        graph.meta[STRUCTURE_META] = structure
    reader.infer_shapes(sample_inputs)
    graph.validate()
    return graph, unsupported_warnings(graph)


def _structure(model: Any, graph: Graph) -> tuple[Any, Any] | None:
    """The model's input and output structures with flat indices as leaves, when either is
    more than a tensor or a flat list (a dict of inputs); else None."""
    try:
        inputs, outputs = model.input, model.output
    except (AttributeError, ValueError):
        return None
    if not isinstance(inputs, dict) and not isinstance(outputs, dict):
        return None
    flat_in, flat_out = keras.tree.flatten(inputs), keras.tree.flatten(outputs)
    if len(flat_in) != len(graph.inputs) or len(flat_out) != len(graph.outputs):
        return None
    return (
        keras.tree.pack_sequence_as(inputs, list(range(len(flat_in)))),
        keras.tree.pack_sequence_as(outputs, list(range(len(flat_out)))),
    )


def is_functional(obj: Any) -> bool:
    return any(c.__name__ == "Functional" for c in type(obj).__mro__)


def functional_config(model: Any, sample_inputs: Sequence[np.ndarray] = ()) -> tuple[Any, dict]:
    """A Functional model with ``model``'s graph, and its config (layers and inbound nodes).

    A Sequential model or a subclass of Functional is viewed as ``keras.Model(inputs,
    outputs)``, which shares its layers and leaves them as they are.
    """
    if isinstance(model, keras.Sequential):
        if not model.built:  # building it here would give the user's model random weights
            shapes = [(None, *np.shape(x)[1:]) for x in sample_inputs]
            raise ModelReadError(
                f"expected a built model, one with weights to quantize; Sequential model {model.name!r} "
                "is not built yet, so it has none. Train it, or build it first: "
                f"model.build({shapes[0] if len(shapes) == 1 else 'input_shape'})."
            )
        try:
            view = keras.Model(model.inputs, model.outputs, name=model.name)
        except (AttributeError, ValueError) as e:
            raise ModelReadError(
                f"expected a Sequential model with known inputs; {model.name!r} has none ({e}). "
                "Give it a keras.Input as first layer or call model.build(input_shape)."
            ) from e
    elif is_functional(model):
        view = model
    else:
        raise ModelReadError(f"got {model.name!r}, a subclassed {type(model).__name__}. {_HOW_TO}")
    try:
        config = view.get_config()
    except Exception as e:
        raise ModelReadError(_config_problem(view, e)) from e
    if "input_layers" not in config:  # a Functional subclass with its own constructor
        view = keras.Model(view.inputs, view.outputs, name=view.name)
        config = view.get_config()
    return view, config


def _config_problem(view: Any, error: Exception) -> str:
    for op in view.operations:
        try:
            op.get_config()
        except Exception as e:
            return (
                f"expected every layer to return its constructor arguments from get_config(); "
                f"layer {op.name!r} ({type(op).__name__}) raised {type(e).__name__}: {e}. "
                f"Implement get_config() in {type(op).__name__}."
            )
    return f"expected the model's get_config() to work; it raised {type(error).__name__}: {error}"


def check_names(model: Any, expected: Sequence[Any], names: Sequence[str] | None) -> None:
    """Raise InputMismatchError unless the keywords of a dict batch are the model's input names."""
    if names is None:
        return
    wanted = [t.name for t in expected]
    unknown = [n for n in names if n not in wanted]
    if unknown:
        raise InputMismatchError(
            f"expected keyword inputs that model {model.name!r} takes ({', '.join(wanted)}); got {unknown} in "
            "the batches from representative_data_gen. Use the names of the model's keras.Input layers as keys."
        )


def check_inputs(expected: Sequence[Any], sample_inputs: Sequence[np.ndarray]) -> None:
    """Raise InputMismatchError unless the sample batch fits the model's inputs."""
    if len(sample_inputs) != len(expected):
        raise InputMismatchError(
            f"expected {len(expected)} input(s) for the model; got {len(sample_inputs)} "
            f"with shapes {[np.shape(x) for x in sample_inputs]}. Give one array per model input."
        )
    for i, (x, tensor) in enumerate(zip(sample_inputs, expected)):
        got, want = tuple(np.shape(x)), (None, *tuple(tensor.shape)[1:])  # any batch size
        if _fits(got, want):
            continue
        if len(got) >= 3 and _fits((got[0], *got[2:], got[1]), want):
            order = (0, *range(2, len(got)), 1)
            raise InputMismatchError(
                f"input {i}: expected a channels-last batch of shape {want}; got {got}, which is "
                f"channels-first. Transpose it to channels-last with np.transpose(x, {order})."
            )
        raise InputMismatchError(
            f"input {i}: expected a batch of shape {want} (None: any size); got {got}. "
            "Give batches of the shape the model was built for."
        )


def _fits(got: tuple, want: tuple) -> bool:
    return len(got) == len(want) and all(w is None or w == g for g, w in zip(got, want))


class _Reader:
    """Turns the layer calls of a functional config (and of nested models) into nodes."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.objects: dict[str, Any] = {}  # node -> the user's layer, for shapes only
        self.arrays: dict[int, dict[str, np.ndarray]] = {}  # id(layer) -> its weights, read once
        self.declared: dict[Source, tuple] = {}  # shapes written in the config

    def _unique(self, name: str) -> str:
        base, k = name, 1
        while name in self.graph:
            name, k = f"{base}_{k}", k + 1
        return name

    def expand(self, view: Any, config: dict, prefix: str, bound: list[Source] | None) -> list[Source]:
        """Add the nodes of one functional ``view``; return its outputs.

        ``bound``: the sources its inputs are bound to (a nested model), or None (the top
        model, whose inputs become INPUT nodes).
        """
        objects = {op.name: op for op in view.operations}
        calls: dict[tuple[str, int], str | list[Source]] = {}
        for i, (name, _, _) in enumerate(_refs(config["input_layers"])):
            if bound is None:
                node = self._input_node(objects[name], prefix + name)
                self.graph.inputs.append(node)
                calls[(name, 0)] = node
            else:
                calls[(name, 0)] = [bound[i]]
        pending = [
            (layer, k, data)
            for layer in config["layers"]
            if layer["class_name"] != "InputLayer"
            for k, data in enumerate(layer["inbound_nodes"])
        ]
        while pending:
            left = []
            for layer, k, data in pending:
                refs: list[dict] = []
                args = template(data.get("args", []), refs)
                n_args = len(refs)  # a nested model's inputs: the tensors in its positional arguments
                kwargs = template(data.get("kwargs", {}), refs)
                keys = [(r["keras_history"][0], r["keras_history"][1]) for r in refs]
                if not all(key in calls for key in keys):
                    left.append((layer, k, data))
                    continue
                sources = [_resolve(calls, r["keras_history"]) for r in refs]
                for src, ref in zip(sources, refs):
                    self.declared.setdefault(src, tuple(ref["shape"]))
                op, name = objects[layer["name"]], layer["name"] if k == 0 else f"{layer['name']}_{k}"
                inner = None if isinstance(op, keras.Model) else self._decomposed(op, args, kwargs, refs)
                if isinstance(op, keras.Model):
                    inner_view, inner_config = functional_config(op)
                    calls[(layer["name"], k)] = self.expand(
                        inner_view, inner_config, self._unique(prefix + name) + "/", sources[:n_args]
                    )
                elif inner is not None:
                    calls[(layer["name"], k)] = self.expand(
                        inner[0], inner[1], self._unique(prefix + name) + "/", sources
                    )
                else:
                    calls[(layer["name"], k)] = self._call_node(
                        op, layer, prefix + name, args, kwargs, sources
                    )
            if len(left) == len(pending):
                raise ModelReadError(
                    f"expected every layer call of {view.name!r} to have its inputs in the model; "
                    f"{[layer['name'] for layer, _, _ in left]} do not. Please report this model."
                )
            pending = left
        outputs = []
        for ref in _refs(config["output_layers"]):
            name, k, t = ref
            k = k - 1 if is_functional(objects[name]) else k  # Functional models count their own node
            outputs.append(_resolve(calls, (name, k, t)))
        for src, tensor in zip(outputs, keras.tree.flatten(view.outputs)):
            self.declared.setdefault(src, tuple(tensor.shape))
        return outputs

    def _decomposed(self, op: Any, args: Any, kwargs: Any, refs: list[dict]) -> tuple[Any, dict] | None:
        """A composite layer (one made of layers: keras_hub's TransformerEncoder, Keras'
        MultiHeadAttention) as a functional model of its parts, by calling its ``call`` on
        symbolic inputs; None when it is not composite or that does not give a model this
        reader can read (then it stays one unknown node)::

            x -> TransformerEncoder -> y   becomes   x -> [attention parts, add, norm, dense, ...] -> y
        """
        if ops.kind_of(op) != OpKind.UNKNOWN or not getattr(op, "_layers", None):
            return None
        try:
            inputs = [
                keras.Input(batch_shape=tuple(r["shape"]), dtype=r.get("dtype", "float32")) for r in refs
            ]
            with _inlined(op):
                outputs = op.call(*fill(args, inputs), **fill(kwargs, inputs))
            view, config = functional_config(keras.Model(inputs, outputs))
            scratch = Graph("check", "keras")
            for i in range(len(refs)):
                scratch.add_node(Node(f"in{i}", OpKind.INPUT, "InputLayer"))
            _Reader(scratch).expand(view, config, "", [(f"in{i}", 0) for i in range(len(refs))])
        except Exception:  # not expressible as layers and operations (a shape known only when it
            # runs, a part without get_config): kept whole
            return None
        return view, config

    def _input_node(self, layer: Any, name: str) -> str:
        config = layer.get_config()
        shape = tuple(config.get("batch_shape") or (None, *layer.output.shape[1:]))
        node = Node(
            name=self._unique(name),
            kind=OpKind.INPUT,
            layer_type="InputLayer",
            attrs={"dtype": str(config.get("dtype", "float32"))},
            payload={"batch_shape": shape, "dtype": config.get("dtype", "float32")},
        )
        self.graph.add_node(node)
        self.objects[node.name] = layer
        return node.name

    def _call_node(
        self, op: Any, layer: dict, name: str, args: Any, kwargs: Any, sources: list[Source]
    ) -> str:
        config = copy.deepcopy(layer["config"])
        kind, class_name = ops.kind_of(op), type(op).__name__
        weights = {}
        if ops.is_layer(op):
            weights = {k: np.array(v, copy=True) for k, v in zip(ops.weight_names(op), op.get_weights())}
        if kind == OpKind.UNKNOWN:  # kept as it is, so it must be rebuildable from its config
            make_layer(type(op), config, op.name)
        attrs = {**ops.plain_attrs(config), **ops.number_operands(op, args, kwargs)}
        if kind == OpKind.ACTIVATION:
            attrs["function"] = ops.activation_function(op, config)
        if kind in (OpKind.BATCH_NORM, OpKind.LAYER_NORM):
            _fill_affine(weights)
        if weights:  # a layer called twice: every call holds the same arrays, counted once in memory
            first = self.arrays.setdefault(id(op), weights)
            weights = {k: first.get(k, w) for k, w in weights.items()}
        node = Node(
            name=self._unique(name),
            kind=kind,
            layer_type=ops.layer_type(op),
            attrs=attrs,
            weights=weights,
            kernel_axes=ops.kernel_axes(kind, class_name, weights, config),
            kernel_in_axis=ops.kernel_in_axis(kind, class_name, weights, config),
            fused_activation=None
            if kind in (OpKind.ACTIVATION, OpKind.SOFTMAX)
            else ops.fused_activation(config),
            payload={"class": type(op), "config": config, "args": args, "kwargs": kwargs},
        )
        self.graph.add_node(node)
        for i, (src, index) in enumerate(sources):
            self.graph.add_edge(src, node.name, index, i)
        self.objects[node.name] = op
        return node.name

    def infer_shapes(self, sample_inputs: Sequence[np.ndarray]) -> None:
        """Set input/output shapes for the sample's shapes (batch as None), node by node."""
        specs: dict[str, list[Any]] = {}
        samples = dict(zip(self.graph.inputs, sample_inputs))
        for node in self.graph.nodes():
            inputs = [specs[e.src][e.src_index] for e in self.graph.in_edges(node.name)]
            if node.kind == OpKind.INPUT:
                outs = [keras.KerasTensor((None, *np.shape(samples[node.name])[1:]), node.payload["dtype"])]
            else:
                outs = self._output_spec(node, inputs)
            specs[node.name] = outs
            if node.kind not in (OpKind.INPUT, OpKind.SHAPE) and outs and not any(_floating(t) for t in outs):
                node.kind = OpKind.SHAPE  # ids, masks, positions: no activation to quantize
            node.input_shapes = [tuple(t.shape) for t in inputs]
            node.output_shapes = [tuple(t.shape) for t in outs]
            if node.output_shapes:
                node.channel_axis = ops.channel_axis(node.output_shapes[0], node.payload.get("config", {}))

    def _output_spec(self, node: Node, inputs: list[Any]) -> list[Any]:
        payload = node.payload
        try:
            out = self.objects[node.name].compute_output_spec(
                *fill(payload["args"], inputs), **fill(payload["kwargs"], inputs)
            )
            return [t for t in keras.tree.flatten(out) if isinstance(t, keras.KerasTensor)]
        except Exception:  # a layer that cannot say: fall back on the shapes in the config
            count = 1 + max((i for (n, i) in self.declared if n == node.name), default=0)
            return [keras.KerasTensor(self.declared.get((node.name, i), (None,))) for i in range(count)]


class _Inline:
    """Stands for a sublayer during a symbolic call: calls its ``call``, so its own layers
    are recorded instead of it (keras_hub's ViT ``MLP``, which has no get_config)."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with _inlined(self.layer):
            return self.layer.call(*args, **kwargs)


@contextlib.contextmanager
def _inlined(op: Any) -> Iterator[None]:
    """Within: every sublayer attribute of ``op`` that cannot give its config is an `_Inline`
    (set past Keras' attribute tracking, and put back after)."""
    swapped = {}
    for name, value in list(vars(op).items()):
        if isinstance(value, keras.layers.Layer) and getattr(value, "_layers", None):
            try:
                value.get_config()
            except Exception:  # NotImplementedError: a layer written without get_config
                swapped[name] = value
    try:
        for name, value in swapped.items():
            object.__setattr__(op, name, _Inline(value))
        yield
    finally:
        for name, value in swapped.items():
            object.__setattr__(op, name, value)


def _floating(tensor: Any) -> bool:
    return "float" in str(getattr(tensor, "dtype", "float32"))


def _refs(value: Any) -> list[tuple]:
    """The ``[name, node, tensor]`` leaves of a nested input/output structure, in the order
    ``keras.tree.flatten`` gives the model's tensors (a dict's by sorted key)."""
    if isinstance(value, (list, tuple)) and len(value) == 3 and isinstance(value[0], str):
        return [tuple(value)]
    items = [value[k] for k in sorted(value)] if isinstance(value, dict) else value
    return [ref for v in items for ref in _refs(v)]


def _resolve(calls: dict, history: Sequence) -> Source:
    name, k, t = history
    produced = calls[(name, k)]
    return (produced, t) if isinstance(produced, str) else produced[t]


def _fill_affine(weights: dict[str, np.ndarray]) -> None:
    """Give a normalization without ``scale``/``center`` its neutral gamma (ones) / beta (zeros)."""
    like = next((weights[k] for k in ("variance", "gamma", "beta") if k in weights), None)
    if like is not None:
        weights.setdefault("gamma", np.ones_like(like))
        weights.setdefault("beta", np.zeros_like(like))
