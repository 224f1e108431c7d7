"""In-place ops are read with their effect (issue 34): an op whose result is not assigned
back (``z.relu_()``, ``F.relu(z, inplace=True)`` as a statement, ``z[:, 0] = 0``) used to be
read onto a copy and its effect thrown away, so the quantized model computed another
function (relative error up to 1.2) while the similarity report said cosine 0.9999."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import model_compression_toolkit as mct

STATEMENTS = {
    "relu_": lambda z, x: z.relu_(),
    "F.relu(inplace=True)": lambda z, x: F.relu(z, inplace=True),
    "mul_": lambda z, x: z.mul_(3),
    "add_": lambda z, x: z.add_(x),
    "torch.clamp_": lambda z, x: torch.clamp_(z, -0.2, 0.2),
    "relu_ then mul_ then sub_": lambda z, x: z.relu_().mul_(3).sub_(1),
    "fill_": lambda z, x: z.fill_(0.5),
    "setitem": lambda z, x: z.__setitem__((slice(None), 0), 0.0),
    "view mul_": lambda z, x: z.view(-1, 4, 4).mul_(2),
    "select zero_": lambda z, x: z[:, 0].zero_(),
}


class _Statement(nn.Module):
    """``z = a(x); <in-place statement on z>; return b(z)``."""

    def __init__(self, statement: str):
        super().__init__()
        self.a, self.b, self.statement = nn.Linear(16, 16), nn.Linear(16, 8), statement
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        z = self.a(x)
        if self.statement == "ReLU(inplace=True) module":
            self.relu(z)
        elif self.statement == "setitem":
            z[:, 0] = 0.0
        else:
            STATEMENTS[self.statement](z, x)
        return self.b(z)


def _data(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(64, 16)).astype(np.float32)


@pytest.mark.parametrize("statement", [*STATEMENTS, "ReLU(inplace=True) module"])
def test_an_inplace_statement_keeps_its_effect_in_the_quantized_model(statement):
    torch.manual_seed(0)
    model = _Statement(statement).eval()
    x = _data()

    def data():
        for i in range(0, 64, 16):
            yield [x[i : i + 16]]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q_model, _ = mct.ptq.pytorch_post_training_quantization(model, data)
    batch = torch.from_numpy(x[:16])  # the batch size read (torch.export fixes it)
    with torch.no_grad():
        want, got = model(batch).numpy(), q_model(batch).numpy()
    assert np.abs(got - want).max() / np.abs(want).max() < 0.05, statement


def test_an_inplace_op_on_the_input_leaves_the_users_batch_alone():
    """``x.relu_()`` on the input: the quantized model computes relu(x) and does not write
    the user's array."""

    class OnInput(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 4)

        def forward(self, x):
            x.relu_()
            return self.fc(x)

    torch.manual_seed(0)
    model, x = OnInput().eval(), _data()
    q_model, _ = mct.ptq.pytorch_post_training_quantization(model, lambda: iter([[x.copy()]]))
    with torch.no_grad():
        want = model.fc(torch.from_numpy(x).relu()).numpy()
        t = torch.from_numpy(x.copy())
        got = q_model(t).numpy()
    assert np.abs(got - want).max() / np.abs(want).max() < 0.05
    assert np.array_equal(t.numpy(), x)
