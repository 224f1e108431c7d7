"""Per-layer runtime parity: an export reads each quantized layer's tensor back from the
runtime (onnxruntime, the TFLite interpreter) and compares it with the quantized model's,
in steps of the layer's grid; a file changed in one layer is traced to that layer.

One body for both frameworks: PyTorch -> ONNX (QDQ), Keras -> int8 TFLite.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.core.export.report import ExportReport
from model_compression_toolkit.core.layer_parity import LayerAccumulator, LayerGrid, explain
from model_compression_toolkit.exporter import layer_parity
from model_compression_toolkit.observers.export_view import layers_markdown
from tests.fixtures.quantized import quantize
from tests.fixtures.tb import load, run_folders

pytestmark = pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider':UserWarning")
E = mct.exporter


def _quantized(framework: str):
    """The digits CNN with its output on a grid too: every layer up to the output is integer in the file."""
    return quantize(framework, quantize_outputs=True)


def _names(framework: str) -> tuple[list[str], tuple[str, str]]:
    """(the quantized layers of the digits CNN in topological order, those whose output is on
    a grid; (the layer whose weights are changed in the file, the quantized layer computed
    from it)). Keras names its layers by how many of a kind the process made before, so they
    are read from the model."""
    if framework == "pytorch":
        return ["input_1", "2", "5", "8", "9", "11"], ("3", "5")
    from model_compression_toolkit.pipeline.session import produced_graph

    nodes = produced_graph(_quantized(framework)[0]).nodes()

    def of(kind: str) -> list[str]:
        return [n.name for n in nodes if n.layer_type == kind]

    relus = of("ReLU")
    layers = [*of("InputLayer"), *relus, *of("GlobalAveragePooling2D"), *of("Dense")]
    return layers, (of("Conv2D")[1], relus[1])


def _export(framework: str, folder: Path):
    q_model, data = _quantized(framework)
    if framework == "pytorch":
        return E.pytorch_export_model(q_model, folder / "m.onnx", data)
    return E.keras_export_model(
        q_model,
        folder / "m.tflite",
        serialization_format="TFLITE",
        quantization_format="INT8",
        repr_dataset=data,
    )


@pytest.mark.parametrize("framework", ["pytorch", "keras"])
def test_clean_export_has_every_layer_within_one_step(framework, tmp_path):
    result = _export(framework, tmp_path)
    table = result.parity.layers
    assert [row.layer for row in table.rows] == _names(framework)[0]
    assert all(row.tensor is not None for row in table.rows), table.rows  # each layer found in the runtime
    assert result.parity.first_departure is None and result.report.first_departure is None
    for row in table.rows:
        # one step at most, or, where the inputs already differ by a step, two on a few values
        assert row.max_steps <= 1.001 or (row.max_steps <= 2.001 and row.over_one_step < 1e-3), row
        # the runtime is far closer to the quantized model than the quantized model to the float one
        assert row.sqnr_db > row.float_sqnr_db + 5, row
    assert result.parity_ok and len(result.parity) == 1  # the outputs' parity is unchanged
    # reading the tensors leaves what the runtime computes as it is (TFLite: within a step of XNNPACK)
    (note,) = [n for n in table.notes if "the run with its tensors exposed" in n]
    if framework == "pytorch":
        assert "gives exactly the outputs of onnxruntime" in note, note
    else:  # builtin kernels against XNNPACK's: at most a step apart
        assert "gives exactly" in note or re.search(r"by up to (0\.\d+|1) steps", note), note


def _change_one_layer(framework: str, exported: Path, target: Path) -> None:
    """The exported file with the weights of the changed layer (`_names`) scaled, everything else as written."""
    layer = _names(framework)[1][0]
    if framework == "pytorch":
        import onnx
        from onnx import numpy_helper

        model = onnx.load(str(exported))
        (init,) = [i for i in model.graph.initializer if i.name == f"{layer}.weight_scale"]
        init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(1.25), init.name))
        onnx.save(model, str(target))
        return
    from model_compression_toolkit.keras.export import interpreter
    from model_compression_toolkit.pipeline.session import produced_graph

    kernel = produced_graph(_quantized(framework)[0]).node(layer).weights["kernel"]  # (kh, kw, in, out)
    shape = [kernel.shape[3], kernel.shape[0], kernel.shape[1], kernel.shape[2]]  # TFLite's (out, kh, kw, in)
    interp = interpreter(exported, delegates=False)
    interp.allocate_tensors()
    (index,) = [d["index"] for d in interp.get_tensor_details() if list(d["shape"]) == shape]
    stored = interp.get_tensor(index)
    data = exported.read_bytes()
    assert data.count(stored.tobytes()) == 1  # the weights buffer, found by its bytes
    changed = np.clip(np.round(stored.astype(np.float64) * 1.25), -127, 127).astype(np.int8)
    target.write_bytes(data.replace(stored.tobytes(), changed.tobytes()))


@pytest.mark.parametrize("framework", ["pytorch", "keras"])
def test_a_layer_changed_in_the_file_is_named_as_the_first_departure(framework, tmp_path):
    result = _export(framework, tmp_path)
    changed = tmp_path / f"changed{result.path.suffix}"
    _change_one_layer(framework, result.path, changed)
    q_model, data = _quantized(framework)
    table = layer_parity(q_model, changed, data)
    weights_layer, quantized_layer = _names(framework)[1]
    first = table.first_departure
    assert (
        first is not None
        and first.layer == quantized_layer
        and first.computed_by == (weights_layer, quantized_layer)
    )
    assert first.max_steps > 3 and first.over_one_step > 0.05, first
    assert "weight or scale mismatch" in first.why and "1.2" in first.why, first.why
    before = table.rows[: [r.layer for r in table.rows].index(quantized_layer)]
    assert before and all(r.max_steps <= 1.001 for r in before)  # nothing departs earlier
    # the clean file, checked the same way, has no departure: the change is what is found
    assert layer_parity(q_model, result.path, data).first_departure is None
    # and the export run's table names it
    text = layers_markdown(ExportReport(**{**result.report.__dict__, "layers": table}))
    assert (
        f"**First departing layer: `{quantized_layer}`**" in text
        and f"| `{quantized_layer}` **departs** |" in text
    )


@pytest.mark.parametrize("framework", ["pytorch", "keras"])
def test_export_run_shows_the_per_layer_table(framework, tmp_path):
    mct.set_log_folder(tmp_path / "logs")
    result = _export(framework, tmp_path)
    (export_run,) = run_folders(tmp_path / "logs")
    run = "onnx_fakely_quant" if framework == "pytorch" else "tflite_int8"
    acc = load(export_run / run)
    text = acc.Tensors("parity_layers")[0].tensor_proto.string_val[0].decode()
    assert "float -> quantized ->" in text and "First departing layer" not in text
    assert "Every layer within one step" in text or "No layer departs on its own" in text
    for row in result.parity.layers.rows:
        assert f"| `{row.layer}` | {' -> '.join(f'`{n}`' for n in row.computed_by)} |" in text
    summary = acc.Tensors("summary")[0].tensor_proto.string_val[0].decode()
    assert "| first departing layer | none |" in summary


def test_the_reasons_are_told_apart():
    """On constructed tensors: ties rounded the other way, a layer computed otherwise than its
    inputs explain, one passing its input's differences on, a constant offset."""
    rng = np.random.default_rng(0)
    step = 0.05
    ours = np.round(rng.uniform(0, 5, size=(8, 100)) / step) * step
    ties = LayerAccumulator(LayerGrid("b", "ReLU", step, ("b",)), "t_b")
    flipped = ours.copy()
    flipped[0, :5] += step  # 5 of 800 values one step off
    ties.add(ours, flipped)
    otherwise = LayerAccumulator(LayerGrid("c", "Mul", step, ("c",), inputs=("b",)), "t_c")
    noisy = ours.copy()
    noisy[:, ::10] += 3 * step * rng.choice([-1, 1], size=noisy[:, ::10].shape)  # 10 % three steps off
    otherwise.add(ours, noisy)
    grown = LayerAccumulator(LayerGrid("d", "Conv", step, ("d",), inputs=("c",)), "t_d")
    grown.add(ours, noisy)  # as many values off as its input: passed on, not its own
    offset = LayerAccumulator(LayerGrid("a", "Add", step, ("a",)), "t_a")
    offset.add(ours, ours + 3 * step)
    table = explain([ties, otherwise, grown, offset])
    assert [r.kind for r in table.rows] == ["requantization", "otherwise", "grown", "offset"]
    assert [r.departs for r in table.rows] == [
        False,
        True,
        False,
        True,
    ] and table.first_departure.layer == "c"
    assert "grown from its inputs' differences: 'c' (3 steps on 10 %)" in table.rows[2].why
    assert "requantization" in table.rows[0].why and "0.62 %" in table.rows[0].why
    assert (
        "computed otherwise by the runtime: 10 % of values" in table.rows[1].why
        and "'b'" in table.rows[1].why
    )
    assert "constant offset of +3.00 steps" in table.rows[3].why
