"""The user's model is exactly as it was after PTQ: values, hooks, flags."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from tests.fixtures.digits import representative_dataset


def test_pytorch_model_parameters_buffers_hooks_and_mode_are_unchanged():
    import torch

    from model_compression_toolkit.ptq import pytorch_post_training_quantization
    from tests.fixtures.digits import digits_data, torch_digits_cnn

    x_train = digits_data()[0]
    model = torch_digits_cnn().train()
    model[0].weight.requires_grad_(False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    calls = []
    handle = model[0].register_forward_hook(lambda *args: calls.append(1))
    pytorch_post_training_quantization(model, representative_dataset(x_train, 2, 8))
    assert model.training and all(m.training for m in model.modules())
    assert not model[0].weight.requires_grad and model[2 + 1].weight.requires_grad
    after = model.state_dict()
    assert before.keys() == after.keys()
    for k in before:
        assert torch.equal(before[k], after[k]), k
    n_calls = len(calls)
    model(torch.zeros(1, 1, 32, 32))
    assert len(calls) == n_calls + 1  # the user's hook is still there and fires once
    handle.remove()


def test_keras_model_weights_and_trainable_flags_are_unchanged():
    from model_compression_toolkit.ptq import keras_post_training_quantization
    from tests.fixtures.digits import digits_data, keras_digits_cnn

    x_train = digits_data(channels_last=True)[0]
    model = keras_digits_cnn()
    model.layers[1].trainable = False
    before = [w.copy() for w in model.get_weights()]
    flags = [layer.trainable for layer in model.layers]
    names = [layer.name for layer in model.layers]
    keras_post_training_quantization(model, representative_dataset(x_train, 2, 8))
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert [layer.trainable for layer in model.layers] == flags
    assert [layer.name for layer in model.layers] == names


def test_importing_the_package_and_its_core_imports_no_framework():
    code = (
        "import sys, model_compression_toolkit as mct, model_compression_toolkit.core\n"
        "mct.core.CoreConfig()\n"
        "bad = [m for m in ('torch', 'tensorflow', 'keras') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
