"""`QuantizationInfo`: what a PTQ call decided, returned as its second value.

The counts and sizes every report gives (``mct.log``, the Text summaries, ``info``, its
JSON) are defined here once: `LayerCounts` (how many layers are quantized, kept in float,
or have nothing to quantize) and `MemorySummary` (the float model *as given* against the
quantized one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from model_compression_toolkit.core.composites import find_composites
from model_compression_toolkit.core.config import ResourceUtilization
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.core.memory import FLOAT_BITS, NodeMemory, activation_bits, graph_memory, total
from model_compression_toolkit.core.numbers import json_safe
from model_compression_toolkit.core.quant_config import QuantGrid
from model_compression_toolkit.core.resources import resource_utilization
from model_compression_toolkit.core.similarity.report import SimilarityReport


def _floats(values: Any) -> list[float] | float | None:
    """A scalar or array as JSON-safe floats (non-finite values become None)."""
    return None if values is None else json_safe(np.asarray(values, dtype=np.float64))


def _grid(grid: QuantGrid | None) -> dict[str, Any] | None:
    if grid is None:
        return None
    return {
        "scale": _floats(grid.scale),
        "zero_point": _floats(grid.zero_point),
        "qmin": grid.qmin,
        "qmax": grid.qmax,
    }


@dataclass
class LayerInfo:
    """One layer: its type, what was quantized and how, or why it stayed float."""

    name: str
    layer_type: str
    kind: str
    origin: list[str]
    weights: dict[str, dict[str, Any]] = field(default_factory=dict)
    activation: dict[str, Any] | None = None
    activation_float_reason: str | None = None
    weights_float_reason: str | None = None

    @classmethod
    def from_node(cls, node: Node) -> LayerInfo:
        q = node.quant
        weights = {
            name: {
                "n_bits": cfg.n_bits,
                "method": cfg.method.value,
                "error_method": cfg.error_method.value,
                "per_channel": cfg.per_channel,
                "channel_axes": list(cfg.channel_axes),
                "threshold": _floats(cfg.threshold),
                "range_min": _floats(cfg.range_min),
                "range_max": _floats(cfg.range_max),
                "grid": _grid(cfg.grid),
            }
            for name, cfg in q.weights.items()
        }
        act = None
        if q.activation is not None:
            a = q.activation
            act = {
                "n_bits": a.n_bits,
                "method": a.method.value,
                "error_method": a.error_method.value,
                "signed": a.signed,
                "threshold": _floats(a.threshold),
                "range_min": _floats(a.range_min),
                "range_max": _floats(a.range_max),
                "grid": _grid(a.grid),
            }
        return cls(
            name=node.name,
            layer_type=node.layer_type,
            kind=node.kind.value,
            origin=list(node.origin),
            weights=weights,
            activation=act,
            activation_float_reason=q.activation_float_reason,
            weights_float_reason=q.weights_float_reason,
        )


def _holds_float_tensor(node: Node) -> bool:
    """Whether the node's output is a floating-point tensor that quantization could apply to
    (not a shape, a constant, or an integer or non-tensor input)."""
    if node.kind in (OpKind.SHAPE, OpKind.CONSTANT):
        return False
    dtype = node.attrs.get("dtype")
    if node.kind == OpKind.INPUT and dtype is not None:
        return dtype != "non-tensor" and ("float" in str(dtype) or str(dtype) in ("half", "double"))
    return True


def float_layers(graph: Graph) -> dict[str, str]:
    """The layers the quantized model runs in float, with the reason: no weight of theirs
    is quantized and their output is stored in float (neither quantized by them, nor by
    the activation they are fused with, nor carried from a quantized input).

    A conv fused with its ReLU (its weights 8-bit, its output quantized after the ReLU), an
    op inside an activation written as ops that is quantized at its end, or fused with the
    quantizer after it (a hard-swish's ``add``, also inside PP-LCNetV3's scale-and-shift chain
    ``hard-swish -> mul -> add``: `core.composites`) or a flatten after a quantized layer is
    *not* a float layer."""
    bits = activation_bits(graph)
    inside = {
        name
        for composite in find_composites(graph)
        if bits[composite.output] != FLOAT_BITS
        for name in composite.inner
    }
    return {
        n.name: n.quant.activation_float_reason or n.quant.weights_float_reason or "not quantized"
        for n in graph.nodes()
        if not n.quant.weights and bits[n.name] == FLOAT_BITS and _holds_float_tensor(n) and n.name not in inside
    }


@dataclass
class LayerCounts:
    """How many layers a quantized graph has of each kind; every report counts with this.

    Attributes:
        layers: every layer (graph node).
        quantized: layers with a quantizer of their own (quantized weights or output).
        kept_float: layers the quantized model runs in float (`float_layers`).
        other: the rest, which have nothing of their own to quantize: fused into the
            activation after them or inside one written as ops, only moving their input's
            quantized values (flatten, reshape), or producing no floating-point tensor
            (shapes, constants, integer inputs).
    """

    layers: int
    quantized: int
    kept_float: int
    other: int

    @classmethod
    def of(cls, graph: Graph, kept_float: Mapping[str, str] | None = None) -> LayerCounts:
        """``kept_float``: ``float_layers(graph)`` when the caller has it."""
        nodes = graph.nodes()
        quantized = sum(1 for n in nodes if n.quant.is_quantized)
        kept = len(float_layers(graph) if kept_float is None else kept_float)
        return cls(len(nodes), quantized, kept, len(nodes) - quantized - kept)


def model_memory(graph: Graph, quantized: bool) -> NodeMemory:
    """A model's weights and activation (one sample) bytes: every report's memory figure."""
    return total(graph_memory(graph, quantized))


@dataclass
class MemorySummary:
    """Total bytes of weights and of activations (one sample): the float model as given
    (before batch norms are folded) and the quantized model."""

    weights_float_bytes: float
    weights_quantized_bytes: float
    activation_float_bytes: float
    activation_quantized_bytes: float

    @classmethod
    def of(cls, graph: Graph, float_graph: Graph | None = None) -> MemorySummary:
        """``graph`` quantized against ``float_graph``, the model as given (default: ``graph`` in float)."""
        before = model_memory(graph if float_graph is None else float_graph, False)
        after = model_memory(graph, True)
        return cls(before.weights_bytes, after.weights_bytes, before.activation_bytes, after.activation_bytes)


@dataclass
class QuantizationInfo:
    """What a PTQ call did, layer by layer.

    Attributes:
        framework: ``"pytorch"`` or ``"keras"``.
        model_name: the model's name in the call folder (PyTorch: its class; Keras: its name).
        layers: every layer of the quantized graph, by name.
        float_layers: layers the quantized model runs in float, with the reason (see
            `core.info.float_layers`: a conv fused with its activation is not one).
        counts: how many layers are quantized, kept in float, or have nothing to quantize.
        unsupported_layers: layers of types the library does not know (kept float).
        memory: weight and activation memory before and after quantization.
        log_folder: this call's call folder, or None when logging is off.
        warnings: the warnings shown during the call.
        similarity: the float vs quantized comparison, when it ran
            (``DebugConfig.analyze_similarity``: by default, when a log folder is set).
        mixed_precision: the bit-widths chosen under a memory budget, when one was given.
        tuning: the trials of accuracy-driven tuning, when it ran.
        extra: anything else a later analysis adds.
        final_resource_utilization: MCT's name: the quantized model's
            `ResourceUtilization` (weights, peak activation and total memory, bops).
    """

    framework: str
    model_name: str
    layers: dict[str, LayerInfo]
    float_layers: dict[str, str]
    unsupported_layers: list[str]
    memory: MemorySummary
    counts: LayerCounts | None = None
    log_folder: Path | None = None
    warnings: list[str] = field(default_factory=list)
    similarity: SimilarityReport | None = None
    mixed_precision: Any = None
    tuning: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    final_resource_utilization: ResourceUtilization | None = None

    @property
    def input_scale(self) -> float:
        """MCT's input scaling factor: always 1.0 here (the input is not rescaled)."""
        return 1.0

    @property
    def mixed_precision_cfg(self) -> Any:
        """MCT's list of candidate indices; not kept here: raises, naming what to read instead."""
        raise AttributeError(
            "QuantizationInfo has no mixed_precision_cfg (MCT's candidate indices); the chosen bit-width of each "
            "layer is info.mixed_precision.bits (layer name -> bits), or info.layers[name].weights['kernel']['n_bits']"
        )

    @classmethod
    def of(
        cls,
        graph: Graph,
        model_name: str,
        warnings: list[str],
        log_folder: Path | None = None,
        float_graph: Graph | None = None,
    ) -> QuantizationInfo:
        """What quantizing to ``graph`` decided; ``float_graph``: the model as given."""
        nodes = graph.nodes()
        return cls(
            framework=graph.framework,
            model_name=model_name,
            layers={n.name: LayerInfo.from_node(n) for n in nodes},
            float_layers=float_layers(graph),
            unsupported_layers=[n.name for n in nodes if n.kind == OpKind.UNKNOWN],
            memory=MemorySummary.of(graph, float_graph),
            counts=LayerCounts.of(graph),
            log_folder=log_folder,
            warnings=list(warnings),
            final_resource_utilization=resource_utilization(graph, quantized=True),
        )

    def to_dict(self) -> dict[str, Any]:
        """Everything as JSON-serialisable values (no NaN or inf)."""
        out = asdict(self)
        out["log_folder"] = str(self.log_folder) if self.log_folder else None
        out["similarity"] = self.similarity.to_dict() if self.similarity else None
        out["final_resource_utilization"] = json_safe(out["final_resource_utilization"])
        for name in ("mixed_precision", "tuning"):  # results with their own JSON form
            value = getattr(self, name)
            out[name] = value.to_dict() if value is not None else None
        return out
