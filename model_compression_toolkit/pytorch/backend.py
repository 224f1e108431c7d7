"""The PyTorch backend: torch.fx reads the model, a GraphModule is built back.

``nn.Module --read--> Graph --build--> fx.GraphModule``; `forward` feeds numpy batches in
and gives numpy arrays out. Nothing here changes the user's model.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from model_compression_toolkit.core.backend import Tap
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.pytorch import builder, capture, ops, reader


class PytorchBackend:
    """`core.backend.Backend` for ``torch.nn.Module`` models (NCHW: channels first)."""

    name = "pytorch"
    channels_last = False

    def model_name(self, model: nn.Module) -> str:
        return type(model).__name__

    def input_count(self, model: nn.Module) -> int | None:
        """The parameters of ``forward``, when all are positional without a default; None
        when the count can vary (``*args``, defaults: the reader checks the range)."""
        try:
            params = inspect.signature(model.forward).parameters.values()
        except (TypeError, ValueError):
            return None
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        if any(p.kind not in positional or p.default is not p.empty for p in params):
            return None
        return len(params)

    def input_names(self, model: nn.Module) -> list[str] | None:
        """``forward``'s parameter names in order: the keys a dict batch may give."""
        return capture.input_names(model)

    def expected_input_shapes(self, model: nn.Module) -> list[tuple | None] | None:
        return None  # a torch module does not declare its input shapes

    def is_tensor(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor)

    def to_numpy(self, value: Any) -> np.ndarray:
        return ops.to_numpy(value)

    def read(self, model: nn.Module, sample_inputs: Sequence[np.ndarray]) -> tuple[Graph, list[str]]:
        return reader.read(model, sample_inputs)

    def build(
        self,
        graph: Graph,
        quantized: bool,
        extra_outputs: Sequence[str] = (),
        weights: Mapping[str, Mapping[str, np.ndarray]] | None = None,
        tap: Tap | None = None,
        share: Any = None,
    ) -> nn.Module:
        # ``share`` is not needed: the models built from one graph hold its weights once
        return builder.build(graph, quantized, extra_outputs, weights, tap)

    def forward(self, model: nn.Module, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run in inference mode; the outputs flattened (tuples, lists, dict values) to numpy.

        A built model is put in eval mode; a user's model in training mode is run as an
        eval-mode copy, so its training flag is never changed.
        """
        if model.training:
            if getattr(model, "meta", {}).get(builder.BUILT_MARK):
                model.eval()
            else:
                model = copy.deepcopy(model).eval()
        device = next((t.device for t in (*model.parameters(), *model.buffers())), torch.device("cpu"))
        with torch.no_grad():
            result = model(*(ops.as_tensor(x, device) for x in inputs))
        return [ops.to_numpy(leaf) for leaf in ops.leaves(result)]


