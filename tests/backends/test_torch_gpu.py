"""A model on a CUDA device is read, calibrated, quantized and analysed there.

Skipped without a GPU (CI has none); run on one with
``.venv/bin/python -m pytest tests/backends/test_torch_gpu.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import model_compression_toolkit as mct
from tests.fixtures.tb import run_folders

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
    ).eval()  # fmt: skip


def test_a_model_on_cuda_is_quantized_on_its_device_with_logs(tmp_path):
    model = _model().cuda()
    rng = np.random.default_rng(0)
    batches = [[rng.standard_normal((4, 3, 16, 16)).astype(np.float32)] for _ in range(3)]
    mct.set_log_folder(tmp_path)
    q_model, info = mct.ptq.pytorch_post_training_quantization(model, lambda: iter(batches))
    assert {p.device.type for p in q_model.parameters()} == {"cuda"}
    assert {b.device.type for b in q_model.buffers()} == {"cuda"}
    assert next(model.parameters()).device.type == "cuda"  # the user's model stays where it was
    x = torch.as_tensor(batches[0][0], device="cuda")
    with torch.no_grad():
        f, q = model(x), q_model(x)
    assert q.device.type == "cuda"
    assert torch.nn.functional.cosine_similarity(f.flatten(), q.flatten(), dim=0) > 0.999
    assert info.similarity is not None and (run_folders(tmp_path)[0] / "similarity_report.json").is_file()


def test_a_cuda_model_gives_the_same_grids_as_on_the_cpu():
    rng = np.random.default_rng(0)
    batches = [[rng.standard_normal((4, 3, 16, 16)).astype(np.float32)] for _ in range(2)]
    config = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))
    _, on_cpu = mct.ptq.pytorch_post_training_quantization(_model(), lambda: iter(batches), config)
    _, on_gpu = mct.ptq.pytorch_post_training_quantization(_model().cuda(), lambda: iter(batches), config)
    for name, layer in on_cpu.layers.items():
        if layer.activation is not None:
            got, want = on_gpu.layers[name].activation["grid"]["scale"], layer.activation["grid"]["scale"]
            np.testing.assert_allclose(got, want, rtol=1e-4)


def test_a_hugging_face_model_on_cuda_is_captured_there():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    )
    model = transformers.BertModel(config).eval().cuda()
    ids = np.random.default_rng(0).integers(1, 50, (2, 8))
    q_model, info = mct.ptq.pytorch_post_training_quantization(
        model,
        lambda: [{"input_ids": ids}],
        mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False)),
    )
    assert info.unsupported_layers == []
    with torch.no_grad():
        out = q_model(input_ids=torch.as_tensor(ids, device="cuda"))
    assert out.last_hidden_state.device.type == "cuda"
