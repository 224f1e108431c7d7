"""Each activation's grid is chosen from its collected values when the user, a network editor
rule or a target platform did not name a method: a shifted activation (a ReLU, then a batch
norm with a negative shift) gets a uniform grid with a zero point and a higher SQNR than a
symmetric grid gives it; symmetric values keep the signed symmetric grid and one-sided ones
the unsigned one; the exports carry the zero point with parity."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import model_compression_toolkit as mct
from model_compression_toolkit.core.calibration.quantizers import fake_quant
from model_compression_toolkit.core.calibration.statistics import StatisticsCollector
from model_compression_toolkit.core.calibration.thresholds import (
    CLIP_TOLERANCE,
    _histogram_values,
    error_power,
    fill_activation_config,
    histogram_error,
)
from model_compression_toolkit.core.config import QuantizationErrorMethod as QE
from model_compression_toolkit.core.config import QuantizationMethod as QM
from model_compression_toolkit.core.quant_config import ActivationQuantConfig
from model_compression_toolkit.pipeline.session import produced_graph

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*tf.lite.Interpreter is deprecated:UserWarning"),
    pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider':UserWarning"),
]

FAST = settings(max_examples=30, deadline=None)
SHIFT = -0.5  # the batch norm's shift after the ReLU: its outputs lie in [-0.5, ~4]


# ------------------------------------------------------------------ on a histogram
def _chosen(x: np.ndarray, error_method: QE = QE.MSE, method: QM = QM.SYMMETRIC, choose: bool = True):
    collector = StatisticsCollector(channel_axis=None)
    collector.update(x.astype(np.float32))
    cfg = ActivationQuantConfig(8, method, error_method, choose_grid=choose)
    fill_activation_config(cfg, collector.result())
    return cfg


def _sqnr(x: np.ndarray, cfg: ActivationQuantConfig) -> float:
    noise = np.sum((fake_quant(x, cfg.grid).astype(np.float64) - x) ** 2)
    return float(10 * np.log10(np.sum(x.astype(np.float64) ** 2) / noise))


# (KL's uniform search clips these values at half their range: its symmetric grid has the
# lower error, and is kept)
@pytest.mark.parametrize("error_method", [QE.MSE, QE.MAE, QE.NOCLIPPING])
def test_shifted_values_get_a_uniform_grid_with_a_higher_sqnr(error_method):
    rng = np.random.default_rng(0)
    x = np.maximum(rng.standard_normal(200_000), 0) * 1.5 + SHIFT  # relu -> bn: [-0.5, ~7]
    chosen = _chosen(x, error_method)
    symmetric = _chosen(x, error_method, choose=False)
    assert chosen.method == QM.UNIFORM and symmetric.method == QM.SYMMETRIC
    assert chosen.range_min < 0 < chosen.range_max and 0 < float(chosen.grid.zero_point) < 255
    assert _sqnr(x, chosen) >= _sqnr(x, symmetric) + 3.0  # the symmetric grid wastes its negative half


def test_a_small_negative_tail_against_a_large_positive_range_is_uniform():
    x = np.random.default_rng(1).uniform(-0.1, 5.0, 100_000)
    cfg = _chosen(x)
    assert cfg.method == QM.UNIFORM and _sqnr(x, cfg) >= _sqnr(x, _chosen(x, choose=False)) + 3.0


def test_symmetric_values_keep_the_signed_symmetric_grid_and_one_sided_the_unsigned():
    rng = np.random.default_rng(2)
    signed = _chosen(rng.standard_normal(100_000))
    assert signed.method == QM.SYMMETRIC and signed.signed and float(signed.grid.zero_point) == 0
    unsigned = _chosen(np.abs(rng.standard_normal(100_000)))
    assert unsigned.method == QM.SYMMETRIC and not unsigned.signed and unsigned.grid.qmin == 0
    assert float(unsigned.grid.zero_point) == 0


@pytest.mark.parametrize("method", [QM.SYMMETRIC, QM.POWER_OF_TWO])
def test_a_named_method_is_used_as_given_on_shifted_values(method):
    x = np.maximum(np.random.default_rng(3).standard_normal(100_000), 0) + SHIFT
    cfg = _chosen(x, method=method, choose=False)
    assert cfg.method == method and cfg.signed and float(cfg.grid.zero_point) == 0


@FAST
@given(
    hnp.arrays(np.float64, st.integers(1, 400), elements=st.floats(-50, 50, allow_nan=False)),
    st.sampled_from([QE.MSE, QE.MAE, QE.NOCLIPPING]),
)
@example(np.array([0.0, 1.53935686e-27]), QE.MSE)  # every error a float hair under 0: once no candidate
def test_the_chosen_grid_never_has_a_higher_error_than_the_symmetric_one(x, error_method):
    """On the histogram it was chosen on, by the error method's own error (MSE for NOCLIPPING):
    at most the tolerance above the searched symmetric grid's (the default takes the widest
    range within it), and never above the no-clipping symmetric grid's."""
    chosen, symmetric = _chosen(x, error_method), _chosen(x, error_method, choose=False)
    no_clipping = _chosen(x, QE.NOCLIPPING, choose=False)
    collector = StatisticsCollector(channel_axis=None)
    collector.update(x.astype(np.float32))
    bins = _histogram_values(collector.result())[0]
    p = error_power(error_method) or 2.0
    error = histogram_error(*bins, chosen.grid, p)
    slack = 1 + (CLIP_TOLERANCE if error_method != QE.NOCLIPPING else 0.0)
    assert error <= histogram_error(*bins, symmetric.grid, p) * slack * (1 + 1e-9) + 1e-300
    assert error <= histogram_error(*bins, no_clipping.grid, p) * (1 + 1e-9) + 1e-300
    assert float(fake_quant(np.zeros(1), chosen.grid)[0]) == 0.0  # an exact zero stays zero


def test_choosing_twice_gives_the_same_grid():
    """The similarity report's fix and tuning fill a config again: the choice is redone, not kept."""
    x = np.maximum(np.random.default_rng(4).standard_normal(50_000), 0) + SHIFT
    collector = StatisticsCollector(channel_axis=None)
    collector.update(x.astype(np.float32))
    cfg = ActivationQuantConfig(8, QM.SYMMETRIC, QE.MSE, choose_grid=True)
    fill_activation_config(cfg, collector.result())
    first = (cfg.method, cfg.range_min, cfg.range_max)
    fill_activation_config(cfg, collector.result())
    assert (cfg.method, cfg.range_min, cfg.range_max) == first and first[0] == QM.UNIFORM


# ------------------------------------------------------------------ on models, both frameworks
def _weights(seed: int = 0) -> dict[str, np.ndarray]:
    """conv0 (3->8, 3x3, no activation) -> conv1 (8->8, 3x3) -> relu -> bn (shift -0.5) ->
    conv2 (8->4, 1x1): PyTorch layouts."""
    rng = np.random.default_rng(seed)
    return {
        "conv0.weight": rng.normal(0, 0.3, (8, 3, 3, 3)), "conv0.bias": rng.normal(0, 0.05, 8),
        "conv1.weight": rng.normal(0, 0.2, (8, 8, 3, 3)), "conv1.bias": rng.normal(0, 0.05, 8),
        "bn.weight": rng.uniform(0.8, 1.2, 8), "bn.bias": np.full(8, SHIFT), "bn.mean": rng.uniform(0, 0.1, 8),
        "bn.var": rng.uniform(0.8, 1.2, 8), "conv2.weight": rng.normal(0, 0.3, (4, 8, 1, 1)),
        "conv2.bias": rng.normal(0, 0.05, 4),
    }  # fmt: skip


def torch_shifted_net():
    import torch
    from torch import nn

    w = {k: torch.tensor(v, dtype=torch.float32) for k, v in _weights().items()}
    model = nn.Sequential()
    model.add_module("conv0", nn.Conv2d(3, 8, 3, padding=1))
    model.add_module("conv1", nn.Conv2d(8, 8, 3, padding=1))
    model.add_module("relu", nn.ReLU())
    model.add_module("bn", nn.BatchNorm2d(8, eps=1e-3))
    model.add_module("conv2", nn.Conv2d(8, 4, 1))
    with torch.no_grad():
        for name in ("conv0", "conv1", "conv2"):
            getattr(model, name).weight.copy_(w[f"{name}.weight"])
            getattr(model, name).bias.copy_(w[f"{name}.bias"])
        model.bn.weight.copy_(w["bn.weight"])
        model.bn.bias.copy_(w["bn.bias"])
        model.bn.running_mean.copy_(w["bn.mean"])
        model.bn.running_var.copy_(w["bn.var"])
    return model.eval()


def keras_shifted_net():
    import keras

    w = {k: v.astype(np.float32) for k, v in _weights().items()}
    layers = keras.layers
    inputs = keras.Input((16, 16, 3))
    x = layers.Conv2D(8, 3, padding="same", name="conv0")(inputs)
    x = layers.Conv2D(8, 3, padding="same", name="conv1")(x)
    x = layers.ReLU(name="relu")(x)
    x = layers.BatchNormalization(epsilon=1e-3, name="bn")(x)
    model = keras.Model(inputs, layers.Conv2D(4, 1, name="conv2")(x))
    for name in ("conv0", "conv1", "conv2"):
        model.get_layer(name).set_weights([w[f"{name}.weight"].transpose(2, 3, 1, 0), w[f"{name}.bias"]])
    model.get_layer("bn").set_weights([w["bn.weight"], w["bn.bias"], w["bn.mean"], w["bn.var"]])
    return model


NETS = {"pytorch": torch_shifted_net, "keras": keras_shifted_net}


def _data(fw, n: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, 3, 16, 16)).astype(np.float32)
    return x.transpose(0, 2, 3, 1).copy() if fw.channels_last else x


def _quantize(fw, method: QM | None = None, tpc=None, only_bn: bool = False, output_float: bool = False):
    calibration = _data(fw, 64, seed=10)
    qc = mct.core.QuantizationConfig(activation_quantization_method=method)
    keep = mct.core.KeepFloat(patterns=["(?!bn$).*"]) if only_bn else ()  # every layer but bn float
    if output_float:  # the model output's grid is not chosen by the method (`calibration.outputs`)
        keep = mct.core.KeepFloat(names=["conv2"], weights=False)
    config = mct.core.CoreConfig(
        quantization_config=qc, debug_config=mct.core.DebugConfig(analyze_similarity=False), keep_float=keep
    )

    def data():
        return iter([[calibration[i : i + 16]] for i in range(0, 64, 16)])

    q_model, _ = fw.ptq(NETS[fw.name](), data, core_config=config, target_platform_capabilities=tpc)
    return q_model, data


def _output_sqnr(fw, q_model) -> float:
    x = _data(fw, 64, seed=11)  # held out
    ref = fw.predict(NETS[fw.name]())(x).astype(np.float64)
    out = fw.predict(q_model)(x).astype(np.float64)
    return float(10 * np.log10(np.sum(ref**2) / np.sum((out - ref) ** 2)))


def _methods(q_model) -> dict[str, tuple[QM, bool]]:
    graph = produced_graph(q_model)
    return {
        n.name: (n.quant.activation.method, n.quant.activation.signed)
        for n in graph.nodes()
        if n.quant.activation
    }


def test_the_shifted_activation_gets_a_uniform_grid_and_the_model_a_higher_sqnr(fw):
    chosen, _ = _quantize(fw)
    methods = _methods(chosen)
    assert methods["bn"][0] == QM.UNIFORM
    assert methods["conv0"] == (QM.SYMMETRIC, True)  # a conv's zero-mean output: signed symmetric
    assert methods["relu"] == (QM.SYMMETRIC, False)  # the ReLU (conv1 fused into it): unsigned
    bn = produced_graph(chosen).node("bn").quant.activation
    assert bn.range_min < 0 and 0 < float(bn.grid.zero_point) < 255
    symmetric, _ = _quantize(fw, QM.SYMMETRIC)
    assert _methods(symmetric)["bn"] == (QM.SYMMETRIC, True)
    # with every other quantizer's noise (the model output's own grid left out of the comparison)
    chosen, symmetric = _quantize(fw, output_float=True)[0], _quantize(fw, QM.SYMMETRIC, output_float=True)[0]
    assert _output_sqnr(fw, chosen) > _output_sqnr(fw, symmetric) + 0.2
    # bn's quantizer alone (every other layer float): its grid's own gain reaches the output
    alone, alone_symmetric = _quantize(fw, only_bn=True)[0], _quantize(fw, QM.SYMMETRIC, only_bn=True)[0]
    assert set(_methods(alone)) == {"bn"} and _methods(alone)["bn"][0] == QM.UNIFORM
    assert _output_sqnr(fw, alone) >= _output_sqnr(fw, alone_symmetric) + 3.0


@pytest.mark.parametrize("method", [QM.SYMMETRIC, QM.POWER_OF_TWO])
def test_a_users_method_is_used_for_every_activation(fw, method):
    q_model, _ = _quantize(fw, method)
    assert {m for m, _ in _methods(q_model).values()} == {method}


def test_a_target_platforms_method_is_used_for_every_activation(fw):
    tpc = mct.get_target_platform_capabilities(fw.name, "default")
    q_model, _ = _quantize(fw, tpc=tpc)
    assert {m for m, _ in _methods(q_model).values()} == {tpc.activation_quantization_method}
    # a method the user names wins over the platform's, as any field set away from its default
    q_model, _ = _quantize(fw, QM.SYMMETRIC, tpc=tpc)
    assert _methods(q_model)["bn"][0] == QM.SYMMETRIC


def test_onnx_qdq_carries_the_uniform_zero_point_with_parity(tmp_path):
    import onnx
    from onnx import numpy_helper

    from tests.conftest import FRAMEWORKS

    q_model, data = _quantize(FRAMEWORKS["pytorch"])
    bn = produced_graph(q_model).node("bn").quant.activation
    result = mct.exporter.pytorch_export_model(q_model, str(tmp_path / "m.onnx"), data)
    assert result.parity_ok, result.parity
    model = onnx.load(str(result.path))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    grids = {
        (float(inits[n.input[1]]), int(inits[n.input[2]]))
        for n in model.graph.node
        if n.op_type == "QuantizeLinear" and n.input[2] in inits
    }
    assert (float(np.float32(bn.grid.scale)), int(bn.grid.zero_point)) in grids  # uint8: zero point as chosen


def test_tflite_int8_carries_the_uniform_zero_point_with_parity(tmp_path):
    import tensorflow as tf

    from tests.conftest import FRAMEWORKS

    q_model, data = _quantize(FRAMEWORKS["keras"])
    bn = produced_graph(q_model).node("bn").quant.activation
    E = mct.exporter
    result = E.keras_export_model(q_model, str(tmp_path / "m.tflite"), serialization_format=E.KerasExportSerializationFormat.TFLITE,
                                  quantization_format=E.QuantizationFormat.INT8, repr_dataset=data)  # fmt: skip
    assert result.parity_ok, result.parity
    tensors = tf.lite.Interpreter(model_path=str(result.path)).get_tensor_details()
    grids = {
        (float(t["quantization"][0]), int(t["quantization"][1])) for t in tensors if t["dtype"] == np.int8
    }
    scale = float(np.float32(bn.grid.scale))
    assert any(abs(s - scale) <= 1e-6 * scale and z == int(bn.grid.zero_point) - 128 for s, z in grids)
