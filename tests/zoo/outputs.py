"""Running a zoo model on a batch and reading its outputs, the same way for both frameworks."""

from __future__ import annotations

from typing import Any

import numpy as np


def run_model(model: Any, batch: Any, framework: str) -> Any:
    """``model`` on ``batch`` (a list in argument order, or a dict of keyword inputs)."""
    if framework == "pytorch":
        import torch

        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        with torch.no_grad():
            if isinstance(batch, dict):
                return model(**{k: torch.as_tensor(v, device=device) for k, v in batch.items()})
            return model(*(torch.as_tensor(v, device=device) for v in batch))
    if isinstance(batch, dict):
        return model(batch, training=False)
    return model(batch[0] if len(batch) == 1 else list(batch), training=False)


def leaves(value: Any) -> list[np.ndarray]:
    """Every tensor of an output structure (a ModelOutput's fields, a dict's values), in order."""
    if isinstance(value, dict):  # transformers' ModelOutput is an OrderedDict
        return [x for v in value.values() for x in leaves(v)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in leaves(v)]
    if value is None:
        return []
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return [np.asarray(value)]


def first_output(value: Any) -> np.ndarray:
    """The main output: logits or last hidden state (a ModelOutput's first field)."""
    return leaves(value)[0]
