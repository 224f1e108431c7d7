"""The layout half of tests/zoo/real/onnx_keras.py: the ONNX tensor as a Keras tensor and
a permutation (`Value`), and the ops that move axes (concat, split, slices, squeeze,
reshape, transpose), reduce them (ReduceMean, a layer norm written as ops) or multiply
tensors (MatMul), as a mixin of its builder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper

NHWC = (0, 3, 1, 2)  # ONNX NCHW axis i -> Keras NHWC axis NHWC[i]


class UnsupportedOnnx(NotImplementedError):
    """An ONNX op (or a use of one) this builder does not convert."""


@dataclass
class Value:
    """An ONNX tensor as a Keras tensor: ONNX axis ``i`` is axis ``perm[i]`` of ``tensor``."""

    tensor: Any
    perm: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.perm)


def _identity(rank: int) -> tuple[int, ...]:
    return tuple(range(rank))


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _drop(perm: tuple[int, ...], axes: list[int]) -> tuple[int, ...]:
    """``perm`` without ONNX ``axes`` (and their Keras axes), renumbered."""
    gone = sorted(perm[a] for a in axes)
    return tuple(p - sum(g < p for g in gone) for i, p in enumerate(perm) if i not in axes)


class LayoutOps:
    """The op handlers of `tests.zoo.real.onnx_keras._Builder` that move or reduce axes.
    They use the builder's ``keras``, ``values``, ``consumers``, ``run1`` (every tensor at
    batch 1), ``skip`` and its helpers (``dynamic``, ``static``, ``laid_out``, ``name``,
    ``only_consumer``)."""

    # ------------------------------------------------------------ reductions
    def _layer_norm(self, mean: onnx.NodeProto) -> tuple[str, float, list[str]] | None:
        """``x -> mean -> sub(x, .) = d -> pow(d, 2) -> mean -> add(eps) -> sqrt -> div(d, .)``
        (PaddlePaddle's layer norm, exported op by op): (the div's output, eps, the nodes'
        outputs), or None."""
        x = mean.input[0]
        users = self.consumers.get(mean.output[0], [])
        if len(users) != 1 or users[0].op_type != "Sub" or list(users[0].input) != [x, mean.output[0]]:
            return None
        d = users[0].output[0]
        kinds = {u.op_type: u for u in self.consumers.get(d, [])}
        if sorted(kinds) != ["Div", "Pow"] or len(self.consumers[d]) != 2:
            return None
        chain, node = [], kinds["Pow"]
        for op_type in ("Pow", "ReduceMean", "Add", "Sqrt", "Div"):
            if node is None or node.op_type != op_type:
                return None
            chain.append(node)
            node = self.only_consumer(node.output[0])
        pow_, mean2, add, _, div = chain
        eps = [self.static(n) for n in add.input if n != mean2.output[0]]
        two = self.static(pow_.input[1])
        if div is not kinds["Div"] and div.output[0] != kinds["Div"].output[0]:
            return None
        if two is None or float(two) != 2.0 or len(eps) != 1 or eps[0] is None or eps[0].size != 1:
            return None
        axes = [_attrs(n).get("axes") for n in (mean, mean2)]
        if axes[0] != [-1] or axes[1] != [-1] or list(div.input) != [d, chain[3].output[0]]:
            return None
        return div.output[0], float(eps[0].reshape(())), [users[0].output[0], *(n.output[0] for n in chain)]

    def _scale_or_shift(self, name: str, op_type: str, size: int) -> tuple[np.ndarray, str] | None:
        """(the constant, the output) when ``name``'s only use multiplies or adds a constant
        of ``size`` values along the last axis."""
        node = self.only_consumer(name)
        if node is None or node.op_type != op_type:
            return None
        others = [n for n in node.input if n != name]
        c = self.static(others[0]) if len(others) == 1 else None
        if c is None or c.size != size or c.shape[-1] != size:
            return None
        return c.reshape(-1).astype(np.float32), node.output[0]

    def op_ReduceMean(self, node):
        value = self.dynamic(node.input[0])
        norm = self._layer_norm(node)
        if norm is not None and value.perm[-1] == value.rank - 1:  # -> LayerNormalization
            out, eps, inner = norm
            size = self.run1[node.input[0]].shape[-1]
            gamma, beta = np.ones(size, np.float32), np.zeros(size, np.float32)
            scaled = self._scale_or_shift(out, "Mul", size)
            if scaled is not None:
                gamma, out = scaled[0], scaled[1]
                inner.append(out)
                shifted = self._scale_or_shift(out, "Add", size)
                if shifted is not None:
                    beta, out = shifted[0], shifted[1]
                    inner.append(out)
            layer = self.keras.layers.LayerNormalization(
                axis=-1, epsilon=eps, name=self.name(node, "_layer_norm")
            )
            y = layer(value.tensor)
            layer.set_weights([gamma, beta])
            self.skip.update(inner)
            self.values[out] = Value(y, value.perm)
            return
        a = _attrs(node)
        axes = a.get("axes", list(range(value.rank)))
        keep = bool(a.get("keepdims", 1))
        k_axes = tuple(sorted(value.perm[ax % value.rank] for ax in axes))
        y = self.keras.ops.mean(value.tensor, axis=k_axes, keepdims=keep)
        perm = value.perm if keep else _drop(value.perm, [ax % value.rank for ax in axes])
        self.values[node.output[0]] = Value(y, perm)

    # ------------------------------------------------------------ layout
    def op_Concat(self, node):
        parts = [self.dynamic(n) for n in node.input]
        first = parts[0]
        axis = _attrs(node)["axis"] % first.rank
        tensors = [first.tensor] + [self.laid_out(p, first.perm) for p in parts[1:]]
        layer = self.keras.layers.Concatenate(axis=first.perm[axis], name=self.name(node))
        self.values[node.output[0]] = Value(layer(tensors), first.perm)

    def op_Split(self, node):
        """One slice per part (``x[..., a:b]``), not ``keras.ops.split``: a node with one
        output per part keeps every part its own node, as onnx2torch's getitems do."""
        value = self.dynamic(node.input[0])
        axis = _attrs(node).get("axis", 0) % value.rank
        start = 0
        for out in node.output:
            size = self.run1[out].shape[axis]
            index = [slice(None)] * value.rank
            index[value.perm[axis]] = slice(start, start + size)
            self.values[out] = Value(value.tensor[tuple(index)], value.perm)
            start += size

    def op_Transpose(self, node):
        value = self.dynamic(node.input[0])
        order = _attrs(node).get("perm", list(reversed(range(value.rank))))
        self.values[node.output[0]] = Value(value.tensor, tuple(value.perm[i] for i in order))

    def op_Slice(self, node):
        value = self.dynamic(node.input[0])
        starts, ends = self.static(node.input[1]), self.static(node.input[2])
        axes = self.static(node.input[3]) if len(node.input) > 3 and node.input[3] else range(len(starts))
        steps = self.static(node.input[4]) if len(node.input) > 4 and node.input[4] else [1] * len(starts)
        shape = self.run1[node.input[0]].shape
        index = [slice(None)] * value.rank
        for start, end, axis, step in zip(starts, ends, axes, steps):
            axis = int(axis) % value.rank
            if value.perm[axis] == 0:
                raise UnsupportedOnnx(f"{node.name}: a slice of the batch axis")
            size = shape[axis]
            start, end = int(max(min(start, size), -size)), int(max(min(end, size), -size - 1))
            index[value.perm[axis]] = slice(start, end, int(step))
        self.values[node.output[0]] = Value(value.tensor[tuple(index)], value.perm)

    def op_Squeeze(self, node):
        value = self.dynamic(node.input[0])
        axes = _attrs(node).get("axes")
        if axes is None:
            axes = self.static(node.input[1]).tolist()
        axes = [a % value.rank for a in axes]
        y = self.keras.ops.squeeze(value.tensor, axis=tuple(sorted(value.perm[a] for a in axes)))
        self.values[node.output[0]] = Value(y, _drop(value.perm, axes))

    def op_Reshape(self, node):
        value = self.dynamic(node.input[0])
        out1, out2 = self.run1[node.output[0]].shape, self.run2[node.output[0]].shape
        if out1[0] != 1 or out2[0] != 2 or out1[1:] != out2[1:]:
            raise UnsupportedOnnx(f"{node.name}: a reshape that moves the batch ({out1} at batch 1)")
        keras = self.keras
        source = self.run1[node.input[0]].shape
        kept = [d for d in source[1:] if d != 1]
        order = [value.perm[i] for i in range(1, value.rank) if source[i] != 1]
        name = self.name(node)
        if kept == [d for d in out1[1:] if d != 1] and order == sorted(order):
            # only axes of size 1 come or go, and the others are in the same order: no transpose
            y = keras.layers.Reshape(tuple(out1[1:]), name=name)(value.tensor)
            self.values[node.output[0]] = Value(y, _identity(len(out1)))
        elif (
            value.perm == NHWC
            and len(out1) == 3
            and out1[1] == source[1]
            and out1[2] == source[2] * source[3]
        ):
            # (B, C, H, W) -> (B, C, H * W) is (B, H, W, C) -> (B, H * W, C) transposed
            y = keras.layers.Reshape((out1[2], out1[1]), name=name)(value.tensor)
            self.values[node.output[0]] = Value(y, (0, 2, 1))
        else:
            tensor = self.laid_out(value, _identity(value.rank))
            y = keras.layers.Reshape(tuple(out1[1:]), name=name)(tensor)
            self.values[node.output[0]] = Value(y, _identity(len(out1)))

    # ------------------------------------------------------------ products
    def op_MatMul(self, node):
        keras = self.keras
        a, b = self.values[node.input[0]], self.values[node.input[1]]
        if isinstance(a, Value) and isinstance(b, np.ndarray) and b.ndim == 2:
            out = node.output[0]
            bias = None
            add = self.only_consumer(out)
            if add is not None and add.op_type == "Add":
                other = [n for n in add.input if n != out]
                c = self.static(other[0]) if len(other) == 1 else None
                if c is not None and c.size == b.shape[1] and c.shape[-1] == b.shape[1]:
                    bias = c.reshape(-1).astype(np.float32)
                    self.skip.add(add.output[0])
                    out = add.output[0]
            layer = keras.layers.Dense(b.shape[1], use_bias=bias is not None, name=self.name(node))
            y = layer(self.laid_out(a, _identity(a.rank)))
            layer.set_weights([b, bias] if bias is not None else [b])
            self.values[out] = Value(y, _identity(a.rank))
            return
        if not (isinstance(a, Value) and isinstance(b, Value)) or a.rank != b.rank:
            raise UnsupportedOnnx(f"{node.name}: MatMul of these operands")
        # the batch axes stay where a holds them; the last two axes are the product's
        target = tuple(a.perm[:-2]) + (a.rank - 2, a.rank - 1)
        if sorted(a.perm[:-2]) != list(range(a.rank - 2)):
            target = _identity(a.rank)
        y = keras.ops.matmul(self.laid_out(a, target), self.laid_out(b, target))
        self.values[node.output[0]] = Value(y, target)
