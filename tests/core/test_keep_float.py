"""Keeping layers in float by name, pattern or type: in the model, the info, the logs and the report."""

from __future__ import annotations

import re

import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.core.preparation import KEPT_FLOAT
from model_compression_toolkit.errors import ConfigurationError, LayerSelectionError
from model_compression_toolkit.observers.stage_view import stage_run
from tests.fixtures.digits import accuracy, representative_dataset
from tests.fixtures.tb import layer_name, load, resources, run_folders


def convs(info) -> list[str]:
    return [name for name, layer in info.layers.items() if layer.kind == "conv"]


@pytest.fixture
def conv_names(fw, trained_digits):
    model, x_train, _, _ = trained_digits
    _, info = fw.ptq(model, representative_dataset(x_train, 2, 16))
    return convs(info)


def keep(rule):
    return mct.core.CoreConfig(keep_float=rule)


def test_by_name_keeps_weights_and_output_float_everywhere(fw, trained_digits, conv_names, tmp_path):
    model, x_train, _, _ = trained_digits
    mct.set_log_folder(tmp_path)
    second = conv_names[1]
    q_model, info = fw.ptq(model, representative_dataset(x_train), keep(mct.core.KeepFloat(names=[second])))
    layer = info.layers[second]
    assert layer.weights == {} and "KeepFloat" in layer.weights_float_reason
    assert all(info.layers[c].weights for c in conv_names if c != second)
    (run,) = run_folders(tmp_path)
    graph = {layer_name(n.name): n for n in load(run / stage_run("quantized_graph")).Graph().node}
    bits = "quantization.weights.kernel.n_bits"
    assert bits not in graph[second].attr and bits in graph[conv_names[0]].attr
    assert graph[second].attr["quantization.bits"].s == b"W float"
    assert graph[second].attr["quantization.weights.float_reason"].s == KEPT_FLOAT.encode()
    memory = resources(load(run / stage_run("quantized_graph")))
    kernel_elements = graph[second].attr["layer.weights.kernel.shape"].list.i
    assert memory[second] >= 4 * int(__import__("numpy").prod(kernel_elements))  # float32 weights


def test_a_folded_batch_norm_name_selects_its_conv(fw, trained_digits, conv_names):
    if fw.name != "pytorch":
        pytest.skip("Sequential indices name the batch norm separately only in PyTorch")
    model, x_train, _, _ = trained_digits
    _, info = fw.ptq(model, representative_dataset(x_train, 2, 16), keep(mct.core.KeepFloat(names=["4"])))
    assert info.layers["3"].weights == {}


def test_by_pattern_and_by_type(fw, trained_digits, conv_names):
    model, x_train, _, _ = trained_digits
    pattern = re.escape(conv_names[2])
    _, info = fw.ptq(model, representative_dataset(x_train, 2, 16), keep(mct.core.KeepFloat(patterns=[pattern], activations=False)))
    assert info.layers[conv_names[2]].weights == {} and info.layers[conv_names[1]].weights
    layer_type = "Conv2d" if fw.name == "pytorch" else "Conv2D"
    for t in (layer_type, "conv"):
        _, info = fw.ptq(model, representative_dataset(x_train, 2, 16), keep(mct.core.KeepFloat(types=[t])))
        assert all(info.layers[c].weights == {} for c in conv_names)
        assert any(layer.activation for layer in info.layers.values())  # the rest stays quantized


def test_kept_outputs_stay_float_and_show_in_the_similarity_report(fw, trained_digits, tmp_path):
    model, x_train, x_test, y_test = trained_digits
    mct.set_log_folder(tmp_path)
    _, base = fw.ptq(model, representative_dataset(x_train, 2, 16))
    relu = [n for n, layer in base.layers.items() if layer.kind == "activation"][0]
    q_model, info = fw.ptq(model, representative_dataset(x_train), keep(mct.core.KeepFloat(names=[relu], weights=False)))
    assert info.layers[relu].activation is None and relu in info.float_layers
    point = info.similarity.layer(relu)
    assert point.activation_bits is None  # float in the report
    assert accuracy(fw.predict(q_model), x_test, y_test) > 80


def test_a_name_that_matches_nothing_lists_the_closest_layers(fw, trained_digits, conv_names, tmp_path):
    model, x_train, _, _ = trained_digits
    mct.set_log_folder(tmp_path)
    typo = conv_names[1] + "x"
    with pytest.raises(LayerSelectionError, match=re.escape(repr(conv_names[1]))):
        fw.ptq(model, representative_dataset(x_train, 2, 16), keep(mct.core.KeepFloat(names=[typo])))
    with pytest.raises(LayerSelectionError, match="matches no layer name"):
        fw.ptq(model, representative_dataset(x_train, 2, 16), keep(mct.core.KeepFloat(patterns=[conv_names[1][:-1]])))
    with pytest.raises(LayerSelectionError, match="layer types are"):
        fw.ptq(model, representative_dataset(x_train, 2, 16), keep(mct.core.KeepFloat(types=["LSTM"])))
    assert list(tmp_path.iterdir()) == []


def test_malformed_rules_are_configuration_errors(fw, trained_digits):
    model, x_train, _, _ = trained_digits
    for rule in (mct.core.KeepFloat(names="conv"), mct.core.KeepFloat(patterns=["("]),
                 mct.core.KeepFloat(names=["x"], weights=False, activations=False), "conv"):
        with pytest.raises(ConfigurationError):
            fw.ptq(model, representative_dataset(x_train, 2, 16), keep(rule))
