"""A model converted from ONNX by onnx2torch, quantized and written back to ONNX.

onnx2torch's modules read their constant inputs' values (``Reshape`` asks
``torch.any(shape == 0)``, ``Slice`` calls ``.numpy()`` on its axes), which
``torch.export`` cannot follow; the exporter traces such a model with real tensors instead.
"""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct

pytestmark = pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider':UserWarning")
NO_SIMILARITY = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))


def _converted():
    """``x -> Conv -> Relu -> Reshape([0, -1]) -> Slice -> MatMul -> Add`` with constant
    weights, shape and slice bounds, as onnx2torch converts it."""
    pytest.importorskip("onnx2torch")
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from tests.zoo import torchvision_ops

    torchvision_ops.install()
    import onnx2torch

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32) * 0.1, "b"),
        numpy_helper.from_array(np.array([0, -1], np.int64), "shape"),
        *(
            numpy_helper.from_array(np.array([v], np.int64), n)
            for n, v in (("lo", 0), ("hi", 128), ("ax", 1))
        ),
        numpy_helper.from_array(rng.standard_normal((128, 5)).astype(np.float32) * 0.1, "fc"),
        numpy_helper.from_array(rng.standard_normal(5).astype(np.float32) * 0.1, "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["flat"]),
        helper.make_node("Slice", ["flat", "lo", "hi", "ax"], ["part"]),
        helper.make_node("MatMul", ["part", "fc"], ["m"]),
        helper.make_node("Add", ["m", "fc_b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "converted", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 5])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return onnx2torch.convert(onnx.shape_inference.infer_shapes(model)).eval()


def test_a_model_converted_by_onnx2torch_exports_with_parity(tmp_path):
    import onnx

    rng = np.random.default_rng(1)
    batches = [[rng.standard_normal((4, 3, 8, 8), dtype=np.float32)] for _ in range(2)]
    data = lambda: iter(batches)  # noqa: E731
    q_model, _ = mct.ptq.pytorch_post_training_quantization(_converted(), data, NO_SIMILARITY)
    result = mct.exporter.pytorch_export_model(q_model, tmp_path / "m.onnx", data)
    assert result.parity_ok, result.parity
    assert result.runtime_ops.get("QLinearConv") == 1, result.runtime_ops
    model = onnx.load(str(tmp_path / "m.onnx"))
    onnx.checker.check_model(model, full_check=True)
    batch = model.graph.input[0].type.tensor_type.shape.dim[0]
    assert batch.dim_param and not batch.dim_value  # the batch stays dynamic
