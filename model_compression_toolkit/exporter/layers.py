"""Per-layer parity of an exported file: the runtime's quantized tensors, layer by layer,
against the quantized model's and the float model's (`core.layer_parity`)::

    batch --> float model (every layer's output)      --\\
          --> quantized model (every layer's output)  ----> LayerAccumulator per layer -> LayerTable
          --> the file in its runtime, tensors exposed --/

The runtime side is a backend's taps class (``pytorch.onnx_taps``, ``keras.tflite_taps``),
imported only when used; formats whose runtime is this library's own model (``.keras``,
TorchScript, float TFLite) get no table.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from model_compression_toolkit.core.deploy import output_names, output_step
from model_compression_toolkit.core.layer_parity import (
    LayerAccumulator,
    LayerTable,
    explain,
    match_layers,
    quantized_layers,
)

# (serialization, quantization) -> (module, class) of the taps reading the runtime's tensors
TAPS = {
    ("ONNX", "FAKELY_QUANT"): ("model_compression_toolkit.pytorch.onnx_taps", "OnnxTaps"),
    ("TFLITE", "INT8"): ("model_compression_toolkit.keras.tflite_taps", "TFLiteTaps"),
}
SUFFIXES = {".onnx": ("ONNX", "FAKELY_QUANT"), ".tflite": ("TFLITE", "INT8")}


def _taps(serialization: str, quantization: str, path: Path, graph: Any) -> Any:
    module, name = TAPS[(serialization, quantization)]
    cls = getattr(importlib.import_module(module), name)
    return cls(path) if serialization == "ONNX" else cls(path, list(graph.inputs), output_names(graph))


def layer_table(
    graph: Any,
    backend: Any,
    path: Path,
    serialization: str,
    quantization: str,
    batches: Sequence[Sequence[Any]],
    runtime: Any = None,
) -> LayerTable | None:
    """The per-layer parity of the file at ``path`` on ``batches`` (module docstring); None
    for a format whose runtime exposes no quantized tensor.

    ``runtime``: the export's own run of the file; its outputs are compared with those of
    the run exposing the tensors, and a note says whether they are the same.
    """
    if (serialization, quantization) not in TAPS or not batches:
        return None
    layers = quantized_layers(graph)
    taps = _taps(serialization, quantization, path, graph)
    tensors = match_layers(layers, taps.points)
    accumulators = {layer.name: LayerAccumulator(layer, tensors.get(layer.name)) for layer in layers}
    names = list(accumulators)
    state: dict[str, dict[str, np.ndarray]] = {"runtime": {}, "float": {}}

    def keep_float(name: str, array: np.ndarray) -> None:
        state["float"][name] = np.array(array, dtype=np.float32)

    def compare(name: str, array: np.ndarray) -> None:
        acc = accumulators[name]
        acc.add(array, state["runtime"].get(acc.tensor or ""), state["float"].pop(name, None))

    floating = backend.build(graph, False, extra_outputs=names, tap=keep_float)
    quantized = backend.build(graph, True, extra_outputs=names, tap=compare)
    steps = [output_step(graph, name) or 0.0 for name, _ in graph.outputs]
    apart = 0.0  # the two runs' outputs, in steps of the output grids (or in values for a float output)
    for batch in batches:
        outputs, state["runtime"] = taps.run(batch, [tensors[n] for n in names if n in tensors])
        if runtime is not None:
            for mine, theirs, step in zip(outputs, runtime.run(batch), steps):
                diff = float(np.max(np.abs(np.asarray(mine, np.float64) - theirs), initial=0.0))
                apart = max(apart, diff / step if step else diff)
        backend.forward(floating, batch)
        backend.forward(quantized, batch)
    table = explain(list(accumulators.values()))
    table.runtime = taps.name
    if runtime is not None:
        table.notes.append(
            f"the run with its tensors exposed gives exactly the outputs of {runtime.name}"
            if apart == 0
            else f"the run with its tensors exposed differs from {runtime.name} by up to {apart:.3g} "
            f"{'steps' if all(steps) else '(steps, or values for a float output)'} in the outputs: "
            "the per-layer figures are of the run with its tensors exposed"
        )
    fused = [row.layer for row in table.rows if row.tensor is None]
    if fused:
        table.notes.append(
            f"{len(fused)} layer(s) have no tensor of their own in the runtime (fused into the op after them): "
            + ", ".join(f"'{n}'" for n in fused[:10])
            + (" ..." if len(fused) > 10 else "")
        )
    return table


def measured(
    graph: Any,
    backend: Any,
    path: Path,
    serialization: str,
    quantization: str,
    batches: Sequence[Sequence[Any]],
    runtime: Any = None,
) -> LayerTable | None:
    """`layer_table` for an export: the file is written and its outputs compared whatever
    happens here, so a failure to read the runtime's tensors becomes a warning and the
    table's note, not a failed export."""
    try:
        return layer_table(graph, backend, path, serialization, quantization, batches, runtime)
    except Exception as err:  # noqa: BLE001 - the runtimes' many error types; the export itself succeeded
        text = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
        warnings.warn(
            f"the per-layer parity of {path.name} could not be measured ({text}); the file is written and its "
            "outputs compared. Please report this with the model.",
            RuntimeWarning,
            stacklevel=4,
        )
        return LayerTable([], notes=[f"not measured: {text}"])
