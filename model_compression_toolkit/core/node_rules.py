"""Per-layer changes to the quantization `assign_quantization` decided.

A `NodeRule` selects nodes with a `NodeFilter` and sets fields of their activation and/or
weight quantization, named as in MCT (``activation_n_bits``, ``weights_n_bits``,
``weights_per_channel_threshold``...). `mct.core.BitWidthConfig` and MCT's network editor
rules become NodeRules::

    assigned graph -> platform rules -> BitWidthConfig rules -> network editor rules -> KeepFloat

A change to an activation lands on the node that carries the node's output quantization:
the node itself, or the activation it is fused with (``conv -> relu``: the relu).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from model_compression_toolkit.core.bit_width import BitWidthConfig
from model_compression_toolkit.core.config import (
    MAX_BITS,
    MIN_BITS,
    QuantizationConfig,
    QuantizationErrorMethod,
    QuantizationMethod,
)
from model_compression_toolkit.core.graph import WEIGHTED, Graph, Node
from model_compression_toolkit.core.node_filters import NodeFilter, closest_names, node_names
from model_compression_toolkit.core.preparation import (
    default_activation,
    output_float_reason,
    shift_negative_candidate,
)
from model_compression_toolkit.core.quant_config import WeightsQuantConfig
from model_compression_toolkit.errors import ConfigurationError, LayerSelectionError


def _bits(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and MIN_BITS <= v <= MAX_BITS


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v) and v > 0


# field -> (check, what it must be)
ACTIVATION_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "activation_n_bits": (_bits, f"an integer from {MIN_BITS} to {MAX_BITS}"),
    "activation_quantization_method": (lambda v: isinstance(v, QuantizationMethod), "a mct.core.QuantizationMethod"),
    "activation_error_method": (
        lambda v: isinstance(v, QuantizationErrorMethod) and v != QuantizationErrorMethod.HMSE,
        "a mct.core.QuantizationErrorMethod other than HMSE",
    ),
    "enable_activation_quantization": (lambda v: isinstance(v, bool), "True or False"),
    "z_threshold": (_positive, "a number > 0 (math.inf: no outlier removal)"),
    "shift_negative_activation_correction": (lambda v: isinstance(v, bool), "True or False"),
}
WEIGHTS_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "weights_n_bits": (_bits, f"an integer from {MIN_BITS} to {MAX_BITS}"),
    "weights_quantization_method": (lambda v: isinstance(v, QuantizationMethod), "a mct.core.QuantizationMethod"),
    "weights_error_method": (lambda v: isinstance(v, QuantizationErrorMethod), "a mct.core.QuantizationErrorMethod"),
    "weights_per_channel_threshold": (lambda v: isinstance(v, bool), "True or False"),
    "enable_weights_quantization": (lambda v: isinstance(v, bool), "True or False"),
}


def check_fields(changes: Mapping[str, Any], known: Mapping[str, tuple[Callable[[Any], bool], str]], who: str) -> None:
    """Raise ConfigurationError for a field ``known`` does not list or a value it rejects."""
    for name, value in changes.items():
        if name not in known:
            raise ConfigurationError(
                f"{who} sets {name!r}, which is not a field this library can change per layer; it can change "
                f"{', '.join(sorted(known))}"
            )
        check, expected = known[name]
        if not check(value):
            raise ConfigurationError(f"{who} sets {name} to {value!r}; expected {expected}")


@dataclass(frozen=True)
class NodeRule:
    """Set quantization fields of the nodes ``select`` picks.

    Attributes:
        select: which nodes.
        activation: activation fields to set (`ACTIVATION_FIELDS`).
        weights: weight fields to set (`WEIGHTS_FIELDS`).
        attr: the weights ``weights`` applies to: those whose name contains it
            (``"kernel"``); None: every quantized weight of the node.
        source: who asked, in the user's words, for error messages.
        required: a rule that changes nothing is an error (a user's rule always is).
    """

    select: NodeFilter
    activation: Mapping[str, Any] = field(default_factory=dict)
    weights: Mapping[str, Any] = field(default_factory=dict)
    attr: str | None = None
    source: str = "a rule"
    required: bool = True

    def validate(self) -> None:
        if not isinstance(self.select, NodeFilter):
            raise ConfigurationError(
                f"{self.source}: the filter must be a mct.core.network_editor node filter (NodeNameFilter, "
                f"NodeTypeFilter, NodeNameScopeFilter, NodeNameRegexFilter); got {type(self.select).__name__}"
            )
        check_fields(self.activation, ACTIVATION_FIELDS, self.source)
        check_fields(self.weights, WEIGHTS_FIELDS, self.source)

    def apply(self, graph: Graph, config: QuantizationConfig) -> None:
        selected = [node for node in graph.nodes() if self.select.apply(node)]
        if not selected:
            if self.required:
                raise LayerSelectionError(f"{self.source}: {self.select.describe()} selects no layer; {_closest(graph, self.select)}")
            return
        changed = False
        skipped: dict[str, str] = {}
        for node in selected:
            if self.activation:
                carrier = _activation_carrier(graph, node, self.activation)
                if carrier is None:
                    skipped[node.name] = node.quant.activation_float_reason or "its output is not quantized"
                else:
                    self._set_activation(graph, carrier, config)
                    changed = True
            if self.weights:
                if self._set_weights(node, config):
                    changed = True
                elif not self.activation:
                    skipped[node.name] = node.quant.weights_float_reason or "it has no quantized weights"
        if self.required and not changed:
            why = "; ".join(f"{n!r}: {r}" for n, r in list(skipped.items())[:5])
            raise LayerSelectionError(f"{self.source}: {self.select.describe()} selects only layers it cannot change ({why})")

    # ------------------------------------------------------------ activations
    def _set_activation(self, graph: Graph, node: Node, config: QuantizationConfig) -> None:
        q = node.quant
        changes = dict(self.activation)
        enable = changes.pop("enable_activation_quantization", None)
        if enable is False:
            q.activation, q.activation_float_reason = None, f"not quantized: {self.source}"
            return
        if q.activation is None:  # enable=True on an output a platform rule left float
            q.activation, q.activation_float_reason = default_activation(config), None
        act = q.activation
        if "activation_n_bits" in changes:
            bits = changes["activation_n_bits"]
            if act.allowed_bits is not None and bits not in act.allowed_bits:
                raise ConfigurationError(
                    f"{self.source} sets {node.name!r} to {bits}-bit activations; the target platform allows "
                    f"{list(act.allowed_bits)} there. Choose a platform version that allows it (imx500 4.0 allows "
                    "16-bit activations for adds, multiplies, concatenations and activations), or other bits"
                )
            act.n_bits = bits
        if "activation_quantization_method" in changes:
            act.method, act.choose_grid = changes["activation_quantization_method"], False
        if "activation_error_method" in changes:
            act.error_method = changes["activation_error_method"]
        if "z_threshold" in changes:
            act.z_threshold = float(changes["z_threshold"])
        if "shift_negative_activation_correction" in changes:
            on = changes["shift_negative_activation_correction"] and shift_negative_candidate(graph, node)
            act.shift_negative_ratio = float(config.shift_negative_ratio) if on else None

    # ---------------------------------------------------------------- weights
    def _set_weights(self, node: Node, config: QuantizationConfig) -> bool:
        q = node.quant
        changes = dict(self.weights)
        enable = changes.pop("enable_weights_quantization", None)
        names = [w for w in node.kernel_axes if self.attr is None or self.attr in w]
        if enable is False:
            dropped = [w for w in names if w in q.weights]
            for w in dropped:
                del q.weights[w]
            if dropped and not q.weights:
                q.weights_float_reason = f"not quantized: {self.source}"
            return bool(dropped)
        if enable and node.kind in WEIGHTED:
            for w in names:
                if w not in q.weights:
                    axes = node.kernel_axes[w]
                    q.weights[w] = WeightsQuantConfig(
                        config.weights_n_bits, config.weights_quantization_method, config.weights_error_method,
                        config.weights_per_channel and bool(axes), tuple(axes) if config.weights_per_channel else (),
                    )  # fmt: skip
                    q.weights_float_reason = None
        configs = [(w, q.weights[w]) for w in names if w in q.weights]
        for w, cfg in configs:
            if "weights_n_bits" in changes:
                cfg.n_bits, cfg.manual = changes["weights_n_bits"], True
            if "weights_quantization_method" in changes:
                cfg.method = changes["weights_quantization_method"]
            if "weights_error_method" in changes:
                cfg.error_method = changes["weights_error_method"]
            if "weights_per_channel_threshold" in changes:
                axes = tuple(node.kernel_axes[w])
                on = changes["weights_per_channel_threshold"] and bool(axes)
                cfg.per_channel, cfg.channel_axes = on, axes if on else ()
        return bool(configs)


# MCT's and the frameworks' weight names -> the neutral names layers use here
WEIGHT_NAMES = {"weight": "kernel", "depthwise_kernel": "kernel", "kernel": "kernel", "bias": "bias"}


def bit_width_rules(config: BitWidthConfig) -> list[NodeRule]:
    """A `BitWidthConfig`'s selections as validated `NodeRule`s, activations first."""
    rules = []
    for s in config.manual_activation_bit_width_selection_list:
        who = f"BitWidthConfig.set_manual_activation_bit_width({_describe(s.filter)}, {s.bit_width!r})"
        rules.append(NodeRule(s.filter, activation={"activation_n_bits": s.bit_width}, source=who))
    for s in config.manual_weights_bit_width_selection_list:
        who = f"BitWidthConfig.set_manual_weights_bit_width({_describe(s.filter)}, {s.bit_width!r}, {s.attr!r})"
        attr = WEIGHT_NAMES.get(str(s.attr))
        if attr is None:
            raise ConfigurationError(
                f"{who}: weights are named 'kernel' and 'bias' here (PyTorch's 'weight' is the kernel); "
                f"got {s.attr!r}. Constant inputs of functional ops are not quantized"
            )
        if attr == "bias":
            raise ConfigurationError(f"{who}: biases stay float (and bias-corrected) here; set the 'kernel'")
        rules.append(NodeRule(s.filter, weights={"weights_n_bits": s.bit_width}, attr=attr, source=who))
    for rule in rules:
        rule.validate()
    return rules


def _describe(f: Any) -> str:
    return f.describe() if isinstance(f, NodeFilter) else repr(f)


def _activation_carrier(graph: Graph, node: Node, changes: Mapping[str, Any]) -> Node | None:
    """The node whose activation quantizer quantizes ``node``'s output, or None."""
    q = node.quant
    if q.activation is not None:
        return node
    if q.fused_into is not None:
        return graph.node(q.fused_into)
    if changes.get("enable_activation_quantization") and output_float_reason(graph, node) is None:
        return node  # left float by a platform or an earlier rule: can be quantized again
    return None


def _closest(graph: Graph, select: NodeFilter) -> str:
    names = list(dict.fromkeys(n for node in graph.nodes() for n in node_names(node)))
    words = [getattr(select, a) for a in ("node_name", "node_name_scope") if hasattr(select, a)]
    close = closest_names(str(words[0]), names) if words else []
    if close:
        return "closest layer names: " + ", ".join(repr(c) for c in close)
    types = sorted({node.layer_type for node in graph.nodes()})
    return f"the model's layer types are {types}"
