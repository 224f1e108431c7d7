"""Grids other than the defaults in the exported files: power-of-two scales, fewer than 8 bits,
mixed precision, 16 bits in ONNX. Each export is compared with its quantized model."""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.pipeline.session import produced_graph
from tests.fixtures.digits import representative_dataset
from tests.fixtures.trained import load_trained

# The tests open the files with the runtimes themselves, as users do; these runtimes announce
# their own deprecations (torch.jit for torch.export, tf.lite.Interpreter for LiteRT).
pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:.*tf.lite.Interpreter is deprecated:UserWarning"),
    pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider':UserWarning"),
]


E = mct.exporter
QM = mct.core.QuantizationMethod


def _quantize(framework: str, **kwargs):
    from tests.conftest import FRAMEWORKS

    fw = FRAMEWORKS[framework]
    data = representative_dataset(fw.data()[0], 2, 16)
    budget = kwargs.pop("target_resource_utilization", None)
    config = mct.core.CoreConfig(
        quantization_config=mct.core.QuantizationConfig(**kwargs),
        debug_config=mct.core.DebugConfig(analyze_similarity=False),
        quantize_outputs=True,  # every grid up to the outputs is in the file
    )
    if budget is not None:
        return fw.ptq(load_trained(framework), data, target_resource_utilization=budget, core_config=config)[0], data
    return fw.ptq(load_trained(framework), data, config)[0], data


def _onnx(q_model, data, path, **kwargs):
    import onnx
    from onnx import numpy_helper

    result = E.pytorch_export_model(q_model, path, data, **kwargs)
    assert result.parity_ok, result.parity
    model = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return result, model, inits


def _tflite(q_model, data, path):
    import tensorflow as tf

    result = E.keras_export_model(q_model, path, serialization_format="TFLITE", quantization_format="INT8",
                                  repr_dataset=data)  # fmt: skip
    assert result.parity_ok, result.parity
    return result, tf.lite.Interpreter(model_path=str(path)).get_tensor_details()


def _power_of_two(values) -> bool:
    exponents = np.log2(np.asarray(values, dtype=np.float64))
    return bool(np.all(exponents == np.round(exponents)))


def test_power_of_two_grids_keep_power_of_two_scales(tmp_path):
    q_model, data = _quantize("pytorch", weights_quantization_method=QM.POWER_OF_TWO,
                              activation_quantization_method=QM.POWER_OF_TWO)  # fmt: skip
    _, model, inits = _onnx(q_model, data, tmp_path / "m.onnx")
    grids = [
        inits[
            n.input[1]
        ]  # activations, and kernels (int8); int32 biases sit on s_in * s_w, a power of two too
        for n in model.graph.node
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.input[1] in inits
    ]
    assert len(grids) > 10 and all(_power_of_two(s) for s in grids)
    keras_q, keras_data = _quantize("keras", weights_quantization_method=QM.POWER_OF_TWO,
                                    activation_quantization_method=QM.POWER_OF_TWO)  # fmt: skip
    _, tensors = _tflite(keras_q, keras_data, tmp_path / "m.tflite")
    int8 = [t["quantization_parameters"]["scales"] for t in tensors if t["dtype"] == np.int8]
    assert len(int8) > 8 and all(_power_of_two(s) for s in int8)


def test_4_bit_weights_are_stored_as_their_integers(tmp_path):
    q_model, data = _quantize("pytorch", weights_n_bits=4)
    _, model, inits = _onnx(q_model, data, tmp_path / "m.onnx")
    kernels = [v for k, v in inits.items() if k.endswith(".weight_q")]
    assert len(kernels) == 4 and all(v.dtype == np.int8 and v.min() >= -8 and v.max() <= 7 for v in kernels)
    keras_q, keras_data = _quantize("keras", weights_n_bits=4)
    _, tensors = _tflite(keras_q, keras_data, tmp_path / "m.tflite")
    assert (
        sum(1 for t in tensors if t["dtype"] == np.int8 and len(t["quantization_parameters"]["scales"]) > 1)
        == 4
    )


@pytest.mark.parametrize("framework", ["pytorch", "keras"])
def test_4_bit_activations_are_clamped_to_their_grid(framework, tmp_path):
    q_model, data = _quantize(framework, activation_n_bits=4)
    if framework == "pytorch":
        result, model, _ = _onnx(q_model, data, tmp_path / "m.onnx")
        assert sum(1 for n in model.graph.node if n.op_type == "Clip") >= 4  # one per narrow activation grid
    else:
        result, tensors = _tflite(q_model, data, tmp_path / "m.tflite")
        assert {"MINIMUM"} <= set(result.ops) and not [t for t in tensors if t["dtype"] == np.float32][2:]
    (parity,) = result.parity
    assert parity.max_steps <= 1.001 and parity.top1_agreement >= 0.95


def test_mixed_precision_bit_widths_are_exported_per_layer(tmp_path):
    budget = mct.core.ResourceUtilization(weights_memory=14_000)
    q_model, data = _quantize("pytorch", target_resource_utilization=budget)
    bits = {
        n.name: n.quant.weights["kernel"].n_bits for n in produced_graph(q_model).nodes() if n.quant.weights
    }
    assert len(set(bits.values())) > 1, bits  # the budget gives layers different bit widths
    _, _, inits = _onnx(q_model, data, tmp_path / "m.onnx")
    for name, n_bits in bits.items():
        values = inits[f"{name}.weight_q"]
        assert values.min() >= -(2 ** (n_bits - 1)) and values.max() <= 2 ** (n_bits - 1) - 1


def test_16_bit_activations_in_onnx_use_uint16_at_opset_21(tmp_path):
    q_model, data = _quantize("pytorch", activation_n_bits=16)
    result, model, inits = _onnx(q_model, data, tmp_path / "m.onnx")
    assert model.opset_import[0].version == 21
    zero_points = [inits[n.input[2]] for n in model.graph.node if n.op_type == "QuantizeLinear"]
    assert zero_points and all(z.dtype == np.uint16 for z in zero_points)
    assert (
        result.parity[0].max_steps <= 1.01
    )  # float32 holds 16-bit steps of values near 8 to about 0.004 steps
