"""The user's model is exactly as it was after PTQ with logging on, after two calls, and
after a call that failed halfway (tests/api/test_user_model_untouched.py has the basics)."""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.errors import RepresentativeDataError
from tests.fixtures.tb import run_folders
from tests.robustness.helpers import no_similarity


def _three_calls(fw, model, x, tmp_path):
    """With logging on: a call that fails while collecting statistics, then two good calls."""
    mct.set_log_folder(tmp_path)
    with pytest.raises(RepresentativeDataError, match="batch 1 is a str"):
        fw.ptq(model, lambda: [[x[:8]], "not a batch"], no_similarity())
    fw.ptq(model, lambda: [[x[:8]], [x[8:16]]])  # default config: similarity analysis too
    fw.ptq(model, lambda: [[x[:8]]], no_similarity())
    assert len(run_folders(tmp_path)) == 3


# ---------------------------------------------------------------- PyTorch
def _torch_snapshot(model):
    import torch

    return {
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "ptrs": {k: v.data_ptr() for k, v in model.state_dict().items()},
        "params": {k: (p.requires_grad, p.dtype, p.device) for k, p in model.named_parameters()},
        "grads": {k: None if p.grad is None else p.grad.clone() for k, p in model.named_parameters()},
        "training": {k: m.training for k, m in model.named_modules()},
        "modules": {k: type(m) for k, m in model.named_modules()},
        "hooks": {
            k: [
                list(getattr(m, h).values())
                for h in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks")
            ]
            for k, m in model.named_modules()
        },
        "attrs": {k: sorted(vars(m)) for k, m in model.named_modules()},
        "grad_enabled": torch.is_grad_enabled(),
        "default_dtype": torch.get_default_dtype(),
    }


def test_pytorch_model_is_untouched_by_a_failed_call_and_two_logged_calls(tmp_path):
    """A PyTorch model with mixed train/eval submodules, frozen and trainable parameters,
    existing gradients, and forward, pre-forward and backward hooks: after a failed call
    and two calls with logging on, every value, storage, flag, gradient, hook and attribute
    is as before, the hooks fire exactly once per forward, and torch's global grad mode and
    default dtype are unchanged."""
    import torch

    from tests.fixtures.digits import torch_digits_cnn

    model = torch_digits_cnn().train()
    model[1].eval()  # a batch norm left in eval mode inside a model in training mode
    model[0].weight.requires_grad_(False)
    x = np.random.default_rng(0).random((16, 1, 32, 32), dtype=np.float32)
    model(torch.from_numpy(x[:4])).sum().backward()  # gradients the user has not consumed yet
    calls = []
    model[0].register_forward_hook(lambda *a: calls.append("fwd"))
    model[3].register_forward_pre_hook(lambda *a: calls.append("pre"))
    model[-1].register_full_backward_hook(lambda *a: calls.append("bwd"))
    before = _torch_snapshot(model)

    _three_calls(_fw("pytorch"), model, x, tmp_path)

    after = _torch_snapshot(model)
    for key in ("ptrs", "params", "training", "modules", "hooks", "attrs", "grad_enabled", "default_dtype"):
        assert after[key] == before[key], key
    assert before["state"].keys() == after["state"].keys()
    for k in before["state"]:
        assert torch.equal(before["state"][k], after["state"][k]), k
    for k, g in before["grads"].items():
        assert (g is None and after["grads"][k] is None) or torch.equal(g, after["grads"][k]), k
    calls.clear()
    model(torch.from_numpy(x[:2])).sum().backward()
    assert sorted(calls) == ["bwd", "fwd", "pre"]


# ---------------------------------------------------------------- Keras
def _keras_snapshot(model):
    import keras

    return {
        "weights": [(w.path, np.array(w.numpy())) for w in model.weights],
        "variables": [id(w) for w in model.weights],
        "trainable": [(layer.name, layer.trainable) for layer in model.layers],
        "trainable_weights": [w.path for w in model.trainable_weights],
        "layers": [(layer.name, type(layer)) for layer in model.layers],
        "optimizer": None
        if model.optimizer is None
        else (
            int(model.optimizer.iterations.numpy()),
            [np.array(v.numpy()) for v in model.optimizer.variables],
        ),
        "compiled": model.compiled,
        "built": model.built,
        "policy": model.dtype_policy.name,
        "floatx": keras.config.floatx(),
        "data_format": keras.config.image_data_format(),
    }


def test_keras_model_is_untouched_by_a_failed_call_and_two_logged_calls(tmp_path):
    """A compiled and trained Keras model with a frozen layer: after a failed call and two
    calls with logging on, its weights (values and variable objects), trainable flags,
    layers, optimizer state, compile and build state, dtype policy and Keras' global
    floatx and image data format are as before, and it predicts exactly as before."""
    import keras

    from tests.fixtures.digits import keras_digits_cnn

    model = keras_digits_cnn()
    model.layers[2].trainable = False  # the first batch norm
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    x = np.random.default_rng(0).random((16, 32, 32, 1), dtype=np.float32)
    model.fit(x, np.zeros((16, 10), np.float32), epochs=1, verbose=0)
    out_before = np.asarray(model(x, training=False))
    before = _keras_snapshot(model)

    _three_calls(_fw("keras"), model, x, tmp_path)

    after = _keras_snapshot(model)
    for key in (
        "variables",
        "trainable",
        "trainable_weights",
        "layers",
        "compiled",
        "built",
        "policy",
        "floatx",
        "data_format",
    ):
        assert after[key] == before[key], key
    for (p1, w1), (p2, w2) in zip(before["weights"], after["weights"]):
        assert p1 == p2
        np.testing.assert_array_equal(w1, w2, err_msg=p1)
    assert after["optimizer"][0] == before["optimizer"][0]
    for v1, v2 in zip(before["optimizer"][1], after["optimizer"][1]):
        np.testing.assert_array_equal(v1, v2)
    np.testing.assert_array_equal(np.asarray(model(x, training=False)), out_before)


def _fw(name):
    from tests.conftest import FRAMEWORKS

    return FRAMEWORKS[name]
