"""PP-OCR's text recognizer and detector, quantized, exported to ONNX and run in onnxruntime:
the file passes the export's parity and does the task as the quantized model does (issue 30,
item 4; issue 33: the real models pass parity).

They used to drift (file cosine 0.989, 16 dB): PP-LCNetV3's learnable affine blocks
(``conv -> mul -> add -> hard-swish -> mul -> add``), its layer norms and swishes written as
ops were quantized at every op, and each re-rounding turned a float32 difference of the
runtime into whole steps that grew through the depth; the convs whose output stayed float
got int32 biases in the file. Each chain is now quantized once and those convs keep their
float bias (tests/pipeline/test_export_rounding.py): the detector's file lands at a cosine
of 0.999, the recognizer's at 0.988 to 0.9996 on its 16 lines. That is where the quantized
model in PyTorch lands against itself with float32 noise (its CTC softmax turns one step of a
logit into a near-tie of two characters): 0.990 to 0.996 with compensated rounding, by thread
count. So a file is held to that floor, measured on the same machine, where it is below
MIN_COSINE.
The per-layer table names no layer where the file departs on its own: every difference is
carried from float32 rounding. Measured: bench/results/real_zoo.md.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.core.export.report import FLOOR_REACH
from model_compression_toolkit.errors import ExportError
from tests.zoo.real.cases import CASES
from tests.zoo.real.wheels import missing

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore")]

NO_SIMILARITY = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))
MIN_COSINE = 0.99  # det: 0.999; 0.989 before the fix. Rec: its own floor reaches below it
TASK_MARGIN = 0.1  # the file's task metric within 10 points of the quantized model's


class _InRuntime:
    """An ONNX file in onnxruntime, called as the cases call a PyTorch model."""

    def __init__(self, path) -> None:
        import onnxruntime

        self.session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        spec = self.session.get_inputs()[0]
        self.input = spec.name
        # a file that takes one batch size only (its note says so): the last batch is padded to it
        self.batch = spec.shape[0] if isinstance(spec.shape[0], int) else None

    def __call__(self, x):
        import torch

        x = x.numpy()
        n = len(x)
        if self.batch is not None and n < self.batch:
            x = np.concatenate([x, np.repeat(x[-1:], self.batch - n, axis=0)])
        outputs = self.session.run(None, {self.input: x})
        return tuple(torch.as_tensor(o[:n]) for o in outputs)


@pytest.mark.parametrize("name", ["ppocr_rec", "ppocr_det"])
def test_ppocr_passes_export_parity_and_keeps_its_task(name, tmp_path):
    case = CASES[name]
    if missing(case.weights):
        pytest.skip(f"wheel not installed: {', '.join(missing(case.weights))} (make install)")
    pytest.importorskip("onnx2torch")
    pytest.importorskip("onnxruntime")
    model, batches = case.make(), case.calibration()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q_model, _ = mct.ptq.pytorch_post_training_quantization(model, lambda: iter(batches), NO_SIMILARITY)
        result = mct.exporter.pytorch_export_model(
            q_model, str(tmp_path / f"{name}.onnx"), lambda: iter(batches)
        )
    (parity,) = result.parity
    assert result.parity_ok, result.report.to_dict()["parity"]
    # no layer of the file departs on its own: what differs is carried from float32 rounding
    assert result.parity.layers is not None and result.parity.layers.first_departure is None
    # and the outputs are close: at a cosine of MIN_COSINE, or, where the quantized model's own
    # float32 rounding (or the runtime's int32 biases) moves it further on this machine, within
    # FLOOR_REACH of that distance. Rec lands at 0.988 on 2 threads against a floor of 0.993.
    floor = min((c for c in (parity.floor_cosine, parity.bias_cosine) if c is not None), default=1.0)
    assert 1 - parity.cosine <= max(1 - MIN_COSINE, FLOOR_REACH * (1 - floor)), parity
    # the file does the task as the quantized model does
    quantized, exported = case.evaluate(q_model), case.evaluate(_InRuntime(result.path))
    assert abs(exported[case.primary] - quantized[case.primary]) <= TASK_MARGIN, (quantized, exported)
    assert exported[case.primary] >= 0.8, exported


class _InTFLite:
    """An int8 TFLite file in TensorFlow's interpreter, called as the cases call a Keras model."""

    def __init__(self, path, names) -> None:
        from model_compression_toolkit.keras.export import interpreter

        self.interp, self.names = interpreter(path), names

    def __call__(self, x, training=False):
        from model_compression_toolkit.keras.export import run_tflite

        return tuple(run_tflite(self.interp, [np.asarray(x)], *self.names))


def test_integer_only_ppocr_classifier_runs_as_int8_tflite_and_keeps_its_task(tmp_path):
    """PP-LCNet's hard-swishes (written as ops) and squeeze-excites on an integer-only target:
    each conv before a hard-swish holds an int8 tensor, the file runs every hard-swish as one
    int8 HARD_SWISH kernel, passes parity, and reads the lines' orientation as the quantized
    model does. Quantized for a float target the same model is refused as int8 TFLite."""
    from model_compression_toolkit.core.export.grids import output_names
    from model_compression_toolkit.pipeline.session import produced_graph

    case = CASES["ppocr_cls_keras"]
    if missing(case.weights):
        pytest.skip(f"wheel not installed: {', '.join(missing(case.weights))} (make install)")
    model, batches = case.make(), case.calibration()
    config = mct.core.CoreConfig(integer_only=True, debug_config=mct.core.DebugConfig(analyze_similarity=False))
    q_model, info = mct.ptq.keras_post_training_quantization(model, lambda: iter(batches), config)
    reasons = [layer.activation_float_reason or "" for layer in info.layers.values()]
    swishes = [r for r in reasons if "inside a hard-swish" in r]
    assert swishes and not any("fused with the activation 'divide" in r for r in reasons)
    result = mct.exporter.keras_export_model(
        q_model, tmp_path / "cls.tflite", serialization_format="TFLITE", quantization_format="INT8",
        repr_dataset=lambda: iter(batches),
    )  # fmt: skip
    assert result.parity_ok, result.report.to_dict()["parity"]
    assert result.ops["HARD_SWISH"] == len(swishes) // 3  # add, clip and multiply inside each
    # its squeeze-excites' hard_sigmoid activations too run in int8: nothing in float in between
    assert not [note for note in result.notes if "between a DEQUANTIZE" in note], result.notes
    assert result.ops["DEQUANTIZE"] == 1, result.ops
    graph = produced_graph(q_model)
    exported = case.evaluate(_InTFLite(result.path, (list(graph.inputs), output_names(graph))))
    quantized = case.evaluate(q_model)
    assert abs(exported[case.primary] - quantized[case.primary]) <= TASK_MARGIN, (quantized, exported)
    assert exported[case.primary] >= 0.8, exported
    float_target, _ = mct.ptq.keras_post_training_quantization(model, lambda: iter(batches), NO_SIMILARITY)
    with pytest.raises(ExportError, match=r"CoreConfig\(integer_only=True\)"):
        mct.exporter.keras_export_model(
            float_target, tmp_path / "float.tflite", serialization_format="TFLITE", quantization_format="INT8"
        )
