"""A network that turns float32 rounding into whole steps, on a small model: the export's floor
shows it (issue 30).

A value within float32 rounding of a rounding boundary lands one step off in any runtime that
sums in another order; on a network whose layers carry one step of their input into several
steps of their output, the steps multiply through the depth. The quantized model does the
same to itself: with float32 rounding noise at each quantizer (`RoundingFloor`) it lands about
as far from its own outputs as the runtime does.

The export's floor used to move only the model's inputs, which the input quantizer rounds
away: it said 1.0 (no amplification) on every model with a quantized input. A conv stack of
16 layers reproduces the amplification here: the runtime lands 4 steps off (over the one-step
parity), and the floor says the model alone does. (PP-OCRv4's own drift had causes of its own,
now fixed: tests/pipeline/test_export_rounding.py.)
"""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.core.export.grids import output_step
from model_compression_toolkit.core.export.report import FLOOR_NOISE, perturbed
from model_compression_toolkit.pipeline.session import produced_graph

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

# the outputs on a grid too: parity and the floor are counted in steps of the output's grid
NO_SIMILARITY = mct.core.CoreConfig(
    debug_config=mct.core.DebugConfig(analyze_similarity=False), quantize_outputs=True
)
DEPTH, CHANNELS, SIZE = 16, 16, 24


def _conv_stack() -> torch.nn.Module:
    """``DEPTH`` 3x3 convs with hard-swish, weights drawn with a gain of 1.7: each layer spreads
    a one-step difference of its input over its neighbours and several steps of its output."""
    nn = torch.nn
    generator = torch.Generator().manual_seed(0)
    layers: list[nn.Module] = [nn.Conv2d(3, CHANNELS, 3, padding=1)]
    for _ in range(DEPTH):
        conv = nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1)
        with torch.no_grad():
            conv.weight.normal_(0.0, 1.7 / np.sqrt(9 * CHANNELS), generator=generator)
            conv.bias.uniform_(-0.1, 0.1, generator=generator)
        layers += [conv, nn.Hardswish()]
    return nn.Sequential(*layers).eval()


@pytest.fixture(scope="module")
def quantized():
    # 8-bit images, as PP-OCR's inputs are: each value on the input's grid
    x = (np.random.default_rng(0).integers(0, 256, (16, 3, SIZE, SIZE)) / 255).astype(np.float32)
    batches = [[x[:8]], [x[8:]]]
    q_model, _ = mct.ptq.pytorch_post_training_quantization(
        _conv_stack(), lambda: iter(batches), NO_SIMILARITY
    )
    return q_model, batches


def test_noise_on_the_inputs_alone_is_rounded_away_by_the_input_quantizer(quantized):
    """Why the old floor saw nothing: the first quantizer gives back the same integers."""
    q_model, batches = quantized
    x = batches[0][0]
    with torch.no_grad():
        clean = q_model(torch.as_tensor(x)).numpy()
        noisy = q_model(torch.as_tensor(perturbed([x], seed=0)[0])).numpy()
    np.testing.assert_array_equal(clean, noisy)


def test_the_rounding_floor_without_noise_is_the_quantized_model():
    """On a network that does not amplify rounding (the shipped digits CNN; the conv stack
    above turns any float32 difference into steps, so it cannot tell), the floor with no
    noise computes the quantized model: within one step."""
    from model_compression_toolkit.pytorch.export import RoundingFloor
    from tests.fixtures.digits import digits_data, representative_dataset
    from tests.fixtures.trained import load_trained

    x_train = digits_data(channels_last=False)[0]
    q_model, _ = mct.ptq.pytorch_post_training_quantization(
        load_trained("pytorch"), representative_dataset(x_train), mct.core.CoreConfig(quantize_outputs=True)
    )
    graph, x = produced_graph(q_model), torch.as_tensor(x_train[:64])
    with torch.no_grad():
        reference = q_model(x).numpy()
        (floor,) = RoundingFloor(graph, 0.0)(x)
    step = output_step(graph, graph.outputs[0][0])
    # the same model but for the float32 rounding of each weight's scale: within a step
    assert np.abs(floor.numpy() - reference).max() <= step * 1.001


def test_the_export_floor_shows_that_the_model_alone_moves_as_far_as_the_runtime(quantized, tmp_path):
    q_model, batches = quantized
    result = mct.exporter.pytorch_export_model(q_model, str(tmp_path / "stack.onnx"), lambda: iter(batches))
    (parity,) = result.parity
    # the runtime lands more than one step off: the cause reproduced
    assert parity.max_steps > 1, parity
    # the quantized model, with float32 rounding noise at each quantizer, moves more than a step
    # too (the old floor, noise on the inputs, said 1.0 and 0 steps)
    assert parity.floor_max_steps is not None and parity.floor_max_steps > 1, parity
    assert parity.floor_cosine < 1.0, parity
    # and about as far as the runtime: the runtime's departure is within 10x the floor's
    assert 1 - parity.cosine <= 10 * (1 - parity.floor_cosine), parity
    assert FLOOR_NOISE <= 1e-5  # the floor is float32 rounding, not a tolerance that hides a bug
