"""Fixes a fully integer target can take: the outlier-channel cases of `tests.core.test_diagnosis`
fixed with nothing float and no more than 8 bits, and exported as integers with parity.

An int8 target (``CoreConfig(integer_only=True)``, or MCT's IMX500 platform) runs neither
a float layer nor 12-bit weights nor, mostly, 16-bit activations. On the outlier cases the
suggested fix is then cross-layer scale equalization (`core.equalization`), which moves the
outlier channel's scale from the producer's weights into the consumer's: exact in float,
no byte more, every layer integer. Margins are tens of points (the damaged model) or one
point of float accuracy (the fix), so they hold on any CPU.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.core.equalization import equalize, find_pairs
from model_compression_toolkit.pipeline.backends import get_backend
from tests.fixtures.damage import outlier_before_pool, outlier_channel
from tests.fixtures.digits import accuracy, representative_dataset
from tests.fixtures.trained import load_trained

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*tf.lite.Interpreter is deprecated:UserWarning"),
    pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider':UserWarning"),
]
ANALYZE = mct.core.DebugConfig(analyze_similarity=True)
E = mct.exporter


def damaged(fw, case: str):
    """(damaged model, layer names, x_train, x_test, y_test) of case a or b."""
    x_train, _, x_test, y_test = fw.data()
    if case == "a":
        bad, names = outlier_channel(fw.name, load_trained(fw.name), x_train[:256])
    else:
        bad, names = outlier_before_pool(fw.name, load_trained(fw.name, "pool_cnn"), x_train[:256])
    return bad, names, x_train, x_test, y_test


def platform(fw, target: str) -> dict:
    """The PTQ keyword that makes the target integer-only: none, or the IMX500 platform."""
    if target == "integer_only":
        return {}
    return {"target_platform_capabilities": mct.get_target_platform_capabilities(fw.name, "imx500", "v1")}


def export_integer(fw, q_model, tmp_path, data):
    """The fixed model exported as integers: int8 TFLite (Keras), QDQ ONNX (PyTorch)."""
    if fw.name == "keras":
        K, Q = E.KerasExportSerializationFormat, E.QuantizationFormat
        return E.keras_export_model(q_model, str(tmp_path / "m.tflite"), serialization_format=K.TFLITE,
                                    quantization_format=Q.INT8, repr_dataset=data)  # fmt: skip
    return E.pytorch_export_model(q_model, str(tmp_path / "m.onnx"), data)


def weights_of(fw, model) -> list[np.ndarray]:
    if fw.name == "pytorch":
        return [t.detach().numpy().copy() for t in model.state_dict().values()]
    return [np.array(w) for w in model.get_weights()]


@pytest.mark.parametrize("case", ["a", "b"])
def test_equalization_leaves_the_float_outputs_unchanged_and_brings_the_outlier_back(fw, case):
    bad, names, x_train, x_test, _ = damaged(fw, case)
    backend = get_backend(bad)
    graph, _ = backend.read(bad, [x_train[:8]])
    pairs = {p.consumer: p for p in find_pairs(graph)}
    assert names["activation"] in pairs[names["consumer"]].between  # the outlier's pair is found
    equalized, scales = equalize(graph)
    before = backend.forward(backend.build(graph, quantized=False), [x_test[:64]])[0]
    after = backend.forward(backend.build(equalized, quantized=False), [x_test[:64]])[0]
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-4 * np.abs(before).max())
    s = scales[pairs[names["consumer"]].producer]
    k = int(names["channel"])
    assert s[k] > 50 * np.median(s)  # the channel scaled up 300x comes back down to the others
    assert (
        graph.node(names["consumer"]).weights["kernel"]
        is not equalized.node(names["consumer"]).weights["kernel"]
    )


@pytest.mark.parametrize(
    "function, attrs, pairs",
    [
        ("relu", {}, 1),
        ("leaky_relu", {}, 1),
        ("relu6", {}, 0),
        ("relu", {"max_value": 4.0}, 0),
        ("silu", {}, 0),
    ],
)
def test_only_positively_homogeneous_ops_are_equalized_through(function, attrs, pairs):
    """ReLU commutes with a positive per-channel scale; a capped ReLU or a SiLU does not, and
    equalizing through it would change the float model."""
    from model_compression_toolkit.core.graph import Graph, Node, OpKind

    rng = np.random.default_rng(0)
    g = Graph("g", "numpy")
    conv = {"kernel": (0,)}
    g.add_node(Node("x", OpKind.INPUT, "input", output_shapes=[(None, 3, 8, 8)], channel_axis=1))
    g.add_node(Node("c1", OpKind.CONV, "Conv", weights={"kernel": rng.normal(size=(4, 3, 3, 3))}, kernel_axes=conv,
                    kernel_in_axis={"kernel": 1}, output_shapes=[(None, 4, 8, 8)], channel_axis=1))  # fmt: skip
    g.add_node(Node("act", OpKind.ACTIVATION, "Act", attrs={"function": function, **attrs}, channel_axis=1))
    g.add_node(Node("c2", OpKind.CONV, "Conv", weights={"kernel": rng.normal(size=(2, 4, 3, 3))}, kernel_axes=conv,
                    kernel_in_axis={"kernel": 1}, output_shapes=[(None, 2, 8, 8)], channel_axis=1))  # fmt: skip
    for src, dst in (("x", "c1"), ("c1", "act"), ("act", "c2")):
        g.add_edge(src, dst)
    g.inputs, g.outputs = ["x"], [("c2", 0)]
    assert len(find_pairs(g)) == pairs


def test_activation_channel_equalization_is_accepted_and_restores_the_outlier_case(fw):
    bad, names, x_train, x_test, y_test = damaged(fw, "a")
    own = weights_of(fw, bad)
    gen = representative_dataset(x_train)
    plain, _ = fw.ptq(bad, gen)
    config = mct.core.CoreConfig(
        quantization_config=mct.core.QuantizationConfig(activation_channel_equalization=True)
    )
    equalized, _ = fw.ptq(bad, gen, core_config=config)
    float_acc = accuracy(fw.predict(bad), x_test, y_test)
    assert accuracy(fw.predict(plain), x_test, y_test) < float_acc - 30
    assert accuracy(fw.predict(equalized), x_test, y_test) >= float_acc - 1.0
    # compared on its own later, the equalized model is compared with the equalized float model
    report = mct.analyze_similarity(bad, equalized, gen).report
    assert report.layer(names["activation"]).sqnr_db > 25 and not report.causes(), report.summary()
    assert all(
        np.array_equal(a, b) for a, b in zip(own, weights_of(fw, bad))
    )  # the user's model is untouched


@pytest.mark.parametrize("case, target", [("a", "integer_only"), ("b", "integer_only"), ("a", "imx500")])
def test_on_an_integer_target_the_fix_is_integer_restores_accuracy_and_exports_with_parity(
    fw, case, target, tmp_path
):
    bad, names, x_train, x_test, y_test = damaged(fw, case)
    gen = representative_dataset(x_train)
    config = mct.core.CoreConfig(debug_config=ANALYZE, integer_only=target == "integer_only")
    q_model, info = fw.ptq(bad, gen, core_config=config, **platform(fw, target))
    fix = info.similarity.suggested_fix()
    assert not fix.activations and not fix.weights, fix.summary()  # nothing float
    assert all(b <= 8 for b in fix.weight_bits.values()) and all(b <= 8 for b in fix.activation_bits.values())
    assert fix.equalize and fix.restores and "activation_channel_equalization=True" in fix.code(), (
        fix.summary()
    )
    assert [a.name for a in fix.alternatives if a.chosen] == ["equalize channels"], fix.summary()
    saved = json.loads(info.similarity.to_json())["suggested_fix"]  # the report file says the same
    assert (
        saved["equalize"]
        and saved["alternatives"][0]["name"] == "equalize channels"
        and saved["integer_only"]
    )
    fixed, _ = fw.ptq(
        bad, gen, core_config=dataclasses.replace(config, keep_float=fix), **platform(fw, target)
    )
    float_acc = accuracy(fw.predict(bad), x_test, y_test)
    assert accuracy(fw.predict(q_model), x_test, y_test) < float_acc - 30  # the failure is real
    assert accuracy(fw.predict(fixed), x_test, y_test) >= float_acc - 1.0, fix.summary()
    result = export_integer(fw, fixed, tmp_path, gen)
    assert result.parity_ok, result.parity
    if fw.name == "pytorch":  # onnxruntime runs every conv as an integer kernel
        assert "Conv" not in result.runtime_ops and result.runtime_ops["QLinearConv"] >= 3, result.runtime_ops


def test_without_an_integer_target_the_cheapest_fix_is_still_equalization(fw):
    """Float allowed: equalization restores the output at no byte, so it is the suggestion on
    any target; the per-layer fix (16-bit output, more weight bits) it was measured against
    is listed beside it with what it costs."""
    bad, names, x_train, _, _ = damaged(fw, "a")
    _, info = fw.ptq(
        bad, representative_dataset(x_train), core_config=mct.core.CoreConfig(debug_config=ANALYZE)
    )
    fix = info.similarity.suggested_fix()
    assert fix.equalize and not fix.activation_bits and not fix.activations, fix.summary()
    tried = {a.name: a for a in fix.alternatives}
    assert tried["equalize channels"].chosen and tried["equalize channels"].output_sqnr_db > 20, fix.summary()
    per_layer = tried["more bits"]
    assert per_layer.allowed and not per_layer.chosen and per_layer.activation_bytes > 0, fix.summary()
    assert "equalize channels" in info.similarity.summary()


def test_where_nothing_integer_restores_the_report_says_so_instead_of_suggesting_float(fw, trained_digits):
    """Case d of `tests.core.test_diagnosis`: a ReLU whose grid clips (``z_threshold=2``), fixed
    there by keeping it float. On an int8 target neither 16 bits nor float is allowed."""
    model, x_train, _, _ = trained_digits
    relu = (
        "2"
        if fw.name == "pytorch"
        else next(layer.name for layer in model.layers if type(layer).__name__ == "ReLU")
    )
    editor = mct.core.network_editor
    rule = editor.EditRule(
        filter=mct.core.common.network_editors.NodeNameFilter(relu),
        action=editor.ChangeCandidatesActivationQuantConfigAttr(z_threshold=2),
    )
    debug = dataclasses.replace(ANALYZE, network_editor=[rule])
    _, info = fw.ptq(
        model,
        representative_dataset(x_train),
        core_config=mct.core.CoreConfig(debug_config=debug, integer_only=True),
    )
    report = info.similarity
    fix = report.suggested_fix()
    assert report.quantizers[0].name == relu and report.quantizers[0].cause, report.summary()
    assert not fix.activations and not fix.weights and not fix.activation_bits, fix.summary()
    assert "nothing integer restores the output" in report.summary(), report.summary()
    ruled_out = {a.name for a in fix.alternatives if not a.allowed}
    assert ruled_out == {"16-bit activations", "keep float"}, fix.summary()


def test_tuning_on_an_integer_target_equalizes_in_trial_2(fw):
    bad, names, x_train, x_test, y_test = damaged(fw, "a")
    tuned = getattr(mct.ptq, f"{fw.name}_tuned_post_training_quantization")

    def evaluate(m):
        return accuracy(fw.predict(m), x_test, y_test)

    config = mct.core.CoreConfig(integer_only=True)
    _, info = tuned(
        bad, representative_dataset(x_train), evaluate, mct.core.TuningConfig(max_drop=1.0), config
    )
    tuning = info.tuning
    assert tuning.target_met and tuning.best.n == 2, tuning.summary()
    best = tuning.best
    assert best.equalized and not best.kept_float and not best.weight_bits and not best.activation_bits
    assert "channels equalized" in tuning.summary()


def test_a_platform_is_an_integer_target_with_its_own_bits():
    from model_compression_toolkit.core.resolution import resolve_core_config
    from model_compression_toolkit.core.similarity.fix import FixMenu

    def menu(*args, **config):
        tpc = mct.get_target_platform_capabilities("pytorch", *args) if args else None
        return FixMenu.of(resolve_core_config(mct.core.CoreConfig(**config), tpc))

    assert not menu().integer_only and 16 in menu().weight_bits
    assert menu(integer_only=True).integer_only and max(menu(integer_only=True).weight_bits) == 8
    assert menu(integer_only=True).activation_bits is None  # int8: no 16-bit activations
    imx = menu("imx500", "v1")
    assert imx.integer_only and imx.weight_bits == (2, 4, 8) and imx.activation_bits is None
    assert menu("imx500", "v4").activation_bits == 16  # 4.0 runs some operators at 16 bits


@pytest.mark.parametrize("bad_value", ["yes", 1, None])
def test_integer_only_is_checked(bad_value):
    with pytest.raises(mct.errors.ConfigurationError, match="integer_only must be True or False"):
        mct.core.CoreConfig(integer_only=bad_value).validate()
