"""Per-layer parity of an exported file: the runtime's quantized tensors, layer by layer,
against the quantized model's and the float model's (`core.layer_parity`)::

    batch --> float model (every layer's output)      --\\
          --> quantized model (every layer's output)  ----> LayerAccumulator per layer -> LayerTable
          --> the file in its runtime, tensors exposed --/

The runtime side is the `Taps` a `Runtime` gives (``pytorch.onnx_taps``, ``keras.tflite_taps``);
a runtime that runs this library's own model (``.keras``, TorchScript, float TFLite) gives
none, and gets no table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from model_compression_toolkit.core.backend import Backend, Runtime, Taps
from model_compression_toolkit.core.export.grids import output_step
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.layer_parity import (
    LayerAccumulator,
    LayerTable,
    explain,
    match_layers,
    quantized_layers,
)
from model_compression_toolkit.errors import warn_user


def layer_table(
    graph: Graph,
    backend: Backend,
    taps: Taps,
    batches: Sequence[Sequence[Any]],
    runtime: Runtime | None = None,
) -> LayerTable:
    """The per-layer parity of the file ``taps`` runs, on ``batches`` (module docstring).

    ``runtime``: the export's own run of the file; its outputs are compared with those of
    the run exposing the tensors, and a note says whether they are the same.
    """
    layers = quantized_layers(graph)
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
    graph: Graph, backend: Backend, runtime: Runtime, batches: Sequence[Sequence[Any]], file_name: str
) -> LayerTable | None:
    """`layer_table` for an export; None for a runtime without taps or with no batches.

    The file is written and its outputs compared whatever happens here, so a failure to
    read the runtime's tensors becomes a warning and the table's note, not a failed export.
    """
    if not batches:
        return None
    try:
        taps = runtime.taps()
        return None if taps is None else layer_table(graph, backend, taps, batches, runtime)
    except Exception as err:  # noqa: BLE001 - the runtimes' many error types; the export itself succeeded
        text = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
        warn_user(
            f"the per-layer parity of {file_name} could not be measured ({text}); the file is written and its "
            "outputs compared. Please report this with the model.",
            RuntimeWarning,
        )
        return LayerTable([], notes=[f"not measured: {text}"])
