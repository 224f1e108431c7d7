"""The reader checks its own work (issue 34): the float model built back from the read graph
runs against the user's model on the first batch, and a graph that computes something else
is never returned or analysed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import model_compression_toolkit as mct
from model_compression_toolkit.errors import ModelReadError
from model_compression_toolkit.pytorch import capture, inplace


class _ReluStatement(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 8)

    def forward(self, x):
        z = self.a(x)
        z.relu_()
        return self.b(z)


class _SharedIadd(nn.Module):
    """``z += x`` while ``w``, a view of ``z``, is returned: torch.fx traces ``z + x`` and
    loses the write to ``w``; torch.export reads it."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 8)

    def forward(self, x):
        z = self.a(x)
        w = z.view(-1)
        z += x
        return self.b(w.view(z.shape))


def _batches():
    x = np.random.default_rng(0).normal(size=(16, 16)).astype(np.float32)
    return x, lambda: iter([[x]])


def test_a_misread_graph_is_refused_naming_the_first_layer_that_differs(monkeypatch):
    """With the in-place reading switched off (the reader as it was) and no other capture
    path, the relu_ statement is misread: refused, naming 'b', the first layer whose float
    output differs, instead of a quantized model computing another function."""
    monkeypatch.setattr(inplace, "redirect", lambda gm: 0)

    def no_export(*args):
        raise RuntimeError("torch.export switched off in this test")

    monkeypatch.setattr(capture, "exported", no_export)
    torch.manual_seed(0)
    _, data = _batches()
    with pytest.raises(
        ModelReadError, match=r"expected the graph read from _ReluStatement.*first at layer 'b'"
    ):
        mct.ptq.pytorch_post_training_quantization(_ReluStatement().eval(), data)


def test_a_graph_torch_fx_misreads_is_read_again_with_torch_export():
    """``z += x`` on a tensor a view still holds: torch.fx's graph computes another function
    (relative error 1.0); the check sees it and torch.export reads the model right."""
    torch.manual_seed(0)
    model = _SharedIadd().eval()
    x, data = _batches()
    q_model, _ = mct.ptq.pytorch_post_training_quantization(model, data)
    with torch.no_grad():
        want, got = model(torch.from_numpy(x)).numpy(), q_model(torch.from_numpy(x)).numpy()
    assert np.abs(got - want).max() / np.abs(want).max() < 0.05


def test_a_model_with_random_ops_is_not_refused():
    """A model whose own output changes from run to run cannot be compared: it is read."""

    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 8)

        def forward(self, x):
            return self.fc(x + torch.randn_like(x))

    _, data = _batches()
    q_model, _ = mct.ptq.pytorch_post_training_quantization(Noisy().eval(), data)
    assert q_model is not None
