"""Tables from Keras layers and ``keras.ops`` operations to the neutral `OpKind`.

``Conv2D -> OpKind.CONV``, ``keras.ops.add -> OpKind.ADD``, anything else ->
``OpKind.UNKNOWN``. Layers are matched by their exact public class (a user subclass of
``Conv2D`` may compute something else, so it is unknown); ``keras.ops`` calls, whose
classes are not public, by class name within the ``keras`` package.

Also here: the neutral names and quantization axes of each layer's weights, and the
layer attributes worth showing.
"""

from __future__ import annotations

import inspect
import re
from functools import cache
from typing import Any

import keras
import numpy as np

from model_compression_toolkit.core.graph import OpKind

K = OpKind
_LAYERS: dict[str, OpKind] = {
    **dict.fromkeys(
        [
            "Conv1D",
            "Conv2D",
            "Conv3D",
            "DepthwiseConv1D",
            "DepthwiseConv2D",
            "SeparableConv1D",
            "SeparableConv2D",
        ],
        K.CONV,
    ),
    **dict.fromkeys(["Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose"], K.CONV_TRANSPOSE),
    "Dense": K.DENSE,
    "EinsumDense": K.DENSE,
    "Embedding": K.EMBEDDING,
    "BatchNormalization": K.BATCH_NORM,
    "LayerNormalization": K.LAYER_NORM,
    **dict.fromkeys(["Rescaling", "Normalization"], K.NORMALIZATION),
    **dict.fromkeys(["ReLU", "LeakyReLU", "Activation", "ELU", "PReLU"], K.ACTIVATION),
    "Softmax": K.SOFTMAX,
    "Add": K.ADD,
    "Subtract": K.SUB,
    "Multiply": K.MUL,
    "Concatenate": K.CONCAT,
    **dict.fromkeys(["Average", "Maximum", "Minimum"], K.ELEMENTWISE),
    **dict.fromkeys(
        [
            f"{kind}Pooling{d}D"
            for kind in ("Max", "Average", "GlobalAverage", "GlobalMax")
            for d in (1, 2, 3)
        ],
        K.POOL,
    ),
    **dict.fromkeys([f"{kind}{d}D" for kind in ("ZeroPadding", "Cropping") for d in (1, 2, 3)], K.PAD),
    **dict.fromkeys(["Reshape", "Flatten", "Permute"], K.RESHAPE),
    **dict.fromkeys(["UpSampling1D", "UpSampling2D", "UpSampling3D", "Resizing"], K.RESIZE),
    **dict.fromkeys(
        [
            "Dropout",
            "SpatialDropout1D",
            "SpatialDropout2D",
            "SpatialDropout3D",
            "GaussianDropout",
            "GaussianNoise",
            "AlphaDropout",
        ],
        K.DROPOUT,
    ),
    "Identity": K.IDENTITY,
    "InputLayer": K.INPUT,
}

# keras.ops operation classes (keras.ops.relu(x) is an operation named Relu)
_OP_ACTIVATIONS = frozenset(
    {
        "Relu",
        "Relu6",
        "Sigmoid",
        "Softplus",
        "Softsign",
        "Silu",
        "LeakyRelu",
        "HardSigmoid",
        "HardSilu",
        "Elu",
        "Selu",
        "Gelu",
        "Celu",
        "Tanh",
        "LogSigmoid",
        "HardTanh",
        "Swish",
        "HardSwish",
    }
)
_OPS: dict[str, OpKind] = {
    **dict.fromkeys(_OP_ACTIVATIONS, K.ACTIVATION),
    "Softmax": K.SOFTMAX,
    "Add": K.ADD,
    "Subtract": K.SUB,
    "Multiply": K.MUL,
    **dict.fromkeys(["Maximum", "Minimum", "Divide", "TrueDivide"], K.ELEMENTWISE),
    "Concatenate": K.CONCAT,
    "Stack": K.CONCAT,
    "Mean": K.MEAN,
    **dict.fromkeys(["Reshape", "Transpose", "ExpandDims", "Squeeze", "GetItem", "Slice", "Take"], K.RESHAPE),
    **dict.fromkeys(["TakeAlongAxis", "Split", "Tile", "Repeat", "BroadcastTo", "Flip", "Roll"], K.RESHAPE),
    **dict.fromkeys(["Swapaxes", "Moveaxis", "Flatten", "Cast", "Unstack"], K.RESHAPE),
    **dict.fromkeys(["Einsum", "Matmul", "Dot", "Tensordot"], K.MATMUL),
    "DotProductAttention": K.ATTENTION,
    **dict.fromkeys(["Sqrt", "Rsqrt", "Exp", "Power", "Square", "Negative", "Abs", "Erf"], K.ELEMENTWISE),
}
# Layers outside Keras' public API, by class name in a keras or keras_hub module: lookups
# whose output is an activation, ConvNeXt's per-channel scale, and InceptionResNetV2's
# scaled residual sum (``x + branch * scale``).
_NAMED_LAYERS: dict[str, OpKind] = {
    **dict.fromkeys(["ReversibleEmbedding", "PositionEmbedding", "RotaryEmbedding"], K.EMBEDDING),
    "TokenAndPositionEmbedding": K.EMBEDDING,
    "LayerScale": K.MUL,
    "CustomScaleLayer": K.ADD,
}

# a layer's variable name -> neutral weight name
_DEPTHWISE = {"depthwise_kernel": "kernel"}
_SEPARABLE = {"pointwise_kernel": "kernel", "depthwise_kernel": "depthwise_kernel"}
_WEIGHT_NAMES: dict[str, dict[str, str]] = {
    "DepthwiseConv1D": _DEPTHWISE,
    "DepthwiseConv2D": _DEPTHWISE,
    "SeparableConv1D": _SEPARABLE,
    "SeparableConv2D": _SEPARABLE,
    "BatchNormalization": {"moving_mean": "mean", "moving_variance": "variance"},
}

_SKIPPED_ATTRS = frozenset({"name", "trainable", "dtype", "seed", "batch_shape", "sparse", "ragged"})
_SKIPPED_SUFFIXES = ("_initializer", "_regularizer", "_constraint")


@cache
def _layer_kinds() -> dict[type, OpKind]:
    return {getattr(keras.layers, n): kind for n, kind in _LAYERS.items() if hasattr(keras.layers, n)}


def is_layer(op: Any) -> bool:
    return isinstance(op, keras.layers.Layer)


def snake_case(name: str) -> str:
    """``LeakyRelu -> leaky_relu``, ``Relu6 -> relu6``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def kind_of(op: Any) -> OpKind:
    """The neutral kind of a layer or a ``keras.ops`` operation."""
    if is_layer(op):
        kind = _layer_kinds().get(type(op))
        if kind is None and type(op).__module__.startswith("keras"):
            kind = _NAMED_LAYERS.get(type(op).__name__)
        return kind or K.UNKNOWN
    if type(op).__module__.startswith("keras."):
        return _OPS.get(type(op).__name__, K.UNKNOWN)
    return K.UNKNOWN


def named_layer(op: Any) -> bool:
    """Whether ``op`` is known by its class name only (`_NAMED_LAYERS`): its variables have
    no fixed names, so its weights go by their order."""
    return is_layer(op) and type(op) not in _layer_kinds() and kind_of(op) != K.UNKNOWN


def layer_type(op: Any) -> str:
    """``Conv2D`` for layers, ``add`` for ``keras.ops.add``."""
    return type(op).__name__ if is_layer(op) else snake_case(type(op).__name__)


def activation_function(op: Any, config: dict) -> str | None:
    """The name of the non-linearity an ACTIVATION node computes."""
    name = type(op).__name__
    if not is_layer(op):
        return snake_case(name)
    if name == "ReLU":
        if config.get("negative_slope"):
            return "leaky_relu"
        return "relu6" if config.get("max_value") == 6 and not config.get("threshold") else "relu"
    if name == "Activation":
        return _activation_name(config.get("activation"))
    return {"LeakyReLU": "leaky_relu", "ELU": "elu", "PReLU": "prelu"}.get(name)


def fused_activation(config: dict) -> str | None:
    """The non-linearity a layer applies itself (``Conv2D(activation="relu")``), or None."""
    if "activation" not in config:
        return None
    name = _activation_name(config["activation"])
    return None if name in (None, "linear") else name


def _activation_name(act: Any) -> str | None:
    if act is None or isinstance(act, str):
        return act
    if isinstance(act, dict):  # a serialized function or class
        inner = act.get("config")
        return str(inner if isinstance(inner, str) else act.get("class_name"))
    return getattr(act, "__name__", type(act).__name__)


def weight_names(layer: Any) -> list[str]:
    """Neutral, unique names of ``layer.weights`` in their order (``kernel``, ``bias``, ...)."""
    table = _WEIGHT_NAMES.get(type(layer).__name__, {}) if kind_of(layer) != K.UNKNOWN else {}
    names: list[str] = []
    for i, var in enumerate(getattr(layer, "weights", [])):
        name = table.get(var.name, var.name)
        names.append(name if name not in names else f"{name}_{i}")
    return names


def einsum_axes(equation: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """An EinsumDense kernel's output-channel axes (its letters in the output) and
    input-channel axes (its letters in the input): ``"abc,cde->abde"`` -> ((1, 2), (0,))."""
    inputs, output = equation.replace(" ", "").split("->")
    data, kernel = inputs.split(",")
    return (
        tuple(i for i, c in enumerate(kernel) if c in output),
        tuple(i for i, c in enumerate(kernel) if c in data and c not in output),
    )


def kernel_axes(
    kind: OpKind, class_name: str, weights: dict[str, np.ndarray], config: dict | None = None
) -> dict[str, tuple[int, ...]]:
    """Output-channel axes of the quantizable weights, non-negative.

    Conv (kh, kw, in, out): (3,); depthwise (kh, kw, in, mult): (2, 3);
    transpose (kh, kw, out, in): (2,); Dense (in, out): (1,); EinsumDense: the kernel's
    axes that appear in the output (`einsum_axes`).
    """
    kernel = weights.get("kernel")
    if kind not in (K.CONV, K.CONV_TRANSPOSE, K.DENSE) or kernel is None:
        return {}
    if class_name == "EinsumDense":
        return {"kernel": einsum_axes((config or {})["equation"])[0]}
    nd = kernel.ndim
    if class_name.startswith("Depthwise"):
        return {"kernel": (nd - 2, nd - 1)}
    if kind == K.CONV_TRANSPOSE:
        return {"kernel": (nd - 2,)}
    axes = {"kernel": (nd - 1,)}
    if class_name.startswith("Separable") and "depthwise_kernel" in weights:
        dk = weights["depthwise_kernel"].ndim
        axes = {"depthwise_kernel": (dk - 2, dk - 1), **axes}
    return axes


def kernel_in_axis(
    kind: OpKind, class_name: str, weights: dict[str, np.ndarray], config: dict | None = None
) -> dict[str, int]:
    """Input-channel axis of the kernel, for bias correction: the one before the last.

    Conv (kh, kw, in, out) and depthwise (kh, kw, in, mult): 2; Dense (in, out): 0.
    Empty for transposed and separable convolutions, which bias correction leaves alone,
    and for an EinsumDense, whose output channels need not be the output's last axis.
    """
    kernel = weights.get("kernel")
    if class_name == "EinsumDense":
        return {}
    if (
        kind not in (K.CONV, K.DENSE)
        or kernel is None
        or kernel.ndim < 2
        or class_name.startswith("Separable")
    ):
        return {}
    return {"kernel": kernel.ndim - 2}


_ARITHMETIC = frozenset({K.ADD, K.SUB, K.MUL, K.ELEMENTWISE})


def number_operands(op: Any, args: Any, kwargs: Any) -> dict[str, float]:
    """The numbers a ``keras.ops`` arithmetic call takes, by parameter name:
    ``keras.ops.add(x, 3.0)`` -> ``{"x2": 3.0}``, ``keras.ops.subtract(1.0, x)`` -> ``{"x1": 1.0}``.

    A number is a Python int or float or an array of one element. The graph's patterns
    (`core.composites`: ``relu6(x + 3) / 6``, a scale and shift by numbers) read them there,
    as they read PyTorch's ``x + 3`` (``attrs["b"] = 3``). Empty for layers and other ops.
    """
    if is_layer(op) or kind_of(op) not in _ARITHMETIC:
        return {}
    try:
        names = [n for n in inspect.signature(type(op).call).parameters if n != "self"]
    except (TypeError, ValueError):
        return {}
    bound = dict(zip(names, args if isinstance(args, (list, tuple)) else ()))
    bound.update(kwargs if isinstance(kwargs, dict) else {})
    numbers = {}
    for name, value in bound.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            numbers[name] = float(value)
        elif isinstance(value, (np.ndarray, np.generic)) and value.size == 1 and value.dtype.kind in "fiu":
            numbers[name] = float(np.asarray(value).reshape(()))
    return numbers


def plain_attrs(config: dict) -> dict[str, Any]:
    """The config entries worth showing, as plain values (lists become tuples)."""
    attrs: dict[str, Any] = {}
    for key, value in config.items():
        if key in _SKIPPED_ATTRS or key.endswith(_SKIPPED_SUFFIXES):
            continue
        plain = _plain(value)
        if plain is not None:
            attrs[key] = plain
    return attrs


def _plain(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str)) for v in value):
        return tuple(value)
    return None


def channel_axis(shape: tuple, config: dict) -> int | None:
    """-1 for channels-last tensors of rank >= 2, 1 for ``data_format="channels_first"`` layers."""
    if len(shape) < 2:
        return None
    return 1 if config.get("data_format") == "channels_first" else -1
