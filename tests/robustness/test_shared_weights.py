"""A layer called twice holds one weight tensor (issue 34): its memory used to count twice
(33800 bytes instead of 17160), so a weights budget the 8-bit model meets pushed every
layer to 4 bits."""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct

NO_SIMILARITY = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))
# fc (64 -> 64) called twice, head (64 -> 4) once: the weights the model holds
KERNELS, BIASES = 64 * 64 + 64 * 4, 64 + 4


def _shared_model(name: str):
    """``head(relu(fc(relu(fc(x)))))``: ``fc`` is one layer called twice."""
    if name == "pytorch":
        import torch
        from torch import nn

        class Twice(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc, self.head = nn.Linear(64, 64), nn.Linear(64, 4)

            def forward(self, x):
                return self.head(torch.relu(self.fc(torch.relu(self.fc(x)))))

        torch.manual_seed(0)
        return Twice().eval()
    import keras

    keras.utils.set_random_seed(0)
    x = keras.Input((64,))
    fc = keras.layers.Dense(64, activation="relu", name="fc")
    out = keras.layers.Dense(4, name="head")(fc(fc(x)))
    return keras.Model(x, out)


def _data():
    x = np.random.default_rng(0).normal(size=(64, 64)).astype(np.float32)
    return lambda: ([x[i : i + 16]] for i in range(0, 64, 16))


def test_a_shared_layer_weights_count_once(fw):
    _, info = fw.ptq(_shared_model(fw.name), _data(), NO_SIMILARITY)
    assert info.memory.weights_float_bytes == 4 * (KERNELS + BIASES)
    assert info.memory.weights_quantized_bytes == KERNELS + 4 * BIASES  # 8-bit kernels, float biases


def test_a_budget_the_8bit_model_meets_keeps_a_shared_layer_at_8_bits(fw):
    budget = KERNELS + 4 * BIASES
    _, info = fw.ptq(
        _shared_model(fw.name), _data(), core_config=NO_SIMILARITY,
        target_resource_utilization=mct.core.ResourceUtilization(weights_memory=budget),
    )  # fmt: skip
    bits = {name: cfg["n_bits"] for name, layer in info.layers.items() for cfg in layer.weights.values()}
    assert bits and set(bits.values()) == {8}, bits
    assert info.memory.weights_quantized_bytes <= budget


@pytest.mark.parametrize("budget_share", [0.75])
def test_a_shared_layer_calls_get_the_same_bits(fw, budget_share):
    """Below the 8-bit size the search chooses bits once per tensor: both calls of ``fc``
    are quantized alike, and the memory reported is the memory met."""
    budget = budget_share * (KERNELS + 4 * BIASES)
    _, info = fw.ptq(
        _shared_model(fw.name), _data(), core_config=NO_SIMILARITY,
        target_resource_utilization=mct.core.ResourceUtilization(weights_memory=budget),
    )  # fmt: skip
    calls = [layer for name, layer in info.layers.items() if name.startswith("fc") and layer.weights]
    assert len(calls) == 2
    assert calls[0].weights == calls[1].weights
    assert info.memory.weights_quantized_bytes <= budget
