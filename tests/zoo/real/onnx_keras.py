"""The ONNX models of the real zoo as Keras 3 functional models (issue 30, point 5).

A small ONNX -> Keras builder for exactly the ops of the zoo's four files (nudenet's
YOLOv8n, PP-OCRv4's recognizer and detector, PP-OCR's direction classifier), written with
public Keras layers and ``keras.ops`` calls on Keras tensors -- never a ``Lambda`` layer,
which Keras cannot rebuild safely (nobuco's output; onnx2keras' too)::

    Conv            -> Conv2D / DepthwiseConv2D ('same' where that pads as ONNX does, else
                       ZeroPadding2D then 'valid'); ``conv -> add(per-channel constant)``
                       becomes the conv's bias
    ConvTranspose   -> Conv2DTranspose (an add after it too) BatchNormalization -> BatchNormalization
    Relu, Sigmoid   -> ReLU, Activation         Clip(0, 6) -> ReLU(max_value=6)
    HardSigmoid     -> Activation("hard_sigmoid") (Keras': relu6(x + 3) / 6, slope 1/6; a
                       slope of 0.2 is folded into the conv before it)
    Add/Sub/Mul/Div/Pow/Sqrt, ReduceMean       -> keras.ops (a number stays a number)
    MaxPool/AveragePool/GlobalAveragePool      -> the pooling layers
    Resize (nearest, integer scales)           -> UpSampling2D
    Concat, Split, Slice, Squeeze, Softmax     -> Concatenate, x[a:b] per part, x[...],
                       keras.ops.squeeze, Softmax on the matching axis
    Reshape         -> Reshape (the target read from the model run by onnxruntime)
    MatMul by a constant (+ a constant bias)   -> Dense; MatMul of two tensors -> keras.ops.matmul
    ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div (+ Mul, Add by constants): a layer norm
                       written as ops -> LayerNormalization
    Transpose       -> nothing: the permutation is carried (below) until a tensor must be laid out

Layout: NHWC inside. Every ONNX tensor is a Keras tensor and a permutation ``perm``: ONNX
axis ``i`` is Keras axis ``perm[i]`` (``(0, 3, 1, 2)`` for an NCHW feature map held NHWC).
Axes of concat, split, softmax, slices and reductions are mapped through it, constants are
transposed to it, and a ``Transpose`` only composes it; a tensor is permuted for real
(``Permute`` or ``keras.ops.transpose``) only where an op needs a given layout (a conv, a
reshape, a matmul, an output). The model takes NHWC images; a 4-D output stays NHWC
(``(B, H, W, C)``), others are in the ONNX layout.

Shapes, ``Shape -> Gather -> Concat`` chains and every other value that does not depend on
the input's values (YOLOv8's anchor grid) are taken from onnxruntime, run once on the
model with every tensor as an output, at batch 1 and 2 (a value that changes with the batch
is only accepted as a reshape's target).

The ops that move or reduce axes are in `tests.zoo.real.onnx_keras_layout` (a mixin).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from tests.zoo.real.onnx_keras_layout import NHWC, LayoutOps, UnsupportedOnnx, Value, _attrs, _identity
from tests.zoo.real.onnx_models import constants_to_initializers, load_onnx


def probe(model: onnx.ModelProto, shape: tuple[int, ...], seed: int = 0) -> dict[str, np.ndarray]:
    """Every tensor of ``model`` run by onnxruntime on a random input of ``shape``."""
    import onnxruntime

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    known = {o.name for o in copy.graph.output}
    names = [o for node in copy.graph.node for o in node.output if o and o not in known]
    copy.graph.output.extend(onnx.ValueInfoProto(name=name) for name in names)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        copy.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    outputs = [o.name for o in session.get_outputs()]
    return dict(zip(outputs, session.run(outputs, {model.graph.input[0].name: x})))


class _Builder(LayoutOps):
    def __init__(self, model: onnx.ModelProto, shape: tuple[int, ...]) -> None:
        import keras

        self.keras = keras
        self.model = model
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in model.graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.values: dict[str, Any] = {}  # ONNX name -> Value (depends on the input) or np.ndarray
        for init in model.graph.initializer:
            self.values[init.name] = numpy_helper.to_array(init)
        self.run1 = probe(model, (1, *shape[1:]))
        self.run2 = probe(model, (2, *shape[1:]))
        self.skip: set[str] = set()  # nodes folded into another
        self.prescaled: set[str] = set()  # HardSigmoids whose slope was folded into their conv
        self.names: set[str] = set()
        self.batch_dependent: set[str] = set()  # constants whose value changes with the batch
        self.shape = shape

    # ------------------------------------------------------------ helpers
    def name(self, node: onnx.NodeProto, suffix: str = "") -> str:
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", (node.name or node.output[0]).strip("/")) + suffix
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name

    def static(self, name: str) -> np.ndarray | None:
        value = self.values.get(name)
        return value if isinstance(value, np.ndarray) else None

    def dynamic(self, name: str) -> Value:
        value = self.values[name]
        if not isinstance(value, Value):
            raise UnsupportedOnnx(f"expected {name!r} to depend on the input; it is a constant")
        return value

    def only_consumer(self, name: str) -> onnx.NodeProto | None:
        users = self.consumers.get(name, [])
        outputs = {o.name for o in self.model.graph.output}
        return users[0] if len(users) == 1 and name not in outputs else None

    def laid_out(self, value: Value, target: tuple[int, ...]) -> Any:
        """``value``'s tensor permuted so that ONNX axis ``i`` is its axis ``target[i]``."""
        axes = [0] * value.rank
        for i, t in enumerate(target):
            axes[t] = value.perm[i]
        if axes == list(range(value.rank)):
            return value.tensor
        if axes[0] == 0:
            return self.keras.layers.Permute(tuple(a for a in axes[1:]))(value.tensor)
        return self.keras.ops.transpose(value.tensor, axes)

    def constant_for(self, c: np.ndarray, like: Value) -> Any:
        """A constant operand in ``like``'s layout: a number, or an array broadcast to it."""
        c = np.asarray(c, np.float32)
        if c.size == 1:
            return float(c.reshape(()))
        if c.ndim > like.rank:
            raise UnsupportedOnnx(f"a constant of shape {c.shape} against a tensor of rank {like.rank}")
        c = c.reshape((1,) * (like.rank - c.ndim) + c.shape)
        axes = [0] * like.rank
        for i, p in enumerate(like.perm):
            axes[p] = i
        return np.ascontiguousarray(c.transpose(axes))

    def set_static(self, node: onnx.NodeProto) -> None:
        for out in node.output:
            a, b = self.run1[out], self.run2[out]
            self.values[out] = a
            if np.shape(a) != np.shape(b) or not np.array_equal(a, b):
                self.batch_dependent.add(out)

    # ------------------------------------------------------------ the walk
    def build(self) -> Any:
        keras = self.keras
        graph = self.model.graph
        x = graph.input[0]
        _, c, h, w = self.shape
        inputs = keras.Input((h, w, c), name=re.sub(r"[^A-Za-z0-9_]", "_", x.name))
        self.values[x.name] = Value(inputs, NHWC)
        dynamic = []
        for node in graph.node:  # the constants first: a conv's bias may come later in the file
            ins = [n for n in node.input if n]
            if node.op_type == "Shape" or all(isinstance(self.values.get(n), np.ndarray) for n in ins):
                self.set_static(node)
            else:
                dynamic.append(node)
        for node in dynamic:
            if node.output[0] in self.skip:
                continue
            handler = getattr(self, f"op_{node.op_type}", None)
            if handler is None:
                raise UnsupportedOnnx(f"ONNX op {node.op_type} ({node.name}) has no Keras conversion here")
            handler(node)
        outputs = []
        for out in graph.output:
            value = self.dynamic(out.name)
            target = NHWC if value.rank == 4 else _identity(value.rank)
            outputs.append(self.laid_out(value, target))
        return keras.Model(
            inputs, outputs if len(outputs) > 1 else outputs[0], name=self.model.graph.name or "onnx"
        )

    # ------------------------------------------------------------ convolutions
    def _padding(self, node, attrs, kernel, value_tensor):
        pads = list(attrs.get("pads", [0, 0, 0, 0]))
        strides = tuple(attrs.get("strides", [1, 1]))
        if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise UnsupportedOnnx(f"{node.name}: auto_pad")
        if not any(pads):
            return "valid", value_tensor
        same = all(s == 1 for s in strides) and all(k % 2 == 1 for k in kernel)
        if same and pads == [(kernel[0] - 1) // 2, (kernel[1] - 1) // 2] * 2:
            return "same", value_tensor
        padded = self.keras.layers.ZeroPadding2D(
            ((pads[0], pads[2]), (pads[1], pads[3])), name=self.name(node, "_pad")
        )
        return "valid", padded(value_tensor)

    def _bias_after(self, out: str, channels: int, bias: np.ndarray | None) -> tuple[np.ndarray | None, str]:
        """``conv -> add(per-channel constant)`` (PaddlePaddle exports a conv's bias so): the
        add becomes the conv's bias; (the bias, the add's output), or (``bias``, ``out``)."""
        add = self.only_consumer(out)
        if add is None or add.op_type != "Add":
            return bias, out
        other = [n for n in add.input if n != out]
        c = self.static(other[0]) if len(other) == 1 else None
        if c is None or not (
            c.size == 1 or (3 <= c.ndim <= 4 and c.size == channels and c.shape[-3] == channels)
        ):
            return bias, out
        self.skip.add(add.output[0])
        total = (bias if bias is not None else 0.0) + np.broadcast_to(c.reshape(-1), (channels,))
        return total.astype(np.float32), add.output[0]

    def op_Conv(self, node):
        keras = self.keras
        attrs = _attrs(node)
        weight = self.static(node.input[1])
        bias = self.static(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if tuple(attrs.get("dilations", [1, 1])) != (1, 1):
            raise UnsupportedOnnx(f"{node.name}: dilated conv")
        out_c, in_per_group, kh, kw = weight.shape
        groups = attrs.get("group", 1)
        out = node.output[0]
        bias, out = self._bias_after(out, out_c, bias)
        # a hard-sigmoid of slope a != 1/6 after it: the conv scaled by 6a, then Keras' hard_sigmoid
        hs = self.only_consumer(out)
        if hs is not None and hs.op_type == "HardSigmoid":
            a = _attrs(hs)
            alpha, beta = a.get("alpha", 0.2), a.get("beta", 0.5)
            if not np.isclose(alpha, 1 / 6, rtol=1e-5) and np.isclose(beta, 0.5):
                weight = weight * (6 * alpha)
                bias = None if bias is None else bias * (6 * alpha)
                self.prescaled.add(hs.output[0])
        value = self.dynamic(node.input[0])
        padding, tensor = self._padding(node, attrs, (kh, kw), self.laid_out(value, NHWC))
        strides = tuple(attrs.get("strides", [1, 1]))
        in_c = in_per_group * groups
        use_bias = bias is not None
        if groups == 1:
            layer = keras.layers.Conv2D(
                out_c, (kh, kw), strides, padding, use_bias=use_bias, name=self.name(node)
            )
            kernel = weight.transpose(2, 3, 1, 0)
        elif in_per_group == 1 and groups == in_c:
            layer = keras.layers.DepthwiseConv2D(
                (kh, kw),
                strides,
                padding,
                depth_multiplier=out_c // in_c,
                use_bias=use_bias,
                name=self.name(node),
            )
            kernel = weight.reshape(in_c, out_c // in_c, kh, kw).transpose(2, 3, 0, 1)
        else:
            layer = keras.layers.Conv2D(
                out_c, (kh, kw), strides, padding, groups=groups, use_bias=use_bias, name=self.name(node)
            )
            kernel = weight.transpose(2, 3, 1, 0)
        y = layer(tensor)
        layer.set_weights([kernel, bias.astype(np.float32)] if use_bias else [kernel])
        self.values[out] = Value(y, NHWC)

    def op_ConvTranspose(self, node):
        attrs = _attrs(node)
        weight = self.static(node.input[1])
        bias = self.static(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if any(attrs.get("pads", [0])) or attrs.get("group", 1) != 1 or any(attrs.get("output_padding", [0])):
            raise UnsupportedOnnx(f"{node.name}: padded, grouped or output-padded ConvTranspose")
        in_c, out_c, kh, kw = weight.shape
        bias, out = self._bias_after(node.output[0], out_c, bias)
        layer = self.keras.layers.Conv2DTranspose(
            out_c,
            (kh, kw),
            tuple(attrs.get("strides", [1, 1])),
            "valid",
            use_bias=bias is not None,
            name=self.name(node),
        )
        y = layer(self.laid_out(self.dynamic(node.input[0]), NHWC))
        kernel = weight.transpose(2, 3, 1, 0)
        layer.set_weights([kernel, bias] if bias is not None else [kernel])
        self.values[out] = Value(y, NHWC)

    def op_BatchNormalization(self, node):
        value = self.dynamic(node.input[0])
        scale, shift, mean, var = (self.static(n) for n in node.input[1:5])
        layer = self.keras.layers.BatchNormalization(
            axis=value.perm[1], epsilon=float(_attrs(node).get("epsilon", 1e-5)), name=self.name(node)
        )
        y = layer(value.tensor, training=False)
        layer.set_weights([scale, shift, mean, var])
        self.values[node.output[0]] = Value(y, value.perm)

    # ------------------------------------------------------------ activations
    def _unary_layer(self, node, layer):
        value = self.dynamic(node.input[0])
        self.values[node.output[0]] = Value(layer(value.tensor), value.perm)

    def op_Relu(self, node):
        self._unary_layer(node, self.keras.layers.ReLU(name=self.name(node)))

    def op_Sigmoid(self, node):
        self._unary_layer(node, self.keras.layers.Activation("sigmoid", name=self.name(node)))

    def op_HardSigmoid(self, node):
        a = _attrs(node)
        if node.output[0] not in self.prescaled and not (
            np.isclose(a.get("alpha", 0.2), 1 / 6, rtol=1e-5) and np.isclose(a.get("beta", 0.5), 0.5)
        ):
            raise UnsupportedOnnx(f"{node.name}: HardSigmoid(alpha={a.get('alpha')}) not after a conv")
        self._unary_layer(node, self.keras.layers.Activation("hard_sigmoid", name=self.name(node)))

    def op_Clip(self, node):
        low, high = (self.static(n) if n else None for n in (list(node.input) + ["", ""])[1:3])
        a = _attrs(node)
        low = float(low) if low is not None else a.get("min")
        high = float(high) if high is not None else a.get("max")
        if low != 0.0 or high != 6.0:
            raise UnsupportedOnnx(f"{node.name}: Clip({low}, {high})")
        self._unary_layer(node, self.keras.layers.ReLU(max_value=6.0, name=self.name(node)))

    def op_Softmax(self, node):
        value = self.dynamic(node.input[0])
        axis = _attrs(node).get("axis", -1) % value.rank
        self._unary_layer(node, self.keras.layers.Softmax(axis=value.perm[axis], name=self.name(node)))

    def op_Identity(self, node):
        self.values[node.output[0]] = self.values[node.input[0]]

    def op_Sqrt(self, node):
        value = self.dynamic(node.input[0])
        self.values[node.output[0]] = Value(self.keras.ops.sqrt(value.tensor), value.perm)

    # ------------------------------------------------------------ elementwise
    def _binary(self, node, function):
        a, b = (self.values[n] for n in node.input[:2])
        if isinstance(a, Value) and isinstance(b, Value):
            if a.rank != b.rank:
                raise UnsupportedOnnx(f"{node.name}: broadcast between ranks {a.rank} and {b.rank}")
            perm = a.perm
            y = function(a.tensor, self.laid_out(b, perm))
        elif isinstance(a, Value):
            perm, y = a.perm, function(a.tensor, self.constant_for(b, a))
        else:
            perm, y = b.perm, function(self.constant_for(a, b), b.tensor)
        for n in node.input[:2]:
            if n in self.batch_dependent:
                raise UnsupportedOnnx(f"{node.name}: operand {n} depends on the batch size")
        self.values[node.output[0]] = Value(y, perm)

    def op_Add(self, node):
        self._binary(node, self.keras.ops.add)

    def op_Sub(self, node):
        self._binary(node, self.keras.ops.subtract)

    def op_Mul(self, node):
        self._binary(node, self.keras.ops.multiply)

    def op_Div(self, node):
        self._binary(node, self.keras.ops.divide)

    def op_Pow(self, node):
        self._binary(node, self.keras.ops.power)

    # ------------------------------------------------------------ pooling, resizing
    def op_GlobalAveragePool(self, node):
        value = self.dynamic(node.input[0])
        layer = self.keras.layers.GlobalAveragePooling2D(keepdims=True, name=self.name(node))
        self.values[node.output[0]] = Value(layer(self.laid_out(value, NHWC)), NHWC)

    def _pool(self, node, layer_class):
        a = _attrs(node)
        kernel, strides = tuple(a["kernel_shape"]), tuple(a.get("strides", [1, 1]))
        pads = list(a.get("pads", [0, 0, 0, 0]))
        if a.get("ceil_mode", 0) or tuple(a.get("dilations", [1, 1])) != (1, 1):
            raise UnsupportedOnnx(f"{node.name}: ceil mode or dilation")
        if not any(pads):
            padding = "valid"
        elif (
            all(s == 1 for s in strides)
            and pads == [(kernel[0] - 1) // 2, (kernel[1] - 1) // 2] * 2
            and layer_class == "MaxPooling2D"
        ):
            padding = "same"  # TensorFlow pads a max pool with -inf, as ONNX does
        else:
            raise UnsupportedOnnx(f"{node.name}: pads {pads}")
        layer = getattr(self.keras.layers, layer_class)(kernel, strides, padding, name=self.name(node))
        self.values[node.output[0]] = Value(layer(self.laid_out(self.dynamic(node.input[0]), NHWC)), NHWC)

    def op_MaxPool(self, node):
        self._pool(node, "MaxPooling2D")

    def op_AveragePool(self, node):
        self._pool(node, "AveragePooling2D")

    def op_Resize(self, node):
        a = _attrs(node)
        mode = a.get("mode", b"nearest")
        if mode not in (b"nearest", "nearest"):
            raise UnsupportedOnnx(f"{node.name}: Resize mode {mode}")
        value = self.dynamic(node.input[0])
        scales = self.static(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if scales is None or scales.size == 0:
            sizes = self.static(node.input[3])
            scales = sizes / np.array(self.run1[node.input[0]].shape)
        if scales[0] != 1 or scales[1] != 1 or any(s != int(s) for s in scales[2:]):
            raise UnsupportedOnnx(f"{node.name}: Resize scales {scales}")
        layer = self.keras.layers.UpSampling2D(
            (int(scales[2]), int(scales[3])), interpolation="nearest", name=self.name(node)
        )
        self.values[node.output[0]] = Value(layer(self.laid_out(value, NHWC)), NHWC)


def to_keras(name: str, input_shape: tuple[int, ...]) -> Any:
    """Model ``name`` of `tests.zoo.real.wheels.FILES` (an ONNX file) as a Keras 3 functional
    model taking NHWC images of ``input_shape``'s (N, C, H, W) size (any batch size)."""
    model = constants_to_initializers(load_onnx(name))
    return _Builder(model, input_shape).build()


def onnx_outputs(name: str, x_nchw: np.ndarray) -> list[np.ndarray]:
    """The ONNX file's outputs on ``x_nchw`` in onnxruntime (one thread)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    model = load_onnx(name)
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, {model.graph.input[0].name: x_nchw.astype(np.float32)})
