"""A layer's kind is its op's, not what reads it (issue 34): a Linear whose only reader is
``torch.fft.rfft`` (complex) or ``argmax`` (integers) was made a SHAPE node, its weights
left float without being reported as float."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import model_compression_toolkit as mct

NO_SIMILARITY = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))
READERS = {"rfft": lambda y: torch.fft.rfft(y).abs(), "argmax": lambda y: y.argmax(-1)}


class _LinearThen(nn.Module):
    def __init__(self, reader: str):
        super().__init__()
        self.fc, self.reader = nn.Linear(16, 16), reader

    def forward(self, x):
        return READERS[self.reader](self.fc(x))


@pytest.mark.parametrize("reader", list(READERS))
def test_a_linear_keeps_its_kind_whatever_reads_it(reader):
    torch.manual_seed(0)
    x = np.random.default_rng(0).normal(size=(16, 16)).astype(np.float32)
    _, info = mct.ptq.pytorch_post_training_quantization(
        _LinearThen(reader).eval(), lambda: iter([[x]]), NO_SIMILARITY
    )
    assert info.layers["fc"].weights["kernel"]["n_bits"] == 8
    if reader == "rfft":  # computed from values, not a shape: kept in float and said so
        assert "fft_rfft" in info.unsupported_layers
