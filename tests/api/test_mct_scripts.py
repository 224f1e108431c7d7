"""MCT-style scripts, written as MCT's tutorials write them, run end to end on digits in both
frameworks: PTQ with a platform, mixed precision from the resource utilization data, manual
bit-widths (16-bit activations included), the network editor, the threshold tutorials and
xquant. Margins hold on any CPU: accuracies are compared with wide margins, thresholds by
inequalities the searches guarantee."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.observers.stage_view import stage_run
from tests.fixtures.digits import accuracy, representative_dataset
from tests.fixtures.tb import load

FW_NAME = {"pytorch": "pytorch", "keras": "tensorflow"}
NO_SIMILARITY = mct.core.DebugConfig(analyze_similarity=False)


def model_arg(fw, model) -> dict:
    """MCT's keyword for the model: ``in_module`` (PyTorch) or ``in_model`` (Keras)."""
    return {"in_module" if fw.name == "pytorch" else "in_model": model}


def layer_names(fw, model) -> dict[str, str]:
    """The digits CNN's layers, by role (Keras names depend on the layers made before)."""
    if fw.name == "pytorch":
        return {"conv": "0", "relu": "2", "last_relu": "8", "dense": "11"}
    of = {kind: [layer.name for layer in model.layers if type(layer).__name__ == kind] for kind in ("Conv2D", "ReLU", "Dense")}
    return {"conv": of["Conv2D"][0], "relu": of["ReLU"][0], "last_relu": of["ReLU"][-1], "dense": of["Dense"][0]}


def layer_type(fw, role: str):
    if fw.name == "pytorch":
        import torch

        return {"conv": torch.nn.Conv2d, "dense": torch.nn.Linear}[role]
    import keras

    return {"conv": keras.layers.Conv2D, "dense": keras.layers.Dense}[role]


def ru_data(fw):
    return mct.core.pytorch_resource_utilization_data if fw.name == "pytorch" else mct.core.keras_resource_utilization_data


def activation_thresholds(info) -> dict[str, float]:
    return {n: layer.activation["threshold"] for n, layer in info.layers.items() if layer.activation}


# ----------------------------------------------------------- PTQ tutorial
def test_ptq_tutorial_with_the_default_platform(fw, trained_digits):
    model, x_train, x_test, y_test = trained_digits
    target_platform_cap = mct.get_target_platform_capabilities(FW_NAME[fw.name], "default")
    quantized_model, quantization_info = fw.ptq(
        **model_arg(fw, model),
        representative_data_gen=representative_dataset(x_train),
        target_platform_capabilities=target_platform_cap,
    )
    float_acc = accuracy(fw.predict(model), x_test, y_test)
    assert accuracy(fw.predict(quantized_model), x_test, y_test) >= float_acc - 3.0
    layers = quantization_info.layers
    assert all(layer.activation["method"] == "power_of_two" for layer in layers.values() if layer.activation)
    for layer in layers.values():
        for w in layer.weights.values():
            assert (w["method"], w["n_bits"], w["per_channel"]) == ("symmetric", 8, True)
            thresholds = np.asarray(w["threshold"])
            assert thresholds.size > 1
    ru = quantization_info.final_resource_utilization  # MCT's UserInformation names
    assert ru.weights_memory == quantization_info.memory.weights_quantized_bytes and ru.bops > 0
    assert quantization_info.input_scale == 1.0
    with pytest.raises(AttributeError, match="info.mixed_precision.bits"):
        _ = quantization_info.mixed_precision_cfg


def test_keyword_and_old_positional_calls_keep_working(fw, trained_digits):
    model, x_train, _, _ = trained_digits
    gen = representative_dataset(x_train, 2)
    config = mct.core.CoreConfig(quantization_config=mct.core.QuantizationConfig(weights_n_bits=4), debug_config=NO_SIMILARITY)
    _, old = fw.ptq(model, gen, config)  # this library's earlier order: core_config third
    _, new = fw.ptq(model, gen, core_config=config)
    for info in (old, new):
        assert {w["n_bits"] for layer in info.layers.values() for w in layer.weights.values()} == {4}


# ------------------------------------------------- mixed precision tutorial
def test_mixed_precision_tutorial(fw, trained_digits):
    model, x_train, x_test, y_test = trained_digits
    gen = representative_dataset(x_train)
    target_platform_cap = mct.get_target_platform_capabilities(FW_NAME[fw.name], "imx500", target_platform_version="v1")
    configuration = mct.core.CoreConfig(
        mixed_precision_config=mct.core.MixedPrecisionQuantizationConfig(num_of_images=32, use_hessian_based_scores=False)
    )
    resource_utilization_data = ru_data(fw)(
        model, gen, configuration, target_platform_capabilities=target_platform_cap
    )
    ru = resource_utilization_data
    assert 0 < ru.weights_memory < ru.total_memory and ru.activation_memory > 0 and ru.bops > 0
    resource_utilization = mct.core.ResourceUtilization(resource_utilization_data.weights_memory * 0.75)
    quantized_model, quantization_info = fw.ptq(
        model, gen, target_resource_utilization=resource_utilization, core_config=configuration,
        target_platform_capabilities=target_platform_cap,
    )  # fmt: skip
    mixed = quantization_info.mixed_precision
    assert mixed.weights_memory <= resource_utilization.weights_memory
    assert min(mixed.bits.values()) < 8 and set(mixed.bits.values()) <= {8, 4, 2}
    assert mixed.samples == 32
    assert accuracy(fw.predict(quantized_model), x_test, y_test) >= accuracy(fw.predict(model), x_test, y_test) - 15


def test_total_and_activation_memory_targets(fw, trained_digits):
    model, x_train, _, _ = trained_digits
    gen = representative_dataset(x_train, 2)
    config = mct.core.CoreConfig(debug_config=NO_SIMILARITY)
    ru = ru_data(fw)(model, gen, config)
    total = mct.core.ResourceUtilization(total_memory=ru.activation_memory + 0.6 * ru.weights_memory)
    _, info = fw.ptq(model, gen, total, config)
    assert info.mixed_precision.weights_memory <= 0.6 * ru.weights_memory + 1e-6
    with pytest.raises(mct.errors.ResourceBudgetError, match="activation bit-widths are not searched"):
        fw.ptq(model, gen, mct.core.ResourceUtilization(activation_memory=ru.activation_memory / 2), config)


# ---------------------------------------------- manual bit-widths (IMX500 export style)
def test_manual_bit_widths_with_16_bit_activations(fw, trained_digits):
    model, x_train, _, _ = trained_digits
    gen = representative_dataset(x_train)
    names = layer_names(fw, model)
    tpc = mct.get_target_platform_capabilities(tpc_version="4.0", device_type="imx500")
    bit_cfg = mct.core.BitWidthConfig()
    bit_cfg.set_manual_activation_bit_width([mct.core.common.network_editors.NodeNameFilter(names["relu"])], 16)
    bit_cfg.set_manual_weights_bit_width(mct.core.network_editor.NodeTypeFilter(layer_type(fw, "dense")), 4, "kernel")
    config = mct.core.CoreConfig(
        mixed_precision_config=mct.core.MixedPrecisionQuantizationConfig(num_of_images=10),
        quantization_config=mct.core.QuantizationConfig(concat_threshold_update=True),
        bit_width_config=bit_cfg,
        debug_config=NO_SIMILARITY,
    )
    ru = ru_data(fw)(model, gen, config, tpc)
    resource_utilization = mct.core.ResourceUtilization(weights_memory=ru.weights_memory * 0.8)
    quant_model, info = fw.ptq(
        **model_arg(fw, model), representative_data_gen=gen, target_resource_utilization=resource_utilization,
        core_config=config, target_platform_capabilities=tpc,
    )  # fmt: skip
    assert info.layers[names["relu"]].activation["n_bits"] == 16
    assert info.layers[names["last_relu"]].activation["n_bits"] == 8
    assert info.layers[names["dense"]].weights["kernel"]["n_bits"] == 4
    assert names["dense"] not in info.mixed_precision.bits  # fixed by hand: not searched
    assert info.memory.weights_quantized_bytes <= resource_utilization.weights_memory
    v1 = mct.get_target_platform_capabilities(FW_NAME[fw.name], "default")
    with pytest.raises(mct.errors.ConfigurationError, match=r"allows \[8\] there.*imx500 4.0"):
        fw.ptq(model, gen, core_config=config, target_platform_capabilities=v1)


# ------------------------------------------------------ network editor tutorial
def test_network_editor_tutorial(fw, trained_digits):
    model, x_train, _, _ = trained_digits
    gen = representative_dataset(x_train, 2)
    names = layer_names(fw, model)
    attr = "weight" if fw.name == "pytorch" else "kernel"  # each framework's own name for the kernel
    edit_rules_list = [
        mct.core.network_editor.EditRule(
            filter=mct.core.network_editor.NodeTypeFilter(layer_type(fw, "conv")),
            action=mct.core.network_editor.ChangeCandidatesWeightsQuantConfigAttr(attr_name=attr, weights_n_bits=4),
        )
    ]
    core_config = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(network_editor=edit_rules_list))
    _, info = fw.ptq(**model_arg(fw, model), representative_data_gen=gen, core_config=core_config)
    bits = {n: layer.weights["kernel"]["n_bits"] for n, layer in info.layers.items() if layer.weights}
    assert bits.pop(names["dense"]) == 8 and set(bits.values()) == {4}

    _, plain = fw.ptq(model, gen)
    z_rules = [
        mct.core.network_editor.EditRule(
            filter=mct.core.network_editor.NodeTypeFilter(layer_type(fw, "conv")),
            action=mct.core.network_editor.ChangeCandidatesActivationQuantConfigAttr(z_threshold=1),
        )
    ]
    _, edited = fw.ptq(model, gen, core_config=mct.core.CoreConfig(debug_config=mct.core.DebugConfig(network_editor=z_rules)))
    before, after = activation_thresholds(plain), activation_thresholds(edited)
    # a conv's output is quantized after its ReLU: the edit lands there, and only there
    assert after[names["relu"]] < before[names["relu"]]
    changed = {n for n in before if after[n] != before[n]}
    assert changed <= {n for n, layer in plain.layers.items() if layer.kind == "activation"}, changed

    typo = [mct.core.network_editor.EditRule(
        filter=mct.core.network_editor.NodeNameFilter(names["conv"] + "x"),
        action=mct.core.network_editor.ChangeCandidatesActivationQuantConfigAttr(activation_n_bits=4),
    )]  # fmt: skip
    with pytest.raises(mct.errors.LayerSelectionError, match="selects no layer; closest layer names"):
        fw.ptq(model, gen, core_config=mct.core.CoreConfig(debug_config=mct.core.DebugConfig(network_editor=typo)))


# ------------------------------------- threshold search and z-score tutorials
def test_activation_threshold_search_and_z_score_tutorials(fw, trained_digits):
    model, x_train, _, _ = trained_digits
    gen = representative_dataset(x_train, 2)
    target_platform_cap = mct.get_target_platform_capabilities(FW_NAME[fw.name], "default")
    QE = mct.core.QuantizationErrorMethod
    q_configs_dict = {m: mct.core.QuantizationConfig(activation_error_method=m) for m in (QE.MSE, QE.NOCLIPPING, QE.KL)}
    q_configs_dict.update({z: mct.core.QuantizationConfig(z_threshold=z) for z in (3, 9)})
    thresholds = {}
    for key, q_config in q_configs_dict.items():
        ptq_config = mct.core.CoreConfig(quantization_config=q_config, debug_config=NO_SIMILARITY)
        _, quantization_info = fw.ptq(
            **model_arg(fw, model), representative_data_gen=gen, core_config=ptq_config,
            target_platform_capabilities=target_platform_cap,
        )  # fmt: skip
        thresholds[key] = activation_thresholds(quantization_info)
    no_clipping = thresholds[QE.NOCLIPPING]
    for key in (QE.MSE, QE.KL, 3, 9):  # every search stays within the no-clipping range
        assert all(thresholds[key][n] <= no_clipping[n] for n in no_clipping)
    assert thresholds[QE.KL] != thresholds[QE.MSE] or thresholds[3] != thresholds[9]


def test_hmse_and_shift_negative_run_end_to_end(fw, trained_digits):
    model, x_train, x_test, y_test = trained_digits
    gen = representative_dataset(x_train, 2)
    QE = mct.core.QuantizationErrorMethod
    qc = mct.core.QuantizationConfig(weights_n_bits=4, weights_error_method=QE.HMSE, shift_negative_activation_correction=True)
    q_model, info = fw.ptq(model, gen, core_config=mct.core.CoreConfig(quantization_config=qc, debug_config=NO_SIMILARITY))
    _, mse = fw.ptq(model, gen, core_config=mct.core.CoreConfig(
        quantization_config=mct.core.QuantizationConfig(weights_n_bits=4), debug_config=NO_SIMILARITY))  # fmt: skip
    hmse_t = {n: np.asarray(layer.weights["kernel"]["threshold"]) for n, layer in info.layers.items() if layer.weights}
    mse_t = {n: np.asarray(layer.weights["kernel"]["threshold"]) for n, layer in mse.layers.items() if layer.weights}
    assert any(not np.array_equal(hmse_t[n], mse_t[n]) for n in hmse_t)
    assert accuracy(fw.predict(q_model), x_test, y_test) > 50


# ------------------------------------------------------------------ xquant
def _mae(fw):
    if fw.name == "pytorch":
        import torch

        return lambda x, y: torch.nn.L1Loss()(x, y).item()
    return lambda x, y: float(np.mean(np.abs(x.flatten() - y.flatten())))


def labelled(x, y, batches=2, batch_size=16):
    for i in range(batches):
        yield [[x[i * batch_size : (i + 1) * batch_size]], y[i * batch_size : (i + 1) * batch_size]]


def test_xquant_tutorial(fw, trained_digits, tmp_path):
    model, x_train, x_test, y_test = trained_digits
    repr_gen = representative_dataset(x_train, 2, 16)
    quantized_model, _ = fw.ptq(**model_arg(fw, model), representative_data_gen=repr_gen)
    validation_dataset = partial(labelled, x_test, y_test)
    xquant_config = mct.xquant.XQuantConfig(report_dir=str(tmp_path / "logs"), custom_similarity_metrics={"mae": _mae(fw)})
    report = (mct.xquant.xquant_report_pytorch_experimental if fw.name == "pytorch"
              else mct.xquant.xquant_report_keras_experimental)  # fmt: skip
    result = report(model, quantized_model, repr_gen, validation_dataset, xquant_config)
    assert set(result) == {
        "output_similarity_metrics_repr", "output_similarity_metrics_val",
        "intermediate_similarity_metrics_repr", "intermediate_similarity_metrics_val",
    }  # fmt: skip
    for which in ("repr", "val"):
        output = result[f"output_similarity_metrics_{which}"]
        assert set(output) == {"mse", "cs", "sqnr", "mae"} and output["cs"] > 0.9
        layers = result[f"intermediate_similarity_metrics_{which}"]
        assert layer_names(fw, model)["relu"] in layers
        for values in layers.values():
            assert set(values) == {"mse", "cs", "sqnr", "mae"} and all(np.isfinite(list(values.values())))
            assert values["mae"] ** 2 <= values["mse"] * (1 + 1e-4) + 1e-12  # Jensen: the custom metric saw the same tensors
    saved = json.loads((tmp_path / "logs" / "quant_report.json").read_text())
    assert saved["output_similarity_metrics_val"]["mae"] == pytest.approx(result["output_similarity_metrics_val"]["mae"])
    calls = sorted(p.name for p in (tmp_path / "logs").iterdir() if p.is_dir())
    assert len(calls) == 2 and "_xquant_repr_" in calls[0] and "_xquant_val_" in calls[1]
    acc = load(tmp_path / "logs" / calls[1] / stage_run("quantized_graph"))
    assert acc.Graph() is not None


def test_xquant_troubleshoot(fw, trained_digits, tmp_path):
    model, x_train, x_test, y_test = trained_digits
    gen = representative_dataset(x_train, 1, 16)
    qc = mct.core.QuantizationConfig(weights_n_bits=2, activation_n_bits=3)
    quantized_model, _ = fw.ptq(model, gen, core_config=mct.core.CoreConfig(quantization_config=qc))
    report = (mct.xquant.xquant_report_troubleshoot_pytorch_experimental if fw.name == "pytorch"
              else mct.xquant.xquant_report_troubleshoot_keras_experimental)  # fmt: skip
    config = mct.xquant.XQuantConfig(
        report_dir=str(tmp_path), threshold_quantize_error={"sqnr": 25.0}, threshold_degrade_layer_ratio=1.0
    )
    result = report(model, quantized_model, gen, partial(labelled, x_test, y_test, 1), config)
    trouble = result["troubleshoot"]
    assert trouble["degraded_layers"] and all(names == ["sqnr"] for names in trouble["degraded_layers"].values())
    assert trouble["findings"] and all("mct." in f["advice"] for f in trouble["findings"])
    last = [f for f in trouble["findings"] if f["cause"] == "last layer at very few bits"]
    assert last and last[0]["layers"] == [layer_names(fw, model)["dense"]]
