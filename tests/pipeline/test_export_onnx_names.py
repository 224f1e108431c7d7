"""Graph outputs that share a tensor, or a name, with the rest of the graph, written to ONNX.

torch.onnx.export names each tensor after its op (``cat``, ``cat_18``); renaming the
outputs to the layers' names then gave two tensors one name (YOLOv8's final concat), and
onnx's checker refused the file as not in single static assignment form.
"""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct

pytestmark = pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider':UserWarning")
NO_SIMILARITY = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))


def _models():
    import torch
    from torch import nn

    class ConcatOutAndConsumed(nn.Module):
        """The concat is an output and feeds a conv (YOLOv8's head)."""

        def __init__(self) -> None:
            super().__init__()
            self.conv, self.head = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(7, 2, 1)

        def forward(self, x):
            cat = torch.cat([self.conv(x), x], 1)
            return cat, self.head(cat)

    class SplitThenConcat(nn.Module):
        """A node with two outputs, joined again by the output concat."""

        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            a, b = torch.split(self.conv(x), 2, 1)
            return torch.cat([a, b * torch.sigmoid(b)], 1)

    class InputIsOutput(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            return self.conv(x), x

    class OutputTwice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            y = self.conv(x)
            return y, y

    return {
        "concat_out_and_consumed": (ConcatOutAndConsumed, ["cat", "head"]),
        "split_then_concat": (SplitThenConcat, ["cat"]),
        "input_is_output": (InputIsOutput, ["conv", "x_1"]),
        "output_twice": (OutputTwice, ["conv", "conv_1"]),
    }


@pytest.mark.parametrize(
    "case", ["concat_out_and_consumed", "split_then_concat", "input_is_output", "output_twice"]
)
def test_outputs_sharing_a_name_or_a_tensor_export_as_valid_onnx(case, tmp_path):
    import onnx

    cls, names = _models()[case]
    rng = np.random.default_rng(0)
    batches = [[rng.standard_normal((4, 3, 8, 8), dtype=np.float32)] for _ in range(2)]
    data = lambda: iter(batches)  # noqa: E731
    q_model, _ = mct.ptq.pytorch_post_training_quantization(cls().eval(), data, NO_SIMILARITY)
    result = mct.exporter.pytorch_export_model(q_model, tmp_path / "m.onnx", data)
    assert result.parity_ok and [p.name for p in result.parity] == names, result.parity
    model = onnx.load(str(tmp_path / "m.onnx"))
    onnx.checker.check_model(model, full_check=True)
    assert [o.name for o in model.graph.output] == names
    produced = [o for node in model.graph.node for o in node.output]
    assert len(produced) == len(set(produced))
