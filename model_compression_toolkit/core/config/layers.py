"""`KeepFloat`: the layers a call keeps unquantized."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from model_compression_toolkit.errors import ConfigurationError


@dataclass
class KeepFloat:
    r"""Layers to keep unquantized, chosen by exact name, regular expression or layer type.

    Names and patterns match the layer names the model uses (PyTorch module paths such as
    ``"layer1.0.conv1"``, Keras layer names); a pattern must match a whole name. Types are
    layer type names (``"Conv2d"``, ``"Dense"``), classes, or the neutral kinds
    (``"conv"``, ``"dense"``, ``"activation"``...). ``weights`` / ``activations`` say which
    part stays float::

        mct.core.KeepFloat(names=["features.0"])                  # weights and output
        mct.core.KeepFloat(patterns=[r"layer4\..*"], activations=False)  # weights only
        mct.core.KeepFloat(types=["Softmax"], weights=False)       # outputs only
    """

    names: Sequence[str] = ()
    patterns: Sequence[str] = ()
    types: Sequence[str | type] = ()
    weights: bool = True
    activations: bool = True

    def validate(self) -> None:
        for field_name in ("names", "patterns", "types"):
            value = getattr(self, field_name)
            if isinstance(value, (str, type)) or not isinstance(value, Sequence):
                raise ConfigurationError(
                    f"KeepFloat.{field_name} must be a list; got {value!r}. Write {field_name}=[{value!r}]."
                )
        for pattern in self.patterns:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ConfigurationError(f"KeepFloat pattern {pattern!r} is not a valid regular expression: {err}") from None
        if not (self.weights or self.activations):
            raise ConfigurationError("KeepFloat keeps nothing float: weights and activations are both False")


def keep_float_rules(activations: Sequence[str], weights: Sequence[str]) -> list[KeepFloat]:
    """Rules keeping these layers' outputs float, and these layers' weights float."""
    rules = []
    if activations:
        rules.append(KeepFloat(names=list(activations), weights=False))
    if weights:
        rules.append(KeepFloat(names=list(weights), activations=False))
    return rules
