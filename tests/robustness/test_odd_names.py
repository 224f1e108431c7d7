"""Layer and model names with spaces, quotes, slashes, dots or non-ASCII are logged and
shown as they are, and nothing is written outside the call folder."""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.errors import ModelReadError
from model_compression_toolkit.observers.stage_view import stage_run
from tests.fixtures.tb import layer_names, load, run_folders
from tests.robustness.helpers import tree

# Names each framework accepts for a layer ("." is refused by torch, "/" by Keras).
TORCH_NAMES = ["conv 1", "ü ñ 日本", "q'uote", "a/b", "~/up", "<b>x</b>", "a,b;c"]
KERAS_NAMES = ["conv 1", "ü ñ 日本", "q'uote", 'dq"x', "..", "a..b", "..\\up", "<b>x<b>", "a,b;c"]


def _torch_model(names):
    import torch
    from torch import nn

    torch.manual_seed(0)
    # a class name that is itself hostile: it becomes the call folder's name
    cls = type("../../evil model ü", (nn.Sequential,), {})
    model = cls()
    for name in names:
        model.add_module(name, nn.Linear(8, 8))
    return model.eval()


def _keras_model(names):
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,), name="in put")
    x = inputs
    for name in names:
        x = keras.layers.Dense(8, name=name)(x)
    return keras.Model(inputs, x, name="..\\..\\evil model ü")


@pytest.mark.filterwarnings("ignore:Glyph .* missing from font")  # matplotlib cannot draw CJK names
def test_odd_layer_names_are_logged_and_shown_and_stay_inside_the_run_folder(fw, tmp_path, monkeypatch):
    """Layers named with spaces, quotes, slashes, dots, tabs, markup or non-ASCII, in a model
    whose own name tries to climb out of the log folder: every layer is a graph node and has
    its activation and weight histograms under its own name, the run is complete with the
    similarity view, and every new file lies inside the one call folder."""
    names = TORCH_NAMES if fw.name == "pytorch" else KERAS_NAMES
    model = _torch_model(names) if fw.name == "pytorch" else _keras_model(names)
    logs = tmp_path / "deep" / "logs"
    (tmp_path / "up").mkdir()  # where "..\\up" or the model's "../../" name would land
    monkeypatch.chdir(tmp_path / "up")
    before = tree(tmp_path)
    mct.set_log_folder(logs)
    x = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
    # the last layer's output on a grid too, so that every name has an activation histogram
    q_model, info = fw.ptq(model, lambda: [[x[:8]], [x[8:]]], mct.core.CoreConfig(quantize_outputs=True))
    assert set(names) <= set(info.layers)

    (run,) = run_folders(logs)
    assert info.log_folder == run
    new = tree(tmp_path) - before
    assert new and all(p == logs or p == logs.parent or p.is_relative_to(run) for p in new), sorted(new)
    for path in new:
        assert path.resolve().is_relative_to(run.resolve()) or path in (logs, logs.parent)

    for stage in ("initial_graph", "after_graph_preparation", "quantized_graph"):
        nodes = layer_names(load(run / stage_run(stage)))
        assert set(names) <= nodes, (stage, set(names) - nodes)
    activations = set(load(run / stage_run("thresholds_selection")).Tags()["histograms"])
    assert set(names) <= activations
    weights = set(load(run / stage_run("quantized_graph")).Tags()["histograms"])
    for name in names:
        assert f"{name}/weights" in weights, name
    summary = load(run / stage_run("quantized_graph")).Tensors("summary")[0].tensor_proto.string_val[0].decode("utf-8")
    for name in names:
        assert f"`{name}`" in summary.replace("\\|", "|"), name
    similarity = load(run / stage_run("quantized_graph"))
    report = similarity.Tensors("similarity/report")[0].tensor_proto.string_val[0].decode("utf-8")
    for name in names:
        assert name in report.replace("\\|", "|"), name


def test_layer_names_that_collide_once_cleaned_stay_distinct_graph_nodes(fw, tmp_path):
    """Two layers whose names differ only by a character TensorBoard cannot show in a graph
    node name (``a:b`` and ``a_b``) remain two distinct graph nodes, and each keeps its own
    activation histogram under its real name."""
    names = ["a:b", "a_b", "^c"]
    model = _torch_model(names) if fw.name == "pytorch" else _keras_model(names)
    mct.set_log_folder(tmp_path)
    x = np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32)
    fw.ptq(
        model,
        lambda: [[x]],
        mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False), quantize_outputs=True),
    )
    (run,) = run_folders(tmp_path)
    acc = load(run / stage_run("thresholds_selection"))
    nodes = [n.name for n in acc.Graph().node]
    assert len(nodes) == len(set(nodes)) == len(names) + 1  # the input, then one node per layer
    assert set(names) <= set(acc.Tags()["histograms"])


@pytest.mark.parametrize("name", ['dq"x', "new\nline"])
def test_a_torch_name_that_torch_fx_cannot_trace_gets_a_typed_error_and_writes_nothing(tmp_path, name):
    """torch accepts a module named with a double quote or a newline but torch.fx cannot
    generate code for it: the PTQ call fails with ModelReadError naming the model, before
    writing."""
    pytest.importorskip("torch")
    model = _torch_model([name])
    mct.set_log_folder(tmp_path / "logs")
    x = np.zeros((2, 8), np.float32)
    with pytest.raises(ModelReadError, match="could not trace"):
        mct.ptq.pytorch_post_training_quantization(model, lambda: [[x]])
    assert list((tmp_path / "logs").iterdir()) == []


def test_a_torch_module_name_with_a_backslash_is_quantized(tmp_path):
    """torch accepts a module named ``\\back``, and torch.fx writes it unescaped into the
    code of the models we build (``getattr(self, "\\back")`` looks up a backspace): the
    layer is still read, quantized, reported and logged under its own name, and the
    quantized model computes the float one up to quantization error."""
    pytest.importorskip("torch")
    import torch

    name = "\\back"
    model = _torch_model([name, "ok"])
    mct.set_log_folder(tmp_path)
    x = np.random.default_rng(2).standard_normal((8, 8)).astype(np.float32)
    q_model, info = mct.ptq.pytorch_post_training_quantization(model, lambda: [[x]])
    assert name in info.layers
    assert [layer.name for layer in info.similarity.layers if layer.name == name]
    with torch.no_grad():
        expected, got = model(torch.from_numpy(x)).numpy(), q_model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, expected, atol=0.05 * np.abs(expected).max())
    (run,) = run_folders(tmp_path)
    assert name in load(run / stage_run("thresholds_selection")).Tags()["histograms"]


def test_the_closing_line_opens_a_call_folder_whose_path_has_spaces(fw, tmp_path, capsys):
    """The ``tensorboard --logdir`` line a call ends with, on the console and in mct.log,
    runs as it is in a shell even when the log folder's path has a space."""
    import shlex

    from tests.robustness.helpers import small_mlp

    logs = tmp_path / "my logs"
    mct.set_log_folder(logs)
    x = np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32)
    _, info = fw.ptq(small_mlp(fw), lambda: [[x]])
    console = capsys.readouterr().err.splitlines()[-1]
    logged = (info.log_folder / "mct.log").read_text(encoding="utf-8").splitlines()[-1]
    for line in (console, logged):
        # (the console's line then gives the Quantization dashboard's URL: " and open <url>")
        command = shlex.split(line.split("this call", 1)[1].split(":", 1)[1].split(" and open ", 1)[0])
        assert command == ["tensorboard", "--logdir", str(info.log_folder)], line
