"""The Keras `Exporter`s and `Runtime`s (`core.backend`): int8 TFLite, fake-quant TFLite, ``.keras``.

    TFLiteInt8Exporter      graph -> int8_model -> TFLite converter (int8)  -> TFLiteRuntime (taps: TFLiteTaps)
    TFLiteFakeQuantExporter q_model -> TFLite converter (float)              -> TFLiteRuntime
    KerasExporter           q_model.save(".keras")                          -> KerasRuntime

The models and the conversion are `keras.export`; this module is apart from it because
`keras.tflite_taps` reads that module's signature names, and the runtime hands out taps.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np

from model_compression_toolkit.core.backend import Exporter, Runtime, Taps, Written
from model_compression_toolkit.core.calibration.quantizers import QuantizedWeights
from model_compression_toolkit.core.export.grids import (
    bias_rounding_steps,
    float_tail_notes,
    output_names,
    tflite_int8_problems,
)
from model_compression_toolkit.core.export.report import ExportedGraph
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.errors import ExportError
from model_compression_toolkit.keras.export import (
    INT8_LAYERS,
    convert,
    custom_objects,
    describe_tflite,
    float_islands,
    int8_model,
    interpreter,
    load_quantized,
    run_tflite,
    runtime_version,
    structured,
    write_keras,
)


def _require_tensorflow() -> None:
    if keras.backend.backend() != "tensorflow":
        raise ExportError(
            f"TFLite export needs Keras on the TensorFlow backend; Keras runs on {keras.backend.backend()!r}. "
            "Set KERAS_BACKEND=tensorflow, or export to .keras (KerasExportSerializationFormat.KERAS)."
        )


class _KerasExporter(Exporter):
    """What the Keras exporters share: the graph, the quantized model and its layers."""

    def __init__(self, graph: Graph, q_model: keras.Model) -> None:
        self.graph, self.q_model = graph, q_model

    def layers(self) -> list[tuple[str, Any]]:
        return [(layer.name, layer) for layer in self.q_model.layers]


class TFLiteInt8Exporter(_KerasExporter):
    """Keras -> TFLite with int8 tensors on the library's grids (`keras.export`)."""

    serialization, quantization = "TFLITE", "INT8"
    integer_bias = True  # TFLite adds biases as int32 (`core.export.grids.integer_biases`)

    def __init__(self, graph: Graph, q_model: keras.Model) -> None:
        _require_tensorflow()
        super().__init__(graph, q_model)

    def problems(self) -> list[str]:
        problems = tflite_int8_problems(self.graph)
        for node in self.graph.nodes():
            kernel = node.quant.weights.get("kernel")
            if kernel is not None and kernel.grid is not None and node.layer_type not in INT8_LAYERS:
                why = (
                    "TFLite runs it as a depthwise then a pointwise convolution, and the tensor between them has "
                    "no quantization grid; "
                    if node.layer_type.startswith("Separable")
                    else ""
                )
                problems.append(
                    f"{node.name!r} ({node.layer_type}): {why}int8 TFLite export handles the quantized weights of "
                    f"{', '.join(INT8_LAYERS)} only"
                )
        return problems

    def _model(self) -> keras.Model:
        return int8_model(self.graph)

    def write(self, path: Path, example: Sequence[np.ndarray]) -> Written:
        int8 = self.quantization == "INT8"
        path.write_bytes(convert(self._model(), list(self.graph.inputs), output_names(self.graph), int8))
        if not int8:
            return Written()
        steps = bias_rounding_steps(self.graph, QuantizedWeights(self.graph))
        return Written(
            [
                "TFLite adds each bias as int32 on the scale input x weight; the largest change this makes to a "
                f"bias is {steps:.4f} steps of its layer's output grid",
                *_island_notes(describe_tflite(interpreter(path, delegates=False), path.name)),
                *float_tail_notes(
                    self.graph,
                    "the file runs them in float32 after a DEQUANTIZE, with any weights they have stored as "
                    "float32 values of their grids",
                ),
            ],
            {"bias_rounding_steps": steps},
        )

    def load(self, path: Path) -> Runtime:
        return TFLiteRuntime(
            path, list(self.graph.inputs), output_names(self.graph), self.quantization == "INT8"
        )


def _island_notes(graph: ExportedGraph) -> list[str]:
    """A note naming the layers an int8 file computes in float mid-model (`float_islands`)."""
    islands = float_islands(graph)
    if not islands:
        return []
    layers = [repr(layer) for layer, _ in islands]
    names = ", ".join(layers[:4]) + (f" and {len(layers) - 4} more" if len(layers) > 4 else "")
    types = ", ".join(dict.fromkeys(t for _, kinds in islands for t in kinds))
    return [
        f"the file computes {names} in float32 between a DEQUANTIZE and a QUANTIZE ({types}): TFLite has "
        "no int8 kernel for them as written, so an integer-only delegate hands them back to the CPU; the "
        "quantized model computes them the same way, between the same grids"
    ]


class TFLiteFakeQuantExporter(TFLiteInt8Exporter):
    """Keras -> float TFLite computing the quantized model's fake quantization in float."""

    quantization = "FAKELY_QUANT"
    integer_bias = False

    def problems(self) -> list[str]:
        return []

    def _model(self) -> keras.Model:
        return self.q_model


class TFLiteRuntime(Runtime):
    """An exported TFLite file in TensorFlow's interpreter (XNNPACK on the CPU, as by default);
    an int8 file's taps are `keras.tflite_taps.TFLiteTaps`."""

    def __init__(
        self, path: Path, input_names: list[str], output_names: list[str], int8: bool = True
    ) -> None:
        self.path, self.inputs, self.outputs, self.int8 = path, input_names, output_names, int8
        self.interpreter = interpreter(path)
        self.name = runtime_version()

    def run(self, batch: Sequence[np.ndarray]) -> list[np.ndarray]:
        return run_tflite(self.interpreter, batch, self.inputs, self.outputs)

    def graph(self) -> ExportedGraph:
        plain = interpreter(self.path, delegates=False)
        plain.allocate_tensors()
        return describe_tflite(plain, self.path.name)

    def taps(self) -> Taps | None:
        if not self.int8:  # float TFLite: the quantized model's own fake quantization, no quantized tensor
            return None
        from model_compression_toolkit.keras.tflite_taps import TFLiteTaps

        return TFLiteTaps(self.path, self.inputs, self.outputs)


class KerasExporter(_KerasExporter):
    """Keras -> ``.keras``: the quantized model as it is, loaded back with `keras_load_quantized_model`."""

    serialization, quantization = "KERAS", "FAKELY_QUANT"
    suffix = ".keras"

    def write(self, path: Path, example: Sequence[np.ndarray]) -> Written:
        write_keras(self.q_model, path)
        return Written()

    def load(self, path: Path) -> Runtime:
        return KerasRuntime(path)

    def custom_objects(self) -> dict[str, Any]:
        return dict(custom_objects())


class KerasRuntime(Runtime):
    """A ``.keras`` file loaded back in Keras: this library's own model, so no taps and no graph."""

    def __init__(self, path: Path) -> None:
        self.model = load_quantized(path)
        self.name = f"Keras {keras.__version__} ({keras.backend.backend()})"

    def run(self, batch: Sequence[np.ndarray]) -> list[np.ndarray]:
        args = [keras.ops.convert_to_tensor(x) for x in batch]
        out = self.model(structured(self.model, args), training=False)
        return [keras.ops.convert_to_numpy(t) for t in keras.tree.flatten(out)]
