"""The export step: write the quantized model as a file, run the file, compare it, report it.

    exporter.write -> staging folder/file -> exporter.load -> Runtime
        -> outputs: runtime vs quantized model (and its floor, its int32 biases)   `core.export.report`
        -> layers: the runtime's tensors vs the quantized model's                  `pipeline.export_layers`
        -> move into place -> observer.export_finished(ExportReport)

The file is written and checked in a hidden folder beside the destination, then moved into
place, so a failure at any step leaves nothing at the destination. The step never asks
whether logging is on: the observer it is given writes the export run (`observers`), or
does nothing.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from model_compression_toolkit.core.backend import Backend, Exporter, Runtime
from model_compression_toolkit.core.calibration.quantizers import QuantizedWeights
from model_compression_toolkit.core.data import RepresentativeData
from model_compression_toolkit.core.export.grids import (
    integer_biases,
    output_names,
    output_step,
    synthetic_batch,
)
from model_compression_toolkit.core.export.report import (
    ExportReport,
    OutputParity,
    compare_outputs,
    parity_warning,
    perturbed,
)
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.errors import ExportError, ExportPathError, warn_user
from model_compression_toolkit.pipeline.events import Observer
from model_compression_toolkit.pipeline.export_layers import measured

LOG = logging.getLogger("model_compression_toolkit")
SYNTHETIC_SAMPLES = 16  # samples drawn from the input grids when no data is given

Batch = Sequence[np.ndarray]


def comparison_batches(
    graph: Graph, backend: Backend, model: Any, repr_dataset: Any, samples: int
) -> tuple[list[Batch], str]:
    """The batches the file is compared on, and where they came from (for the report):
    the first ``samples`` samples of ``repr_dataset``, or samples drawn from each input's
    grid when it is None; none when the inputs' shapes are not fully known."""
    if repr_dataset is not None:
        data = RepresentativeData(repr_dataset, backend, model)
        batches: list[Batch] = list(data.samples(samples))
        n = sum(len(b[0]) for b in batches)
        return batches, f"the first {n} samples of repr_dataset"
    batch = synthetic_batch(graph, SYNTHETIC_SAMPLES)
    if batch is None:
        return [], "none: the inputs' shapes are not fully known; pass repr_dataset= to compare"
    return [batch], (
        f"{SYNTHETIC_SAMPLES} synthetic samples drawn uniformly from each input's quantization grid "
        "(pass repr_dataset= to compare on representative data)"
    )


@contextmanager
def staging(path: Path) -> Iterator[Path]:
    """A new hidden folder beside ``path``, removed on exit: the file is written and checked
    there, then moved into place (`move_into_place`), so a failure leaves nothing at ``path``."""
    try:
        folder = Path(tempfile.mkdtemp(prefix=".mct-export-", dir=path.parent))
    except OSError as exc:
        raise ExportPathError(
            f"cannot write into {path.parent}: {exc.strerror or exc}. Choose a writable folder."
        ) from exc
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def move_into_place(folder: Path, path: Path) -> None:
    """Move what was written in the staging folder into ``path``'s folder."""
    for item in sorted(folder.iterdir()):
        if item.is_file():
            os.replace(item, path.parent / item.name)


def _bytes(folder: Path) -> int:
    """The size of everything written into the staging folder: the file and any side file
    (ONNX's external data)."""
    return sum(item.stat().st_size for item in folder.iterdir() if item.is_file())


def output_parity(
    graph: Graph, backend: Backend, model: Any, runtime: Runtime, batches: Sequence[Batch], integer_bias: bool
) -> list[OutputParity]:
    """Each output of the runtime against the quantized model's, with the floor (the quantized
    model with float32 rounding noise, `Runtime.floor_model`, or on noisy inputs) and, for
    runtimes adding int32 biases, the quantized model with those biases."""
    if not batches:
        return []
    names = output_names(graph)
    steps = [output_step(graph, name) for name, _ in graph.outputs]
    rounded = (
        backend.build(graph, True, weights=integer_biases(graph, QuantizedWeights(graph)))
        if integer_bias
        else None
    )
    jittered = runtime.floor_model()
    reference, exported, floor, biased = [], [], [], []
    for index, batch in enumerate(batches):
        ref, out = backend.forward(model, batch), runtime.run(batch)
        if len(ref) != len(out) or len(ref) != len(names):
            raise ExportError(
                f"the exported model returns {len(out)} outputs and the quantized model {len(ref)} "
                f"(expected {len(names)}); the file cannot be compared. This is a bug: please report it."
            )
        reference.append(ref)
        exported.append(out)
        if jittered is not None:
            floor.append(backend.forward(jittered, batch))
        else:
            floor.append(backend.forward(model, perturbed(batch, seed=index)))
        if rounded is not None:
            biased.append(backend.forward(rounded, batch))
    return compare_outputs(names, reference, exported, steps, floor, biased if rounded is not None else None)


def export(
    exporter: Exporter,
    backend: Backend,
    model: Any,
    graph: Graph,
    path: Path,
    batches: Sequence[Batch],
    data: str,
    observer: Observer,
) -> ExportReport:
    """Write ``model`` (built from ``graph``) at ``path`` with ``exporter``, compare the file
    with it on ``batches`` (described by ``data``), and tell ``observer`` (module docstring).

    Every check of the arguments is done before (the facades in ``exporter``); the
    exporter's own checks (`Exporter.problems`) too.
    """
    example = list(batches[0]) if batches else synthetic_batch(graph, 2)
    with staging(path) as folder:
        staged = folder / path.name
        written = exporter.write(staged, example or [])
        size = _bytes(folder)
        runtime = exporter.load(staged)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            parity = output_parity(graph, backend, model, runtime, batches, exporter.integer_bias)
            exported_graph, runtime_graph = runtime.graph(), runtime.runtime_graph()
            layers = measured(graph, backend, runtime, batches, path.name)
        runtime_name = runtime.name
        del runtime  # the runtime may hold the staged file open
        move_into_place(folder, path)
    report = ExportReport(
        model_name=graph.name, framework=backend.name, serialization_format=exporter.serialization,
        quantization_format=exporter.quantization, path=str(path), file_bytes=size, runtime=runtime_name,
        data=data, parity=parity, graph=exported_graph, runtime_graph=runtime_graph, notes=written.notes,
        figures=written.figures, layers=layers,
    )  # fmt: skip
    _tell(report)
    observer.export_finished(report)
    return report


def _tell(report: ExportReport) -> None:
    """The library's log (a call's ``mct.log`` too) and, when parity fails, a warning."""
    LOG.info(
        "exported %s as %s/%s to %s (%d bytes); parity %s",
        report.model_name, report.serialization_format, report.quantization_format, report.path,
        report.file_bytes, "ok" if report.parity_ok else "FAILED",
    )  # fmt: skip
    first = report.first_departure
    if first is not None:
        LOG.info("first layer where the runtime departs: %s, %.2f steps (%s)", first.layer, first.max_steps or 0,
                 first.why or "no simple pattern")  # fmt: skip
    message = parity_warning(report)
    if message is not None:
        warn_user(message, RuntimeWarning)
