"""The reader's self-check runs on the first samples of the first batch (`reader.CHECK_SAMPLES`),
not all of it: a misread still shows, and a model fixed to the batch size it is given is
still checked, on that whole batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from model_compression_toolkit.errors import ModelReadError
from model_compression_toolkit.pytorch import capture, inplace, model_checks, reader


class _Net(nn.Module):
    def __init__(self, fixed_batch: int | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 8)
        self.fixed_batch = fixed_batch

    def forward(self, x):
        z = self.a(x)
        if self.fixed_batch is not None:  # an ONNX file's batch, fixed when it was exported
            z = z.reshape(self.fixed_batch, 16)
        return self.b(z)


class _ReluStatement(_Net):
    def forward(self, x):
        z = self.a(x)
        z.relu_()
        return self.b(z)


@pytest.fixture
def checked(monkeypatch):
    """The inputs' shapes of every `check_read` call of the read."""
    shapes: list[list[tuple]] = []
    real = model_checks.check_read

    def recording(work, gm, graph, inputs, *args):
        shapes.append([tuple(t.shape) for t in inputs])
        return real(work, gm, graph, inputs, *args)

    monkeypatch.setattr(reader, "check_read", recording)
    return shapes


def _batch(n: int = 16) -> list[np.ndarray]:
    return [np.random.default_rng(0).normal(size=(n, 16)).astype(np.float32)]


def test_the_check_runs_on_the_first_samples(checked):
    graph, _ = reader.read(_Net().eval(), _batch())
    assert checked == [[(reader.CHECK_SAMPLES, 16)]]
    assert graph.node(graph.outputs[0][0]).output_shapes[0][0] is None  # shapes: the whole batch's


def test_a_batch_of_at_most_that_many_is_checked_whole(checked):
    reader.read(_Net().eval(), _batch(reader.CHECK_SAMPLES))
    assert checked == [[(reader.CHECK_SAMPLES, 16)]]


def test_a_model_fixed_to_its_batch_is_checked_on_its_whole_batch(checked):
    reader.read(_Net(fixed_batch=16).eval(), _batch())
    assert checked[-1] == [(16, 16)], checked


def test_a_misread_on_the_first_samples_is_refused(monkeypatch, checked):
    """The reader as it was before in-place ops were read (and no torch.export): the relu_
    statement is lost, and the first samples show it."""
    monkeypatch.setattr(inplace, "redirect", lambda gm: 0)

    def no_export(*args):
        raise RuntimeError("torch.export switched off in this test")

    monkeypatch.setattr(capture, "exported", no_export)
    with pytest.raises(ModelReadError, match="first at layer 'b'"):
        reader.read(_ReluStatement().eval(), _batch())
    assert checked == [[(reader.CHECK_SAMPLES, 16)]]
