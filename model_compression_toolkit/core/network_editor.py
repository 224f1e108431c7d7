"""MCT's network editor: edit rules that change how chosen layers are quantized::

    rules = [mct.core.network_editor.EditRule(
        filter=mct.core.network_editor.NodeTypeFilter(Conv2D),
        action=mct.core.network_editor.ChangeCandidatesWeightsQuantConfigAttr(attr_name="kernel", weights_n_bits=4),
    )]
    core_config = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(network_editor=rules))

Each rule becomes a `NodeRule`, applied after the target platform's and the
`BitWidthConfig`'s choices. MCT distinguishes a layer's *candidate* configurations (before
mixed precision chooses) from its *final* one (after); here both set the layer's
configuration before mixed precision runs, and a layer whose bits are set this way keeps
them (mixed precision chooses the others within the budget that leaves).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from model_compression_toolkit.core.config import QuantizationMethod
from model_compression_toolkit.core.node_filters import (
    NodeFilter,
    NodeNameFilter,
    NodeNameRegexFilter,
    NodeNameScopeFilter,
    NodeTypeFilter,
)
from model_compression_toolkit.core.node_rules import WEIGHT_NAMES, NodeRule
from model_compression_toolkit.errors import ConfigurationError


class BaseAction:
    """What an edit rule does to the layers its filter selects."""

    def changes(self) -> dict[str, Any]:
        """``{"activation": {...}, "weights": {...}, "attr": ...}``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        fields = {k: v for k, v in vars(self).items() if v is not None and v != {}}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in fields.items())})"


def _attr(attr_name: str | None) -> str | None:
    if attr_name is None:
        return None
    attr = WEIGHT_NAMES.get(str(attr_name))
    if attr is None:
        raise ConfigurationError(
            f"attr_name={attr_name!r}: weights are named 'kernel' and 'bias' here (PyTorch's 'weight' is the "
            "kernel); constant inputs of functional ops are not quantized"
        )
    return attr


class ChangeCandidatesWeightsQuantConfigAttr(BaseAction):
    """Set weight quantization fields (``weights_n_bits``, ``weights_quantization_method``,
    ``weights_error_method``, ``weights_per_channel_threshold``,
    ``enable_weights_quantization``) of the weight ``attr_name`` (None: every one)."""

    def __init__(self, attr_name: str | None = None, **kwargs: Any) -> None:
        self.attr_name, self.kwargs = attr_name, kwargs

    def changes(self) -> dict[str, Any]:
        return {"weights": dict(self.kwargs), "attr": _attr(self.attr_name)}


class ChangeFinalWeightsQuantConfigAttr(ChangeCandidatesWeightsQuantConfigAttr):
    """As `ChangeCandidatesWeightsQuantConfigAttr` (see the module docstring)."""


class ChangeCandidatesActivationQuantConfigAttr(BaseAction):
    """Set activation quantization fields (``activation_n_bits``,
    ``activation_quantization_method``, ``activation_error_method``,
    ``enable_activation_quantization``, ``z_threshold``,
    ``shift_negative_activation_correction``) of the layer's output."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs

    def changes(self) -> dict[str, Any]:
        return {"activation": dict(self.kwargs)}


class ChangeFinalActivationQuantConfigAttr(ChangeCandidatesActivationQuantConfigAttr):
    """As `ChangeCandidatesActivationQuantConfigAttr` (see the module docstring)."""


class ChangeCandidatesActivationQuantizationMethod(BaseAction):
    """Set how the layer's output range is parametrised (`QuantizationMethod`)."""

    def __init__(self, activation_quantization_method: QuantizationMethod | None = None) -> None:
        self.activation_quantization_method = activation_quantization_method

    def changes(self) -> dict[str, Any]:
        return {"activation": {"activation_quantization_method": self.activation_quantization_method}}


class ChangeFinalActivationQuantizationMethod(ChangeCandidatesActivationQuantizationMethod):
    """As `ChangeCandidatesActivationQuantizationMethod`."""


class ChangeCandidatesWeightsQuantizationMethod(BaseAction):
    """Set how the weight ``attr_name``'s range is parametrised (`QuantizationMethod`)."""

    def __init__(self, attr_name: str | None = None, weights_quantization_method: QuantizationMethod | None = None):
        self.attr_name, self.weights_quantization_method = attr_name, weights_quantization_method

    def changes(self) -> dict[str, Any]:
        return {"weights": {"weights_quantization_method": self.weights_quantization_method}, "attr": _attr(self.attr_name)}


class ChangeFinalWeightsQuantizationMethod(ChangeCandidatesWeightsQuantizationMethod):
    """As `ChangeCandidatesWeightsQuantizationMethod`."""


class ChangeQuantizationParamFunction(BaseAction):
    """MCT's custom threshold functions: not provided (an error says what to use)."""

    def __init__(self, attr_name: str | None = None, activation_quantization_params_fn: Any = None,
                 weights_quantization_params_fn: Any = None) -> None:  # fmt: skip
        self.attr_name = attr_name
        self.activation_quantization_params_fn = activation_quantization_params_fn
        self.weights_quantization_params_fn = weights_quantization_params_fn

    def changes(self) -> dict[str, Any]:
        raise ConfigurationError(
            "ChangeQuantizationParamFunction is not provided by this library: thresholds are chosen by the error "
            "method; set activation_error_method / weights_error_method (NOCLIPPING, MSE, MAE, LP, KL, HMSE) or "
            "z_threshold with ChangeCandidatesActivationQuantConfigAttr / ChangeCandidatesWeightsQuantConfigAttr"
        )


class ReplaceLayer(BaseAction):
    """MCT's layer replacement: not provided (an error says what to use)."""

    def __init__(self, layer_type: Any = None, get_params_and_weights_fn: Any = None) -> None:
        self.layer_type, self.get_params_and_weights_fn = layer_type, get_params_and_weights_fn

    def changes(self) -> dict[str, Any]:
        raise ConfigurationError(
            "ReplaceLayer is not provided by this library: edit the float model before quantizing it, or keep the "
            "layer float with mct.core.KeepFloat"
        )


@dataclass(frozen=True)
class EditRule:
    """Apply ``action`` to the layers ``filter`` selects."""

    filter: NodeFilter
    action: BaseAction

    def rule(self, index: int = 0) -> NodeRule:
        """This edit as a validated `NodeRule` (``index``: its place in the list, for messages)."""
        who = f"network_editor rule {index} ({_describe(self.filter)} -> {self.action!r})"
        if not isinstance(self.action, BaseAction):
            raise ConfigurationError(f"{who}: the action must be one of mct.core.network_editor's; got {type(self.action).__name__}")
        changes: Mapping[str, Any] = self.action.changes()
        rule = NodeRule(
            self.filter, activation=changes.get("activation", {}), weights=changes.get("weights", {}),
            attr=changes.get("attr"), source=who,
        )  # fmt: skip
        rule.validate()
        return rule


def _describe(f: Any) -> str:
    return f.describe() if isinstance(f, NodeFilter) else repr(f)


__all__ = [
    "BaseAction",
    "ChangeCandidatesActivationQuantConfigAttr",
    "ChangeCandidatesActivationQuantizationMethod",
    "ChangeCandidatesWeightsQuantConfigAttr",
    "ChangeCandidatesWeightsQuantizationMethod",
    "ChangeFinalActivationQuantConfigAttr",
    "ChangeFinalActivationQuantizationMethod",
    "ChangeFinalWeightsQuantConfigAttr",
    "ChangeFinalWeightsQuantizationMethod",
    "ChangeQuantizationParamFunction",
    "EditRule",
    "NodeNameFilter",
    "NodeNameRegexFilter",
    "NodeNameScopeFilter",
    "NodeTypeFilter",
    "ReplaceLayer",
]
