"""The similarity analysis runs no model it has already run, and still finds what it found.

The analysis is driven through a `pipeline.session.Session` whose backend is the real one
wrapped by `RunCounter`, which counts each model run by the graph the model was built
from: every run still happens in the real framework. The damaged digits CNN
(`tests.fixtures.damage.outlier_channel`) has one cause among harmless quantizers.
"""

from __future__ import annotations

import numpy as np

from model_compression_toolkit.core.similarity.causes import ImpactProbe
from model_compression_toolkit.core.similarity.probe import joined
from model_compression_toolkit.pipeline.backends import get_backend
from tests.fixtures.counted import SAMPLES, analyzed
from tests.fixtures.damage import outlier_channel


def test_the_quantized_model_runs_once_on_each_sample_and_the_fix_reads_those_outputs(fw, trained_digits):
    model, x_train, _, _ = trained_digits
    bad, names = outlier_channel(fw.name, model, x_train[:256])
    graph, result, counter = analyzed(fw, bad, x_train)
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
