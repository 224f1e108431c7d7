"""Every quantized tensor of an exported TFLite file, read out of TensorFlow's interpreter.

``experimental_preserve_all_tensors`` keeps each intermediate tensor after ``invoke``; the
interpreter runs its builtin kernels only, since a delegate (XNNPACK) computes its part of
the graph inside itself and exposes none of it::

    QUANTIZE -> q0 (int8) -> CONV_2D (+ fused ReLU) -> q1 (int8) -> ...
                |                                      |
                read, dequantized with the tensor's own scale and zero point

Each int8 / int16 tensor an op writes is a `TapPoint`, named as the converter names it
(``model_1/re_lu_1/Relu;model_1/conv2d_1/add``: the fused ops' scopes).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from model_compression_toolkit.core.layer_parity import TapPoint
from model_compression_toolkit.keras.export import signature_name

_QUANTIZED = ("int8", "uint8", "int16")


class TFLiteTaps:
    """A TFLite file in the interpreter, every tensor kept.

    Attributes:
        points: the quantized tensors ops write (`TapPoint`), in op order.
        name: the runtime, for the report.
    """

    def __init__(self, path: Path, input_names: Sequence[str], output_names: Sequence[str]) -> None:
        import tensorflow as tf

        with warnings.catch_warnings():  # TensorFlow 2.21 announces the move of its interpreter to LiteRT
            warnings.simplefilter("ignore", UserWarning)
            self.interp = tf.lite.Interpreter(
                model_path=str(path),
                experimental_preserve_all_tensors=True,
                experimental_op_resolver_type=tf.lite.experimental.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
            )
        self.interp.allocate_tensors()
        details = {d["index"]: d for d in self.interp.get_tensor_details()}
        self.points: list[TapPoint] = []
        self._index: dict[str, tuple[int, float, float]] = {}
        for op in self.interp._get_ops_details():  # the interpreter's only listing of its ops
            for i in op.get("outputs", []):
                d = details.get(int(i))
                if d is None or np.dtype(d["dtype"]).name not in _QUANTIZED:
                    continue
                params = d.get("quantization_parameters") or {}
                scales, zeros = (
                    np.asarray(params.get("scales", [])),
                    np.asarray(params.get("zero_points", [0])),
                )
                if scales.size != 1:
                    continue
                name = d["name"] or f"tensor_{d['index']}"
                self._index.setdefault(name, (int(d["index"]), float(scales[0]), float(zeros.ravel()[0])))
                self.points.append(TapPoint(name, float(scales[0]), int(op["index"]), hint=name))
        runner = self.interp.get_signature_runner()
        signature, outputs = runner.get_input_details(), runner.get_output_details()
        self._inputs = [int(signature[signature_name(n)]["index"]) for n in input_names]
        self._outputs = [int(outputs[signature_name(n)]["index"]) for n in output_names]
        self.name = f"TFLite interpreter (TensorFlow {tf.__version__}), builtin kernels, every tensor kept"

    def run(
        self, batch: Sequence[np.ndarray], tensors: Sequence[str]
    ) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
        """The model's outputs on one batch, and the values (dequantized, float32) of ``tensors``."""
        interp: Any = self.interp
        arrays = [np.asarray(x) for x in batch]
        for index, array in zip(self._inputs, arrays, strict=True):
            interp.resize_tensor_input(index, list(array.shape))
        interp.allocate_tensors()
        for index, array in zip(self._inputs, arrays, strict=True):
            dtype = next(d["dtype"] for d in interp.get_input_details() if d["index"] == index)
            interp.set_tensor(index, array.astype(dtype))
        interp.invoke()
        result = {}
        for name in dict.fromkeys(tensors):
            index, scale, zero = self._index[name]
            q = np.asarray(interp.get_tensor(index), dtype=np.float32)
            result[name] = (q - np.float32(zero)) * np.float32(scale)
        return [np.array(interp.get_tensor(i)) for i in self._outputs], result
