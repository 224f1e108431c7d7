"""Results that used to be wrong without a word: a reused data buffer, dropped hooks, merged
TensorBoard tags. Each is now right, or refused with a typed error naming the cause."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.errors import ModelReadError
from model_compression_toolkit.observers.stage_view import stage_run
from tests.fixtures.tb import load, run_folders


def _similarity_only(samples: int = 20) -> mct.core.CoreConfig:
    return mct.core.CoreConfig(
        debug_config=mct.core.DebugConfig(analyze_similarity=True, similarity_samples=samples)
    )


def _metrics(info) -> dict[str, tuple[float, float]]:
    return {layer.name: (layer.sqnr_db, layer.cosine_mean) for layer in info.similarity.layers}


@pytest.mark.parametrize("buffer", ["numpy", "tensor"])
def test_a_generator_that_refills_one_buffer_gets_the_same_report_as_fresh_batches(
    fw, trained_digits, buffer
):
    """A data generator that writes every batch into one array (a common loader pattern) gives
    exactly the similarity report and model that fresh arrays give: the kept float samples
    are copies, not views of the user's buffer (the buffer used to overwrite them, turning a
    33 dB layer into -3.6 dB)."""
    if buffer == "tensor" and fw.name != "pytorch":
        pytest.skip("Keras tensors are immutable: only a numpy buffer can be refilled")
    model, x_train, _, _ = trained_digits
    x = x_train[:40]

    def fresh():
        for i in range(0, len(x), 4):
            yield [x[i : i + 4].copy()]

    def refilled():
        if buffer == "numpy":
            buf = np.empty_like(x[:4])
            fill = buf.__setitem__
        else:
            import torch

            buf = torch.empty(x[:4].shape)
            fill = lambda key, value: buf.copy_(torch.from_numpy(value))  # noqa: E731
        for i in range(0, len(x), 4):
            fill(slice(None), x[i : i + 4])
            yield [buf]

    q_fresh, info_fresh = fw.ptq(model, fresh, _similarity_only())
    q_reused, info_reused = fw.ptq(model, refilled, _similarity_only())
    assert _metrics(info_reused) == _metrics(info_fresh)
    for a, b in zip(fw.predict(q_reused)(x), fw.predict(q_fresh)(x)):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------- PyTorch hooks
def _hooked_mlp(kind: str):
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)).eval()
    calls = []
    if kind == "forward":
        model[0].register_forward_hook(lambda module, args, out: out * 2.0)
    elif kind == "pre":
        model[2].register_forward_pre_hook(lambda module, args: (args[0] + 1.0,))
    else:  # observes only
        model[1].register_forward_hook(lambda module, args, out: calls.append(out.shape))
    return model, calls


@pytest.mark.parametrize("kind", ["forward", "pre"])
def test_a_hook_that_changes_the_output_is_refused_by_name_before_anything_is_written(tmp_path, kind):
    """A forward hook or pre-hook that changes what the model computes cannot be carried into
    the quantized model: the call fails with a ModelReadError naming the module and the hook,
    before any file is written (it used to quantize a different function, every output off)."""
    model, _ = _hooked_mlp(kind)
    mct.set_log_folder(tmp_path)
    x = np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32)
    with pytest.raises(ModelReadError) as err:
        mct.ptq.pytorch_post_training_quantization(model, lambda: [[x]])
    message = str(err.value)
    module, hook = (
        ("'0' (Linear)", "forward hook") if kind == "forward" else ("'2' (Linear)", "forward pre-hook")
    )
    assert module in message and hook in message and "<lambda>" in message, message
    assert "remove" in message and "handle.remove()" in message
    assert list(tmp_path.iterdir()) == []


def test_a_hook_that_only_observes_is_named_in_a_warning_and_the_model_is_quantized():
    """A hook that leaves the output unchanged (it records shapes) does not stop the call; the
    warning says the quantized model does not call it, so nothing is dropped silently."""
    model, calls = _hooked_mlp("observe")
    x = np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        q_model, info = mct.ptq.pytorch_post_training_quantization(model, lambda: [[x]])
    hook_warnings = [str(w.message) for w in caught if "hook" in str(w.message)]
    assert len(hook_warnings) == 1 and "'1' (ReLU)" in hook_warnings[0], hook_warnings
    assert "does not call" in hook_warnings[0]
    assert hook_warnings[0] in info.warnings


# ---------------------------------------------------------------- tags
COLLIDING = ["a\tb", "a\xa0b", "a_b"]  # a tab and a no-break space both used to become "_"


def _colliding_model(fw):
    if fw.name == "pytorch":
        import torch
        from torch import nn

        torch.manual_seed(0)
        model = nn.Sequential()
        for name in COLLIDING:
            model.add_module(name, nn.Linear(4, 4))
        return model.eval()
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    x = inputs
    for name in COLLIDING:
        x = keras.layers.Dense(4, name=name)(x)
    return keras.Model(inputs, x)


def test_layer_names_that_clean_to_the_same_tag_keep_their_own_data(fw, tmp_path):
    """Three layers whose names differ only in a tab, a no-break space and an underscore get
    three different histogram and scalar tags, each holding that layer's own data (they used
    to merge into one tag, losing two layers' data); the graph keeps every node too."""
    model = _colliding_model(fw)
    mct.set_log_folder(tmp_path)
    x = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
    # the output layer on a grid too: each of the three has an activation histogram
    fw.ptq(model, lambda: [[x[:8]], [x[8:]]], dataclasses.replace(_similarity_only(8), quantize_outputs=True))
    (run,) = run_folders(tmp_path)

    def tags_of(acc, kind):
        return [t for t in acc.Tags()[kind] if t.startswith("a") and t[1] in "\t\xa0_ "]

    outputs = load(run / stage_run("thresholds_selection"))  # each layer's output, float at step 0
    activations = tags_of(outputs, "histograms")
    assert len(activations) == 3, activations
    values = [outputs.Histograms(t)[0].histogram_value for t in activations]
    assert [v.num for v in values] == [16 * 4] * 3  # each tag holds one layer's outputs, not two
    assert len({v.max for v in values}) == 3  # and they are three different layers
    for field in ("min_per_channel", "max_per_channel", "mean_per_channel"):
        assert len(tags_of(load(run / stage_run("after_statistics_collection") / field), "scalars")) == 3, field
    weights = [t for t in tags_of(load(run / stage_run("quantized_graph")), "histograms") if t.endswith("/weights")]
    assert len(weights) == 3, weights  # one card per kernel: float at step 0, quantized at step 1
