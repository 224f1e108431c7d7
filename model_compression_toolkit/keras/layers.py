"""The fake-quantization layer inserted after quantized nodes.

``node -> ActivationFakeQuant(node) -> next``, computing
``(clip(round(x / scale) + zero_point, qmin, qmax) - zero_point) * scale``.

Registered for Keras serialization, so a quantized model saves to ``.keras`` and loads
back with ``keras.models.load_model`` once this module is imported.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np


def _plain(value: Any) -> float | tuple[float, ...]:
    """A scalar or a flat tuple of floats (not a list, which Keras would track)."""
    arr = np.asarray(value, dtype=np.float64)
    return float(arr) if arr.ndim == 0 else tuple(float(v) for v in arr.reshape(-1))


def _serial(value: float | tuple[float, ...]) -> float | list[float]:
    return list(value) if isinstance(value, tuple) else value


@keras.saving.register_keras_serializable(package="model_compression_toolkit")
class ActivationFakeQuant(keras.layers.Layer):
    """Fake-quantizes the output of the node ``node_name`` onto one integer grid.

    Args:
        scale, zero_point: scalars, or one value per channel along ``channel_axis``.
        qmin, qmax: the integer range.
        node_name: the graph node whose output this layer quantizes.
        channel_axis: the axis per-channel parameters run along (ignored for scalars).
    """

    def __init__(
        self,
        scale: Any,
        zero_point: Any,
        qmin: int,
        qmax: int,
        node_name: str,
        channel_axis: int = -1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.supports_masking = True  # elementwise: a mask (keras_hub's padding mask) passes through
        self.scale = _plain(scale)
        self.zero_point = _plain(zero_point)
        self.qmin = int(qmin)
        self.qmax = int(qmax)
        self.node_name = node_name
        self.channel_axis = int(channel_axis)
        self._shifted = bool(np.any(self.zero_point))  # else symmetric: two elementwise passes fewer

    def _param(self, value: float | tuple[float, ...], ndim: int) -> Any:
        arr = np.asarray(value, dtype=self.compute_dtype)
        if arr.ndim == 1 and arr.size > 1:
            shape = [1] * ndim
            shape[self.channel_axis] = arr.size
            arr = arr.reshape(shape)
        return keras.ops.convert_to_tensor(arr, dtype=self.compute_dtype)

    def call(self, x: Any) -> Any:
        ndim = len(x.shape)
        scale = self._param(self.scale, ndim)
        if not self._shifted:
            return keras.ops.clip(keras.ops.round(x / scale), self.qmin, self.qmax) * scale
        zp = self._param(self.zero_point, ndim)
        q = keras.ops.clip(keras.ops.round(x / scale) + zp, self.qmin, self.qmax)
        return (q - zp) * scale

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "scale": _serial(self.scale),
            "zero_point": _serial(self.zero_point),
            "qmin": self.qmin,
            "qmax": self.qmax,
            "node_name": self.node_name,
            "channel_axis": self.channel_axis,
        }
