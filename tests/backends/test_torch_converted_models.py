"""Models converted from ONNX by onnx2torch, and the activations ONNX writes (Clip,
HardSigmoid, PRelu), are quantized: no layer kept float for lack of a rule, the quantized
output close to the float one (issue 30).

The ONNX graphs are built here with ``onnx.helper``, small enough to convert and quantize
in a second each; the real detector (nudenet's YOLOv8n) runs when its wheel is installed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import model_compression_toolkit as mct
from model_compression_toolkit.core.graph import OpKind
from model_compression_toolkit.pytorch.backend import PytorchBackend
from tests.zoo import torchvision_ops

torchvision_ops.install()  # onnx2torch imports torchvision, whose C ops do not load here
BACKEND = PytorchBackend()
NO_SIMILARITY = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))


def _sqnr_db(f: np.ndarray, q: np.ndarray) -> float:
    f, q = np.asarray(f, np.float64), np.asarray(q, np.float64)
    return float(10 * np.log10((f**2).sum() / max(((f - q) ** 2).sum(), 1e-30)))


def _batches(shape, n=2, seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.uniform(-1, 1, shape).astype(np.float32)] for _ in range(n)]


def _quantize(model: nn.Module, shape, n: int = 2, config=NO_SIMILARITY) -> tuple[nn.Module, object, float]:
    """(quantized model, info, output SQNR in dB on a batch not seen in calibration), after
    calibrating on ``n`` batches."""
    batches = _batches(shape, n)
    q_model, info = mct.ptq.pytorch_post_training_quantization(model, lambda: iter(batches), config)
    x = torch.as_tensor(_batches(shape, 1, seed=1)[0][0])
    with torch.no_grad():
        f, q = model(x), q_model(x)
    f, q = (f[0], q[0]) if isinstance(f, (list, tuple)) else (f, q)
    return q_model, info, _sqnr_db(f.numpy(), q.numpy())


# ------------------------------------------------------------ ONNX graphs built here
def _convert(nodes, initializers, shape=(1, 3, 8, 8), out_shape=None):
    """An ONNX graph ``x -> nodes -> y`` (opset 13) converted by onnx2torch."""
    onnx = pytest.importorskip("onnx")
    onnx2torch = pytest.importorskip("onnx2torch")
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        nodes,
        "converted",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in initializers.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model = onnx.shape_inference.infer_shapes(model)
    return onnx2torch.convert(model).eval()


def _conv_weights(rng, cout, cin):
    return (rng.standard_normal((cout, cin, 3, 3)) * 0.3).astype(np.float32), rng.uniform(-0.2, 0.2, cout).astype(
        np.float32
    )


def _image_net():
    """conv -> Clip(0, 6) -> conv -> Clip(-1, 2) * HardSigmoid * PRelu -> Resize (scales)
    -> Split -> Concat -> Gather (channels) -> Where -> + Expand(bias to Shape) -> conv
    -> Reshape to (N, -1) by Shape -> Gather -> Unsqueeze -> Concat."""
    from onnx import helper

    rng = np.random.default_rng(0)
    w1, b1 = _conv_weights(rng, 8, 3)
    w2, b2 = _conv_weights(rng, 8, 8)
    w3, b3 = _conv_weights(rng, 4, 8)
    mk = helper.make_node
    nodes = [
        mk("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        mk("Clip", ["c1", "zero", "six"], ["r1"], name="relu6"),
        mk("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        mk("Clip", ["c2", "lo", "hi"], ["k"], name="clip"),
        mk("HardSigmoid", ["c2"], ["hs"], name="hard_sigmoid", alpha=0.2, beta=0.5),
        mk("Mul", ["k", "hs"], ["gate"], name="gate"),
        mk("PRelu", ["c2", "slope"], ["pr"], name="prelu"),
        mk("Mul", ["gate", "pr"], ["m"], name="mul"),
        mk("Resize", ["m", "", "scales"], ["up"], name="resize", mode="nearest", nearest_mode="floor",
           coordinate_transformation_mode="asymmetric"),
        mk("Split", ["up", "halves"], ["a", "b"], name="split", axis=1),
        mk("Concat", ["b", "a"], ["cat"], name="concat", axis=1),
        mk("Gather", ["cat", "order"], ["g"], name="gather", axis=1),
        mk("Where", ["mask", "g", "cat"], ["wh"], name="where"),
        mk("Shape", ["wh"], ["s"], name="shape"),
        mk("Expand", ["bias", "s"], ["eb"], name="expand"),
        mk("Add", ["wh", "eb"], ["sum"], name="add"),
        mk("Conv", ["sum", "w3", "b3"], ["c3"], name="conv3", pads=[1, 1, 1, 1]),
        mk("Shape", ["c3"], ["s3"], name="shape3"),
        mk("Gather", ["s3", "zero_i"], ["n"], name="batch", axis=0),
        mk("Unsqueeze", ["n", "axes0"], ["n1"], name="unsqueeze"),
        mk("Concat", ["n1", "minus_one"], ["flat"], name="flat_shape", axis=0),
        mk("Reshape", ["c3", "flat"], ["y"], name="reshape"),
    ]
    initializers = {
        "w1": w1, "b1": b1, "w2": w2, "b2": b2, "w3": w3, "b3": b3,
        "zero": np.float32(0), "six": np.float32(6), "lo": np.float32(-1), "hi": np.float32(2),
        "slope": rng.uniform(0.05, 0.5, (8, 1, 1)).astype(np.float32),
        "scales": np.array([1, 1, 2, 2], np.float32), "halves": np.array([4, 4], np.int64),
        "order": np.array([1, 0, 3, 2, 5, 4, 7, 6], np.int64),
        "mask": rng.uniform(size=(1, 8, 16, 16)) > 0.5,
        "bias": rng.uniform(-0.5, 0.5, (1, 8, 1, 1)).astype(np.float32),
        "zero_i": np.array(0, np.int64), "axes0": np.array([0], np.int64), "minus_one": np.array([-1], np.int64),
    }  # fmt: skip
    return _convert(nodes, initializers)


def test_a_converted_onnx_graph_is_quantized_with_no_layer_kept_float():
    model = _image_net()
    _, info, sqnr = _quantize(model, (1, 3, 8, 8))
    assert info.unsupported_layers == []
    assert not [name for name, reason in info.float_layers.items() if "unsupported" in str(reason)]
    assert sqnr > 25, sqnr


def test_onnx_activations_and_merges_carry_an_activation_quantizer():
    """Clip(0, 6) (ReLU6), Clip(-1, 2), HardSigmoid, PRelu, Mul, Concat, Where, Add: each
    output is on an 8-bit grid; Split, Gather and Resize (nearest) keep their input's."""
    _, info, _ = _quantize(_image_net(), (1, 3, 8, 8))
    layers = info.layers
    for name in ("relu6", "clip", "hard_sigmoid", "prelu", "mul", "concat", "where", "add"):
        assert layers[name].activation is not None and layers[name].activation["n_bits"] == 8, name
    assert (layers["clip"].layer_type, layers["clip"].kind) == ("OnnxClip", OpKind.ACTIVATION.value)
    assert layers["relu6"].layer_type == "ReLU6" and layers["conv1"].activation is None  # fused into the ReLU6
    assert layers["conv2"].weights["kernel"]["n_bits"] == 8


def test_shape_computations_of_a_converted_graph_are_shapes_not_activations():
    graph, warnings = BACKEND.read(_image_net(), _batches((1, 3, 8, 8))[0])
    assert warnings == []
    for name in ("shape", "shape3", "batch", "unsqueeze", "flat_shape"):
        assert graph.node(name).kind == OpKind.SHAPE, name
    assert graph.node("split").kind == graph.node("gather").kind == OpKind.RESHAPE
    assert graph.node("resize").kind == OpKind.RESIZE and graph.node("add").kind == OpKind.ADD
    functions = {n: graph.node(n).attrs.get("function") for n in ("relu6", "clip", "hard_sigmoid", "prelu")}
    assert functions == {"relu6": "relu6", "clip": "hardtanh", "hard_sigmoid": "hardsigmoid", "prelu": "prelu"}


def _anchor_net():
    """YOLOv8's anchor grid as ONNX writes it: values computed from the input's shape alone
    (Shape -> Gather -> Cast -> Range -> Add 0.5), added to the activation at the end."""
    from onnx import TensorProto, helper

    mk = helper.make_node
    nodes = [
        mk("Shape", ["x"], ["s"]),
        mk("Gather", ["s", "three"], ["w"], axis=0),
        mk("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
        mk("Range", ["zero", "wf", "one"], ["r"]),
        mk("Add", ["r", "half"], ["anchors"], name="anchors"),
        mk("Mul", ["anchors", "stride"], ["pixels"], name="pixels"),
        mk("Add", ["x", "pixels"], ["y"], name="boxes"),
    ]
    initializers = {
        "three": np.array(3, np.int64), "zero": np.float32(0), "one": np.float32(1),
        "half": np.float32(0.5), "stride": np.float32(8),
    }  # fmt: skip
    return _convert(nodes, initializers, shape=(1, 4, 2, 40))


def test_values_computed_from_shapes_alone_are_not_put_on_an_activation_grid():
    """Anchors 4..316 pixels on an 8-bit grid would move every box by up to a pixel."""
    model = _anchor_net()
    graph, _ = BACKEND.read(model, _batches((1, 4, 2, 40))[0])
    assert graph.node("anchors").kind == graph.node("pixels").kind == OpKind.SHAPE
    assert graph.node("boxes").kind == OpKind.ADD
    # the boxes, a model output, on a grid as an integer-only target has them
    _, info, sqnr = _quantize(model, (1, 4, 2, 40), config=dataclasses.replace(NO_SIMILARITY, quantize_outputs=True))
    assert info.layers["anchors"].activation is None and info.layers["boxes"].activation is not None
    assert sqnr > 40, sqnr


def test_a_graph_module_is_read_from_its_own_graph_and_left_as_it_was():
    """onnx2torch's modules branch on tensor values: tracing the model again fails, so it is
    read as it is, and the user's GraphModule keeps its graph and weights."""
    model = _image_net()
    code, state = model.code, {k: v.clone() for k, v in model.state_dict().items()}
    graph, _ = BACKEND.read(model, _batches((1, 3, 8, 8))[0])
    assert graph.meta["pytorch_capture"] == "graph module"
    assert model.code == code and all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())


# ------------------------------------------------------------ PReLU, clamp, hardsigmoid
class Activations(nn.Module):
    """nn.PReLU with per-channel slopes, F.prelu, clamp(0, 6), clip(-1, 1), F.hardsigmoid,
    and a clamp whose bound is a tensor (an elementwise minimum, not an activation)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.prelu = nn.PReLU(6)
        self.slope = nn.Parameter(torch.full((6,), 0.1))
        with torch.no_grad():
            self.prelu.weight.copy_(torch.linspace(-0.5, 0.5, 6))

    def forward(self, x):
        y = self.prelu(self.conv(x))
        a = torch.clamp(y, 0, 6)
        b = F.prelu(y, self.slope).clip(-1, 1)
        c = F.hardsigmoid(y)
        return torch.clamp(a + b + c, max=y)


def test_prelu_clamp_and_hardsigmoid_are_quantized_activations():
    model = Activations().eval()
    graph, warnings = BACKEND.read(model, _batches((2, 3, 8, 8))[0])
    assert warnings == []
    functions = {n.name: n.attrs.get("function") for n in graph.find((OpKind.ACTIVATION,))}
    assert functions == {"prelu": "prelu", "clamp": "relu6", "prelu_1": "prelu", "clip": "hardtanh"} | {
        "hardsigmoid": "hardsigmoid"
    }
    assert graph.node("clamp_1").kind == OpKind.ELEMENTWISE  # max=y: a tensor bound
    _, info, sqnr = _quantize(model, (2, 3, 8, 8))
    assert info.unsupported_layers == []
    assert info.layers["prelu"].activation["n_bits"] == 8 and info.layers["conv"].activation is None
    assert info.layers["clamp"].activation is not None and info.layers["hardsigmoid"].activation is not None
    assert sqnr > 25, sqnr


# ------------------------------------------------------------ a real detector
def _nudenet_model() -> Path:
    spec = importlib.util.find_spec("nudenet")  # found without importing it (onnxruntime, cv2)
    path = Path(spec.submodule_search_locations[0]) / "320n.onnx" if spec and spec.submodule_search_locations else None
    if path is None or not path.is_file():
        pytest.skip("nudenet (its wheel ships YOLOv8n as 320n.onnx) is not installed")
    return path


@pytest.mark.slow
def test_nudenet_yolov8n_converted_by_onnx2torch_is_quantized():
    onnx = pytest.importorskip("onnx")
    onnx2torch = pytest.importorskip("onnx2torch")
    model = onnx2torch.convert(onnx.load(str(_nudenet_model()))).eval()
    _, info, sqnr = _quantize(model, (1, 3, 320, 320), n=1)  # one batch: the test's 20 s are calibration
    assert info.unsupported_layers == []
    assert sqnr > 25, sqnr
