"""Every quantized activation of an exported ONNX file, read out of onnxruntime.

The file is not changed: a copy of its ModelProto, in memory, gets one more graph output
per activation grid, on the integers its DequantizeLinear reads::

    ... -> QuantizeLinear -> [Clip] -> q (uint8) -> DequantizeLinear -> ...
                                       |
                                       extra graph output: q, dequantized here with the DQ's scale

Reading the integers rather than the DequantizeLinear's float output leaves onnxruntime's
fusions as they are: a fused ``QLinearConv`` still writes ``q``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from model_compression_toolkit.core.layer_parity import TapPoint

_ELEM_TYPES = {"uint8": 2, "int8": 3, "uint16": 4, "int16": 5}


class OnnxTaps:
    """An ONNX file in onnxruntime with its activation integers as extra outputs.

    Attributes:
        points: the tensors that can be read (`TapPoint`), in the file's op order.
        name: the runtime, for the report.
    """

    def __init__(self, path: Path) -> None:
        import onnx
        import onnxruntime as ort
        from onnx import helper, numpy_helper

        model = onnx.load(str(path))  # with its external data: the copy is run from memory
        consts = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
        for node in model.graph.node:
            if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
                consts[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
        producers = {out: node for node in model.graph.node for out in node.output}
        self.outputs = [o.name for o in model.graph.output]
        outputs = set(self.outputs)
        self.points: list[TapPoint] = []
        self._grids: dict[str, tuple[float, float]] = {}
        for index, node in enumerate(model.graph.node):
            if node.op_type != "DequantizeLinear" or node.input[0] in consts:
                continue
            source = producers.get(node.input[0])
            while source is not None and source.op_type == "Clip":
                source = producers.get(source.input[0])
            scale = consts.get(node.input[1])
            zero = (
                consts.get(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros((), np.uint8)
            )
            if source is None or source.op_type != "QuantizeLinear" or scale is None or np.size(scale) != 1:
                continue
            name = node.input[0]
            self.points.append(TapPoint(name, float(scale), index))
            self._grids[name] = (float(scale), float(np.asarray(zero).ravel()[0]))
            if name not in outputs:
                elem = _ELEM_TYPES.get(np.asarray(zero).dtype.name, 2)
                model.graph.output.append(helper.make_tensor_value_info(name, elem, None))
        self.inputs = [i.name for i in model.graph.input if i.name not in consts]
        options = ort.SessionOptions()
        options.log_severity_level = 3
        self.session = ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        self.name = f"onnxruntime {ort.__version__}, the file with its activations as extra outputs"

    def run(
        self, batch: Sequence[np.ndarray], tensors: Sequence[str]
    ) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
        """The model's outputs on one batch, and the values (dequantized, float32) of ``tensors``."""
        feeds = {}
        for name, x in zip(self.inputs, batch, strict=True):
            array = np.asarray(x)
            feeds[name] = array.astype(np.float32) if np.issubdtype(array.dtype, np.floating) else array
        wanted = list(dict.fromkeys(tensors))
        values = self.session.run(self.outputs + wanted, feeds)
        result = {}
        for name, q in zip(wanted, values[len(self.outputs) :]):
            scale, zero = self._grids[name]
            result[name] = (np.asarray(q, dtype=np.float32) - np.float32(zero)) * np.float32(scale)
        return [np.asarray(o) for o in values[: len(self.outputs)]], result
