"""The similarity analysis runs no model it has already run, and still finds what it found.

The analysis is driven through a `pipeline.session.Session` whose backend is the real one
wrapped by `RunCounter`, which counts each model run by the graph the model was built
from: every run still happens in the real framework. The damaged digits CNN
(`tests.fixtures.damage.outlier_channel`) has one cause among harmless quantizers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import model_compression_toolkit as mct
from model_compression_toolkit.core.calibration.quantizers import QuantizedWeights
from model_compression_toolkit.core.similarity.causes import ImpactProbe
from model_compression_toolkit.core.similarity.probe import joined
from model_compression_toolkit.pipeline.backends import get_backend
from model_compression_toolkit.pipeline.session import Session
from tests.fixtures.damage import outlier_channel
from tests.fixtures.digits import representative_dataset

SAMPLES = 20  # the default similarity_samples: one chunk of the digits data's batches of 32


class RunCounter:
    """The real backend; each model run is recorded as (graph, quantized, extra outputs)."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self._built: dict[int, tuple[Any, bool, bool]] = {}
        self._models: list[Any] = []  # kept alive: ids stay unique
        self.runs: list[tuple[Any, bool, bool]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def build(self, graph, quantized, extra_outputs=(), *args, **kwargs):
        model = self._backend.build(graph, quantized, extra_outputs, *args, **kwargs)
        self._built[id(model)] = (graph, quantized, bool(extra_outputs))
        self._models.append(model)
        return model

    def forward(self, model, inputs):
        self.runs.append(self._built.get(id(model), (None, False, False)))
        return self._backend.forward(model, inputs)

    def count(self, graph: Any, extra: bool) -> int:
        """Runs of quantized models built from this very graph object, with or without
        extra outputs (the comparison's model has them; a plain quantized model has not)."""
        return sum(1 for g, quantized, e in self.runs if g is graph and quantized and e == extra)


def _analyzed(fw, model, x_train):
    """(the quantized graph, its similarity result, the run counter) of one staged analysis."""
    config = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=True))
    counter = RunCounter(get_backend(model))
    with Session(model, representative_dataset(x_train), config, counter) as session:
        graph = session.prepare()
        session.statistics(graph, reference_samples=SAMPLES)
        session.select_thresholds(graph)
        weights = QuantizedWeights(graph)
        result = session.analyze(graph, weights, session.build(graph, weights))
    return graph, result, counter


def test_the_quantized_model_runs_once_on_each_sample_and_the_fix_reads_those_outputs(fw, trained_digits):
    model, x_train, _, _ = trained_digits
    bad, names = outlier_channel(fw.name, model, x_train[:256])
    graph, result, counter = _analyzed(fw, bad, x_train)
    report = result.report
    # the comparison ran the quantized model on its one chunk; the fix's "before" did not
    # run it again (it would be a quantized model of the same graph without extra outputs)
    assert counter.count(graph, extra=True) == 1
    assert counter.count(graph, extra=False) == 0, counter.runs
    # and what it read is what a run gives: the same output SQNR, and the same cause
    plain = ImpactProbe(get_backend(bad), graph, [[x_train[:SAMPLES]]]).output_sqnr_db(graph)
    assert abs(report.fix.output_sqnr_db_before - plain) < 1e-3, (report.fix.output_sqnr_db_before, plain)
    first = report.quantizers[0]
    assert (first.name, first.kind, first.cause) == (names["activation"], "activation", True), (
        report.summary()
    )
    assert report.fix.output_sqnr_db_after > report.fix.output_sqnr_db_before + 20


def test_the_pieces_the_memory_cap_cut_are_joined_up_to_a_batch_the_model_ran():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    pieces = [[x[0:2]], [x[2:4]], [x[4:6]], [x[6:8]], [x[8:10]]]
    outputs = [[2 * p[0]] for p in pieces]
    chunks, outs = joined(pieces, outputs, batch=4)
    assert [len(c[0]) for c in chunks] == [4, 4, 2]
    np.testing.assert_array_equal(np.concatenate([c[0] for c in chunks]), x)
    np.testing.assert_array_equal(np.concatenate([o[0] for o in outs]), 2 * x)
    # an output without a batch axis (a scalar over its chunk) keeps the chunks as they are
    scalar = [[np.float32(1.0)] for _ in pieces]
    assert joined(pieces, scalar, batch=4) == (pieces, scalar)
