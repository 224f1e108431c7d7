"""MCT's names: signatures, target platforms, configuration objects that act or say what to
use instead, and the modules this library does not provide."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.core.resolution import resolve_core_config
from model_compression_toolkit.errors import ConfigurationError, NotProvidedError

# Every MCT name a PTQ / mixed precision / debugging / xquant script reaches
MCT_NAMES = [
    "get_target_platform_capabilities", "set_log_folder", "ptq.pytorch_post_training_quantization",
    "ptq.keras_post_training_quantization", "core.CoreConfig", "core.QuantizationConfig",
    "core.QuantizationErrorMethod.MSE", "core.QuantizationErrorMethod.NOCLIPPING", "core.QuantizationErrorMethod.MAE",
    "core.QuantizationErrorMethod.LP", "core.QuantizationErrorMethod.KL", "core.QuantizationErrorMethod.HMSE",
    "core.DebugConfig", "core.MixedPrecisionQuantizationConfig", "core.MpDistanceWeighting.AVG",
    "core.MpMetricNormalization.NONE", "core.ResourceUtilization", "core.BitWidthConfig",
    "core.pytorch_resource_utilization_data", "core.keras_resource_utilization_data",
    "core.network_editor.EditRule", "core.network_editor.NodeTypeFilter", "core.network_editor.NodeNameFilter",
    "core.network_editor.NodeNameScopeFilter", "core.network_editor.ChangeCandidatesWeightsQuantConfigAttr",
    "core.network_editor.ChangeFinalWeightsQuantConfigAttr", "core.network_editor.ChangeCandidatesActivationQuantConfigAttr",
    "core.network_editor.ChangeFinalActivationQuantConfigAttr", "core.network_editor.ChangeQuantizationParamFunction",
    "core.network_editor.ChangeCandidatesActivationQuantizationMethod",
    "core.network_editor.ChangeFinalWeightsQuantizationMethod",
    "core.network_editor.ChangeCandidatesWeightsQuantizationMethod",
    "core.common.network_editors.NodeNameFilter", "core.common.network_editors.NodeTypeFilter",
    "xquant.XQuantConfig", "xquant.xquant_report_pytorch_experimental", "xquant.xquant_report_keras_experimental",
    "xquant.xquant_report_troubleshoot_pytorch_experimental",
    "gptq.pytorch_gradient_post_training_quantization", "gptq.get_pytorch_gptq_config",
    "gptq.keras_gradient_post_training_quantization", "gptq.get_keras_gptq_config", "gptq.GradientPTQConfig",
    "gptq.RoundingType.SoftQuantizer", "qat.pytorch_quantization_aware_training_init_experimental",
    "qat.keras_quantization_aware_training_init_experimental", "qat.QATConfig", "qat.TrainingMethod.STE",
    "pruning.pytorch_pruning_experimental", "pruning.keras_pruning_experimental", "pruning.PruningConfig",
    "data_generation.pytorch_data_generation_experimental", "data_generation.get_pytorch_data_generation_config",
    "data_generation.keras_data_generation_experimental", "data_generation.ImageGranularity.BatchWise",
]  # fmt: skip


@pytest.mark.parametrize("path", MCT_NAMES)
def test_every_mct_name_is_reachable(path):
    value = mct
    for part in path.split("."):
        value = getattr(value, part)
    assert value is not None


def test_importing_the_modules_we_do_not_provide_works():
    from model_compression_toolkit.gptq import get_pytorch_gptq_config  # noqa: F401
    from model_compression_toolkit.xquant import XQuantConfig  # noqa: F401


@pytest.mark.parametrize(
    "call, instead",
    [
        (lambda: mct.gptq.pytorch_gradient_post_training_quantization(None, None), "mct.ptq.pytorch_post_training"),
        (lambda: mct.gptq.get_pytorch_gptq_config(n_epochs=5), "tuned_post_training_quantization"),
        (lambda: mct.qat.pytorch_quantization_aware_training_init_experimental(None, None), "after training"),
        (lambda: mct.pruning.pytorch_pruning_experimental(None, None, None), "ResourceUtilization"),
        (lambda: mct.data_generation.get_pytorch_data_generation_config(), "real inputs"),
        (lambda: mct.gptq.some_future_name(), "mct.ptq"),
    ],
)
def test_calling_what_we_do_not_provide_says_what_to_use(call, instead):
    with pytest.raises(NotProvidedError, match="not part of this library") as err:
        call()
    assert instead in str(err.value)


# ------------------------------------------------------------ signatures
@pytest.mark.parametrize("name, first", [("pytorch_post_training_quantization", "in_module"),
                                         ("keras_post_training_quantization", "in_model")])  # fmt: skip
def test_ptq_takes_mcts_argument_order(name, first):
    params = inspect.signature(getattr(mct.ptq, name)).parameters
    positional = [p for p, v in params.items() if v.kind is not inspect.Parameter.KEYWORD_ONLY]
    assert positional == [first, "representative_data_gen", "target_resource_utilization", "core_config",
                          "target_platform_capabilities"]  # fmt: skip
    assert [p for p in params if p not in positional] == ["run_name"]  # this library's own, by keyword only


# ------------------------------------------------------- target platforms
@pytest.mark.parametrize(
    "args, kwargs, device, version",
    [
        (("pytorch", "default"), {}, "imx500", "1.0"),
        (("tensorflow", "imx500"), {"target_platform_version": "v1"}, "imx500", "1.0"),
        (("pytorch", "imx500", "v1_pot"), {}, "imx500", "1.0_pot"),
        (("pytorch", "imx500", "v4"), {}, "imx500", "4.0"),
        (("tensorflow", "tflite"), {}, "tflite", "1.0"),
        (("pytorch", "qnnpack"), {}, "qnnpack", "1.0"),
        ((), {"tpc_version": "4.0", "device_type": "imx500"}, "imx500", "4.0"),
        ((), {"tpc_version": 1.0, "device_type": "tflite"}, "tflite", "1.0"),
        ((), {"tpc_version": "1.0"}, "imx500", "1.0"),
        (("4.0", "imx500"), {}, "imx500", "4.0"),
        ((), {"tpc_version": "1", "device_type": "imx500", "extended_version": "pot"}, "imx500", "1.0_pot"),
    ],
)
def test_get_target_platform_capabilities_in_both_signatures(args, kwargs, device, version):
    tpc = mct.get_target_platform_capabilities(*args, **kwargs)
    assert (tpc.tpc_platform_type, tpc.tpc_version) == (device, version)


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        (("torch", "default"), {}, "fw_name must be one of"),
        (("pytorch", "jetson"), {}, "unknown target platform 'jetson'; known: imx500"),
        (("pytorch", "imx500", "v1_lut"), {}, "lookup-table"),
        ((), {"tpc_version": "6.0", "device_type": "imx500"}, "imx500 versions 1.0, 1.0_pot, 4.0"),
        ((), {"tpc_version": "latest"}, "not a version"),
    ],
)
def test_unknown_platforms_name_the_known_ones(args, kwargs, match):
    with pytest.raises(ConfigurationError, match=match):
        mct.get_target_platform_capabilities(*args, **kwargs)


def test_a_platform_means_what_mcts_model_says():
    imx, imx4 = mct.get_target_platform_capabilities("pytorch", "default"), mct.get_target_platform_capabilities("pytorch", "imx500", "v4")
    tflite, qnnpack = mct.get_target_platform_capabilities("pytorch", "tflite"), mct.get_target_platform_capabilities("pytorch", "qnnpack")
    QM = mct.core.QuantizationMethod
    assert (imx.weights_quantization_method, imx.weights_n_bits, imx.weights_per_channel_threshold) == (QM.SYMMETRIC, 8, True)
    assert (imx.activation_quantization_method, imx.mixed_precision_weights_bits) == (QM.POWER_OF_TWO, (8, 4, 2))
    assert not imx.sets["MaxPool"].enable_activation_quantization and imx4.sets["MaxPool"].quantization_preserving
    assert 16 not in imx.sets["Add"].supported_activation_n_bits and 16 in imx4.sets["Add"].supported_activation_n_bits
    assert mct.get_target_platform_capabilities("pytorch", "imx500", "v1_pot").weights_quantization_method == QM.POWER_OF_TWO
    assert not tflite.sets["FullyConnected"].weights_per_channel_threshold and tflite.weights_per_channel_threshold
    assert tflite.sets["Conv"].activation_quantization_method == QM.UNIFORM and tflite.sets["Softmax"].fixed_range
    assert tflite.mixed_precision_weights_bits == (8,) and not qnnpack.weights_per_channel_threshold
    assert "per channel" in str(imx) and "MaxPool" in str(imx)


def test_a_platform_resolves_into_the_configuration_and_user_fields_win():
    tpc = mct.get_target_platform_capabilities("pytorch", "default")
    config = resolve_core_config(None, tpc)
    qc = config.quantization_config
    assert qc.activation_quantization_method == mct.core.QuantizationMethod.POWER_OF_TWO
    assert config.mixed_precision_config.candidate_bits == (8, 4, 2)
    mine = mct.core.CoreConfig(quantization_config=mct.core.QuantizationConfig(weights_n_bits=4))
    resolved = resolve_core_config(mine, tpc)
    assert resolved.quantization_config.weights_n_bits == 4
    assert resolved.target_platform_capabilities.sets["Conv"].weights_n_bits == 4
    assert mine.quantization_config.activation_quantization_method is None  # untouched: chosen per activation
    with pytest.raises(ConfigurationError, match="mct.get_target_platform_capabilities"):
        resolve_core_config(None, object())


# ------------------------------------------------ configuration objects
@pytest.mark.parametrize(
    "field, value, instead",
    [
        ("relu_bound_to_power_of_2", True, "POWER_OF_TWO"),
        ("linear_collapsing", True, "leave linear_collapsing=False"),
        ("residual_collapsing", True, "residual_collapsing=False"),
        ("weights_second_moment_correction", True, "weights_bias_correction"),
        ("input_scaling", True, "KeepFloat"),
        ("softmax_shift", True, "KeepFloat"),
        ("activation_bias_correction", True, "weights_bias_correction"),
        ("shift_negative_params_search", True, "searched again"),
        ("min_threshold", 1e-3, "fixed at 2**-16"),
        ("custom_tpc_opset_to_layer", {"x": 1}, "NodeTypeFilter"),
    ],
)
def test_quantization_config_fields_not_provided_say_what_to_use(field, value, instead):
    with pytest.raises(ConfigurationError, match="is not provided by this library") as err:
        mct.core.QuantizationConfig(**{field: value}).validate()
    assert instead in str(err.value)


def test_mcts_positional_quantization_config_is_caught():
    QE = mct.core.QuantizationErrorMethod
    with pytest.raises(ConfigurationError, match=r"by keyword: QuantizationConfig\(activation_error_method"):
        mct.core.QuantizationConfig(QE.MSE, QE.MSE).validate()


def test_provided_quantization_fields_are_checked():
    with pytest.raises(ConfigurationError, match="z_threshold"):
        mct.core.QuantizationConfig(z_threshold=0).validate()
    with pytest.raises(ConfigurationError, match="HMSE.*weights"):
        mct.core.QuantizationConfig(activation_error_method=mct.core.QuantizationErrorMethod.HMSE).validate()
    mct.core.QuantizationConfig(z_threshold=3, shift_negative_activation_correction=True, concat_threshold_update=True,
                                weights_error_method=mct.core.QuantizationErrorMethod.HMSE).validate()  # fmt: skip


@pytest.mark.parametrize(
    "kwargs, instead",
    [
        ({"use_hessian_based_scores": True}, "use_hessian_based_scores=False"),
        ({"custom_metric_fn": lambda m: 0.0}, "tuned_post_training_quantization"),
        ({"configuration_overwrite": [0, 1]}, "set_manual_weights_bit_width"),
        ({"distance_weighting_method": mct.core.MpDistanceWeighting.LAST_LAYER}, "leave it None"),
        ({"refine_mp_solution": False}, "solved exactly"),
        ({"num_of_images": 0}, "num_of_images must be"),
    ],
)
def test_mixed_precision_quantization_config_acts_or_says_what_to_use(kwargs, instead):
    config = mct.core.CoreConfig(mixed_precision_config=mct.core.MixedPrecisionQuantizationConfig(**kwargs))
    with pytest.raises(ConfigurationError) as err:
        resolve_core_config(config)
    assert instead in str(err.value)


def test_mixed_precision_quantization_config_resolves():
    mp = mct.core.MixedPrecisionQuantizationConfig(num_of_images=10, use_hessian_based_scores=False)
    resolved = resolve_core_config(mct.core.CoreConfig(mixed_precision_config=mp)).mixed_precision_config
    assert (resolved.samples, tuple(resolved.candidate_bits)) == (10, (8, 4, 2))
    tflite = mct.get_target_platform_capabilities("tensorflow", "tflite")
    assert tuple(resolve_core_config(mct.core.CoreConfig(mixed_precision_config=mp), tflite).mixed_precision_config.candidate_bits) == (8,)


def test_resource_utilization_takes_mcts_four_targets():
    ru = mct.core.ResourceUtilization(100.0, 200.0, 300.0)
    assert (ru.weights_memory, ru.activation_memory, ru.total_memory, ru.bops) == (100.0, 200.0, 300.0, math.inf)
    ru.validate()
    with pytest.raises(ConfigurationError, match="bops.*weights_memory or total_memory"):
        mct.core.ResourceUtilization(bops=1e9).validate()


@pytest.mark.parametrize(
    "debug, match",
    [
        (dict(simulate_scheduler=True), "simulate_scheduler"),
        (dict(bypass=True), "call it directly"),
        (dict(network_editor="rule"), "list of mct.core.network_editor.EditRule"),
    ],
)
def test_debug_config_fields_act_or_say_what_to_use(debug, match):
    with pytest.raises(ConfigurationError, match=match):
        resolve_core_config(mct.core.CoreConfig(debug_config=mct.core.DebugConfig(**debug)))


def test_edit_rules_and_bit_widths_are_checked_before_any_work():
    ne = mct.core.network_editor
    bad = [
        ne.EditRule(filter=ne.NodeTypeFilter("Conv2d"), action=ne.ChangeCandidatesWeightsQuantConfigAttr(weights_nbits=4)),
        ne.EditRule(filter=ne.NodeTypeFilter("Conv2d"), action=ne.ChangeQuantizationParamFunction()),
        ne.EditRule(filter="conv", action=ne.ChangeCandidatesActivationQuantConfigAttr(activation_n_bits=4)),
        ne.EditRule(filter=ne.NodeTypeFilter("Conv2d"), action=ne.ChangeCandidatesActivationQuantConfigAttr(activation_n_bits=1)),
    ]
    for rule, match in zip(bad, ["weights_nbits.*weights_n_bits", "ChangeQuantizationParamFunction is not provided",
                                 "node filter", "activation_n_bits to 1"]):  # fmt: skip
        with pytest.raises(ConfigurationError, match=match):
            resolve_core_config(mct.core.CoreConfig(debug_config=mct.core.DebugConfig(network_editor=[rule])))
    bw = mct.core.BitWidthConfig()
    bw.set_manual_weights_bit_width(ne.NodeNameFilter("fc"), 4, "bias")
    with pytest.raises(ConfigurationError, match="biases stay float"):
        resolve_core_config(mct.core.CoreConfig(bit_width_config=bw))
    with pytest.raises(ConfigurationError, match="2 bit_widths for 3 filters"):
        mct.core.BitWidthConfig().set_manual_activation_bit_width([ne.NodeNameFilter(str(i)) for i in range(3)], [8, 16])


def test_mcts_default_objects_can_be_filled_in_place():
    core_config = mct.core.CoreConfig()
    core_config.bit_width_config.set_manual_activation_bit_width(mct.core.network_editor.NodeNameFilter("relu"), 16)
    core_config.debug_config.network_editor.append(mct.core.network_editor.EditRule(
        filter=mct.core.network_editor.NodeTypeFilter("Conv2d"),
        action=mct.core.network_editor.ChangeFinalWeightsQuantConfigAttr(weights_n_bits=4),
    ))  # fmt: skip
    resolved = resolve_core_config(core_config)
    assert len(resolved.bit_width_config.manual_activation_bit_width_selection_list) == 1
    assert mct.core.CoreConfig().debug_config.network_editor == []  # a fresh list each time


def test_filters_combine():
    ne = mct.core.network_editor
    from model_compression_toolkit.core.graph import Node, OpKind

    node = Node("features.3", OpKind.CONV, "Conv2d")
    assert ne.NodeNameFilter("features_3").apply(node) and ne.NodeNameScopeFilter("features").apply(node)
    assert (ne.NodeTypeFilter("Conv2d") & ne.NodeNameScopeFilter("feat")).apply(node)
    assert (ne.NodeTypeFilter("Linear") | ne.NodeNameFilter("features.3")).apply(node)
    assert not ne.NodeTypeFilter("conv").logic_not().apply(node)


def test_resource_peak_counts_the_tensors_alive_at_once():
    from model_compression_toolkit.core.graph import Graph, Node, OpKind
    from model_compression_toolkit.core.resources import activation_peak_bytes

    g = Graph("g", "pytorch")
    for name, size in (("in", 10), ("a", 20), ("b", 30), ("c", 5)):
        g.add_node(Node(name, OpKind.INPUT if name == "in" else OpKind.ACTIVATION, "x", output_shapes=[(None, size)]))
    g.inputs = ["in"]
    g.add_edge("in", "a")
    g.add_edge("in", "b")  # in stays alive until b
    g.add_edge("a", "c", 0, 0)
    g.add_edge("b", "c", 0, 1)
    g.outputs = [("c", 0)]
    # float32: in, a and b are alive together when b runs; in is let go before c runs
    assert activation_peak_bytes(g, quantized=False) == (10 + 20 + 30) * 4


def test_quantized_model_of_another_library_is_refused_by_xquant(tmp_path):
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(4, 2))
    gen = lambda: iter([[np.zeros((2, 4), np.float32)]])  # noqa: E731
    with pytest.raises(mct.errors.ModelReadError, match="returned by a PTQ call of this library"):
        mct.xquant.xquant_report_pytorch_experimental(model, model, gen, gen, mct.xquant.XQuantConfig(str(tmp_path)))
