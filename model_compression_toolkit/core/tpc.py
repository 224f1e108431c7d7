"""Target platform capabilities: how a device quantizes each kind of operator.

A `TargetPlatformCapabilities` (TPC) says, as MCT's published platform models do, how the
weights of linear layers are quantized (method, bits, per channel or not, the bit-widths
mixed precision may choose), how outputs are quantized (method, bits, which bit-widths
each operator supports), which operators' outputs are not quantized or keep their input's
grid (*quantization preserving*), which have a fixed grid, and which operator pairs run
fused (only the last one's output is quantized). `mct.get_target_platform_capabilities`
returns one (`core.tpc_models`).

A PTQ call given a TPC resolves it once: its defaults become the `QuantizationConfig`'s
(fields the user set away from their defaults win), and it is applied to the graph as the
first edit of `assign_quantization`::

    assigned graph -> TPC.apply (per-operator rules, fusing) -> BitWidthConfig -> network editor -> KeepFloat
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from model_compression_toolkit.core.config import QuantizationConfig, QuantizationMethod
from model_compression_toolkit.core.graph import VALUE_PRESERVING, Graph, Node, OpKind
from model_compression_toolkit.core.preparation import default_activation

# an activation function (the graph's ``attrs["function"]``) -> MCT's operator set name
_ACTIVATION_SETS = {
    "relu": "ReLU", "relu6": "ReLU6", "leaky_relu": "LeakyReLU", "prelu": "PReLU", "silu": "Swish",
    "swish": "Swish", "hardswish": "Hardswish", "hard_swish": "Hardswish", "sigmoid": "Sigmoid",
    "tanh": "Tanh", "gelu": "GELU", "hardsigmoid": "Hardsigmoid", "hard_sigmoid": "Hardsigmoid",
    "hardtanh": "HardTanh", "elu": "ELU",
}  # fmt: skip
_KIND_SETS = {
    OpKind.CONV: "Conv", OpKind.CONV_TRANSPOSE: "ConvTranspose", OpKind.DENSE: "FullyConnected",
    OpKind.SOFTMAX: "Softmax", OpKind.ADD: "Add", OpKind.SUB: "Sub", OpKind.MUL: "Mul", OpKind.CONCAT: "Concat",
    OpKind.RESIZE: "Resize", OpKind.BATCH_NORM: "BatchNorm", OpKind.RESHAPE: "Reshape", OpKind.PAD: "Pad",
    OpKind.DROPOUT: "Dropout",
}  # fmt: skip


def operator_set(node: Node, output: bool = False) -> str | None:
    """MCT's operator set name for ``node`` (``"Conv"``, ``"MaxPool"``, ``"ReLU"``...), or None.

    With ``output``, a layer that applies an activation itself (Keras
    ``Conv2D(activation="relu")``) is named after that activation: it produces the output.
    """
    if output and node.fused_activation:
        return _ACTIVATION_SETS.get(node.fused_activation.lower())
    if node.kind == OpKind.ACTIVATION:
        return _ACTIVATION_SETS.get(str(node.attrs.get("function", "")).lower())
    if node.kind == OpKind.CONV and "depthwise" in node.layer_type.lower():
        return "DepthwiseConv2D"
    if node.kind == OpKind.POOL:
        return "MaxPool" if "max" in node.layer_type.lower() else "AvgPool"
    if node.kind == OpKind.ELEMENTWISE:
        t = node.layer_type.lower()
        return "MinMax" if any(w in t for w in ("max", "min")) else ("Div" if "div" in t else None)
    return _KIND_SETS.get(node.kind)


@dataclass(frozen=True)
class OpQuantizationConfig:
    """How one set of operators is quantized (the fields of MCT's ``OpQuantizationConfig``
    this library acts on).

    Attributes:
        activation_quantization_method: how an output range is parametrised.
        activation_n_bits: the output's default bit-width.
        supported_activation_n_bits: the output bit-widths the platform supports.
        enable_activation_quantization: False: the output stays float (its values are
            already on its input's grid, e.g. a max pool).
        quantization_preserving: the output is quantized on its input's grid.
        fixed_range: a fixed output grid over [min, max] (no threshold search).
        weights_quantization_method / weights_n_bits / weights_per_channel_threshold:
            how kernels are quantized.
        enable_weights_quantization: False: kernels stay float.
        weights_candidate_bits: the kernel bit-widths mixed precision may choose.
    """

    activation_quantization_method: QuantizationMethod = QuantizationMethod.POWER_OF_TWO
    activation_n_bits: int = 8
    supported_activation_n_bits: tuple[int, ...] = (8,)
    enable_activation_quantization: bool = True
    quantization_preserving: bool = False
    fixed_range: tuple[float, float] | None = None
    weights_quantization_method: QuantizationMethod = QuantizationMethod.SYMMETRIC
    weights_n_bits: int = 8
    weights_per_channel_threshold: bool = True
    enable_weights_quantization: bool = True
    weights_candidate_bits: tuple[int, ...] = (8,)

    def clone_and_edit(self, **changes: Any) -> OpQuantizationConfig:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class OperatorsSet:
    """A named set of operators (MCT's names: ``"Conv"``, ``"MaxPool"``...) and their quantization."""

    name: str
    qc_options: OpQuantizationConfig


@dataclass(frozen=True)
class Fusing:
    """Operators that run fused: an operator of each group in turn, only the last one's
    output quantized (``(("Conv",), ("ReLU", "ReLU6"))``)."""

    operator_groups: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class TargetPlatformCapabilities:
    """A target platform's quantization capabilities (see the module docstring).

    Attributes:
        name: the model's name (``"imx500_tpc"``).
        tpc_platform_type: the device (``"imx500"``, ``"tflite"``, ``"qnnpack"``).
        tpc_version: the version (``"1.0"``, ``"4.0"``, ``"1.0_pot"``).
        default_qco: the quantization of operators in no set.
        operator_set: the operator sets with their own quantization.
        fusing_patterns: the operator sequences that run fused.
    """

    name: str
    tpc_platform_type: str
    tpc_version: str
    default_qco: OpQuantizationConfig
    operator_set: tuple[OperatorsSet, ...] = ()
    fusing_patterns: tuple[Fusing, ...] = ()
    sets: Mapping[str, OpQuantizationConfig] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sets", {s.name: s.qc_options for s in self.operator_set})

    # ------------------------------------------------------------------ facts
    @property
    def tpc_minor_version(self) -> int:
        return int(self.tpc_version.split(".")[0].split("_")[0])

    @property
    def linear(self) -> OpQuantizationConfig:
        """The quantization of convolutions (and of fully connected layers unless set apart)."""
        return self.sets.get("Conv", self.default_qco)

    @property
    def weights_n_bits(self) -> int:
        return self.linear.weights_n_bits

    @property
    def weights_quantization_method(self) -> QuantizationMethod:
        return self.linear.weights_quantization_method

    @property
    def weights_per_channel_threshold(self) -> bool:
        return self.linear.weights_per_channel_threshold

    @property
    def activation_n_bits(self) -> int:
        return self.default_qco.activation_n_bits

    @property
    def activation_quantization_method(self) -> QuantizationMethod:
        return self.default_qco.activation_quantization_method

    @property
    def mixed_precision_weights_bits(self) -> tuple[int, ...]:
        """The kernel bit-widths mixed precision may choose on this platform."""
        return self.linear.weights_candidate_bits

    def config_of(self, set_name: str | None) -> OpQuantizationConfig:
        return self.sets.get(set_name, self.default_qco) if set_name else self.default_qco

    def fuses(self, producer: Node, activation: Node) -> bool:
        """Whether the platform runs ``producer -> activation`` fused."""
        first, second = operator_set(producer, output=True), operator_set(activation)
        return any(
            len(f.operator_groups) == 2 and first in f.operator_groups[0] and second in f.operator_groups[1]
            for f in self.fusing_patterns
        )

    def summary(self) -> str:
        """One line per fact: what quantizing for this platform means."""
        lin, default = self.linear, self.default_qco
        fc = self.sets.get("FullyConnected", lin)
        lines = [
            f"{self.tpc_platform_type} {self.tpc_version} ({self.name})",
            f"  weights: {lin.weights_quantization_method.value}, {lin.weights_n_bits} bits, "
            f"{'per channel' if lin.weights_per_channel_threshold else 'per tensor'}"
            + ("" if fc.weights_per_channel_threshold == lin.weights_per_channel_threshold else
               f" (fully connected: {'per channel' if fc.weights_per_channel_threshold else 'per tensor'})")
            + f"; mixed precision: {list(lin.weights_candidate_bits)} bits",
            f"  activations: {default.activation_quantization_method.value}, {default.activation_n_bits} bits"
            + (f" (linear layers' outputs: {lin.activation_quantization_method.value})"
               if lin.activation_quantization_method != default.activation_quantization_method else ""),
        ]  # fmt: skip
        groups = {
            "outputs not quantized": [s.name for s in self.operator_set if not s.qc_options.enable_activation_quantization
                                      and not s.qc_options.quantization_preserving],
            "quantization preserving": [s.name for s in self.operator_set if s.qc_options.quantization_preserving],
            "fixed grids": [s.name for s in self.operator_set if s.qc_options.fixed_range],
            "16-bit outputs allowed": [s.name for s in self.operator_set if 16 in s.qc_options.supported_activation_n_bits],
        }  # fmt: skip
        lines += [f"  {k}: {', '.join(v)}" for k, v in groups.items() if v]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    # --------------------------------------------------------------- changing
    def with_overrides(self, **changes: Any) -> TargetPlatformCapabilities:
        """This platform with some fields of every operator's configuration replaced (the
        `QuantizationConfig` fields a user set away from their defaults)."""
        if not changes:
            return self

        def edit(qc: OpQuantizationConfig) -> OpQuantizationConfig:
            return qc.clone_and_edit(**changes)

        return dataclasses.replace(
            self, default_qco=edit(self.default_qco),
            operator_set=tuple(OperatorsSet(s.name, edit(s.qc_options)) for s in self.operator_set),
        )  # fmt: skip

    # ---------------------------------------------------------------- applying
    def apply(self, graph: Graph, config: QuantizationConfig) -> None:
        """Quantize ``graph``'s nodes as this platform does (`QuantizationEdit`)."""
        for node in graph.nodes():  # producers the platform does not fuse get their own quantizer
            fused = node.quant.fused_into
            if fused is not None and not self.fuses(node, graph.node(fused)):
                node.quant.fused_into, node.quant.activation_float_reason = None, None
                node.quant.activation = default_activation(config)
        for node in graph.nodes():
            self._weights(node)
            self._output(graph, node)

    def _weights(self, node: Node) -> None:
        q = node.quant
        if not q.weights:
            return
        qc = self.config_of(operator_set(node))
        if not qc.enable_weights_quantization:
            q.weights, q.weights_float_reason = (
                {},
                f"not quantized on {self.tpc_platform_type} {self.tpc_version}",
            )
            return
        for cfg in q.weights.values():
            cfg.method, cfg.n_bits = qc.weights_quantization_method, qc.weights_n_bits
            if not qc.weights_per_channel_threshold:
                cfg.per_channel, cfg.channel_axes = False, ()

    def _output(self, graph: Graph, node: Node) -> None:
        q = node.quant
        if q.activation is None:
            return
        name = operator_set(node, output=True)
        qc = self.config_of(name)
        where = f"{self.tpc_platform_type} {self.tpc_version}"
        if qc.quantization_preserving:
            source = input_carrier(graph, node)
            if source is None:
                q.activation, q.activation_float_reason = (
                    None,
                    f"quantization preserving on {where} ({name}): its input is float",
                )
                return
            q.activation.grid_from = source.name
        elif not qc.enable_activation_quantization:
            q.activation, q.activation_float_reason = (
                None,
                f"not quantized on {where} ({name}): its values stay on its input's grid",
            )
            return
        act = q.activation
        act.method, act.choose_grid = qc.activation_quantization_method, False
        act.allowed_bits = tuple(qc.supported_activation_n_bits)
        act.fixed_range = qc.fixed_range


def input_carrier(graph: Graph, node: Node) -> Node | None:
    """The node whose quantizer sets the grid of ``node``'s first input, or None when it is float."""
    edges = [e for e in graph.in_edges(node.name) if e.dst_index == 0]
    while edges:
        src = graph.node(edges[0].src)
        if src.quant.activation is not None:
            return src
        if src.kind not in VALUE_PRESERVING:
            return None
        edges = [e for e in graph.in_edges(src.name) if e.dst_index == 0]
    return None
