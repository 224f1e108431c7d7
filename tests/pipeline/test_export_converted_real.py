"""PP-OCR's recognizer (onnx2torch's conversion of the rapidocr wheel's file), quantized and
written back to ONNX with parity (issue 30).

``torch.export`` stops at ``.numpy()`` in onnx2torch's Slice, and a ScriptModule trace
then cannot be exported ("Input rank must be known" where the Slice unbinds its constant
bounds): the exporter traces the model itself (`pytorch.traced_export`). Slow (a PTQ of a
626-layer model): runs only where the wheel is installed. How far its outputs land from the
quantized model's depends on the CPU: the network carries float32 rounding differences into
whole steps (on one machine cosine ~0.996 < 0.999, on another over 0.999), and the quantized
model with that noise alone (its floor) lands as far; the file passes parity by one rule or
the other (`ExportReport.parity_ok`; the floor rule: tests/pipeline/test_export_rounding.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct
from tests.zoo.real.wheels import missing

pytestmark = pytest.mark.filterwarnings("ignore")
NO_SIMILARITY = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))


@pytest.mark.skipif(bool(missing("ppocr_rec")), reason="rapidocr_onnxruntime's wheel is not installed")
def test_ppocr_recognizer_exports_to_onnx_with_parity(tmp_path):
    pytest.importorskip("onnx2torch")
    onnx = pytest.importorskip("onnx")
    from tests.zoo.real import data
    from tests.zoo.real.onnx_models import to_torch

    model = to_torch("ppocr_rec", (1, 3, 48, 320))
    lines = data.text_lines(8, seed=10)[0].astype(np.float32)
    batches = [[lines[:4]], [lines[4:]]]
    q_model, _ = mct.ptq.pytorch_post_training_quantization(model, lambda: iter(batches), NO_SIMILARITY)
    result = mct.exporter.pytorch_export_model(q_model, str(tmp_path / "rec.onnx"), lambda: iter(batches))
    (parity,) = result.parity
    # exported faithfully: within the parity bar, or (where this CPU's float32 rounding moves
    # the quantized model itself under it) as far as its floor, never further
    assert result.parity_ok and parity.floor_cosine is not None, parity
    assert parity.ok or parity.within_floor, parity
    assert parity.cosine > 0.98, parity
    exported = onnx.load(str(tmp_path / "rec.onnx"))
    weights = [t for t in exported.graph.initializer if t.data_type == onnx.TensorProto.INT8 and len(t.dims) > 1]
    assert len(weights) >= 30  # the convs' kernels are stored as integers, not folded to float
