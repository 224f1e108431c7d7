"""A converted model exports whatever was imported before: once any import names the
submodule ``torch.onnx.symbolic_helper``, torch's backward-compatible module stands there,
without the opset onnx2torch's modules read while they are exported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_a_converted_model_exports_after_torch_onnx_symbolic_helper_was_imported(tmp_path):
    pytest.importorskip("onnx2torch")
    pytest.importorskip("onnxruntime")
    script = f"""
import torch.onnx.symbolic_helper  # as another library may, before anything else
import sys; sys.path.insert(0, {str(REPO)!r})
from tests.zoo import torchvision_ops; torchvision_ops.install()
import numpy as np, onnx
from onnx import TensorProto, helper, numpy_helper
from onnx2torch import convert
import model_compression_toolkit as mct

rng = np.random.default_rng(0)
w = numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w")
shape = numpy_helper.from_array(np.array([0, -1], np.int64), "shape")
graph = helper.make_graph(
    [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
     helper.make_node("Shape", ["r"], ["s"]), helper.make_node("Reshape", ["r", "shape"], ["y"])],
    "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 8, 8])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 256])], [w, shape],
)
model = convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])).eval()
x = rng.uniform(0, 1, (4, 3, 8, 8)).astype(np.float32)
q, _ = mct.ptq.pytorch_post_training_quantization(model, lambda: [[x]])
result = mct.exporter.pytorch_export_model(q, {str(tmp_path / "m.onnx")!r}, lambda: [[x]])
print("exported", all(p.ok for p in result.parity) if hasattr(result.parity[0], "ok") else True)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "exported" in done.stdout, done.stderr[-3000:]
