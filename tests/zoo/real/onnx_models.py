"""The ONNX models of the real zoo as PyTorch modules (onnx2torch), and their metadata.

PaddlePaddle's exporter (paddle2onnx) keeps every weight of the PP-OCR files in a
``Constant`` node; onnx2torch looks weights up among the graph's initializers
(``KeyError: 'conv2d_0.w_0'`` otherwise), so `constants_to_initializers` moves them
there first. onnx2torch imports torchvision, whose C ops do not load beside the CPU torch
pinned here: `tests.zoo.torchvision_ops` lets its Python half import.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import numpy_helper

from tests.zoo.real.wheels import weights_file


def constants_to_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """``Constant -> x`` becomes the initializer ``x`` (tensor-valued Constants only)."""
    graph = model.graph
    kept = []
    for node in graph.node:
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
            tensor = numpy_helper.to_array(node.attribute[0].t)
            graph.initializer.append(numpy_helper.from_array(tensor, node.output[0]))
        else:
            kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)
    return model


def load_onnx(name: str) -> onnx.ModelProto:
    path = weights_file(name)
    if path is None:
        raise FileNotFoundError(f"the wheel holding {name} is not installed (see the Makefile)")
    return onnx.load(str(path))


def with_input_shape(model: onnx.ModelProto, shape: tuple[int, ...]) -> onnx.ModelProto:
    """Every tensor's shape recorded for an input of ``shape``: onnx2torch picks a
    BatchNorm's class by its input's rank, read from the graph's shapes. ONNX's shape
    inference loses them after PP-OCR's ``Shape -> Concat -> Reshape``, so the shapes
    are measured: onnxruntime runs the model once with every tensor as an output."""
    import numpy as np
    import onnxruntime

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    names = [o for node in probe.graph.node for o in node.output if o and o not in known]
    probe.graph.output.extend(onnx.ValueInfoProto(name=name) for name in names)
    session = onnxruntime.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {model.graph.input[0].name: np.zeros(shape, np.float32)}
    values = session.run(names, feed)
    del model.graph.value_info[:]
    for name, value in zip(names, values):
        dtype = onnx.helper.np_dtype_to_tensor_dtype(np.asarray(value).dtype)
        model.graph.value_info.append(onnx.helper.make_tensor_value_info(name, dtype, np.shape(value)))
    return model


def to_torch(name: str, input_shape: tuple[int, ...]):
    """Model ``name`` of `tests.zoo.real.wheels.FILES` as a ``torch.fx.GraphModule`` in eval
    mode, its shapes inferred for ``input_shape`` (other batch sizes run too)."""
    from tests.zoo import torchvision_ops

    torchvision_ops.install()
    import onnx2torch

    model = with_input_shape(constants_to_initializers(load_onnx(name)), input_shape)
    return onnx2torch.convert(model).eval()


def ocr_characters(path: Path | None = None) -> list[str]:
    """The PP-OCRv4 recognizer's output classes: index 0 is the CTC blank, then the
    characters of the file's ``character`` metadata (one a line), then ``' '`` (PaddleOCR
    appends the space: ``use_space_char``)."""
    model = onnx.load(str(path or weights_file("ppocr_rec")), load_external_data=False)
    text = next(p.value for p in model.metadata_props if p.key == "character")
    return ["<blank>", *text.splitlines(), " "]
