"""The troubleshooting part of ``xquant_report_troubleshoot_*``: which layers degrade, and why.

    per-layer metrics --thresholds--> degraded layers
        too many / none  -> general advice
        else, per cause  -> outliers (z-score of the float output), negative tails of
                            GELU/SiLU-like activations, unbalanced concatenations, a last
                            layer left at very few bits -> what to set in the library

Every finding is logged as a warning and returned (``result["troubleshoot"]``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from model_compression_toolkit.core.calibration.statistics import NodeStatistics
from model_compression_toolkit.core.graph import WEIGHTED, Graph, OpKind
from model_compression_toolkit.core.preparation import SHIFT_NEGATIVE_FUNCTIONS
from model_compression_toolkit.xquant.config import XQuantConfig

LOG = logging.getLogger("model_compression_toolkit")


def degraded_layers(metrics: Mapping[str, Mapping[str, float]], config: XQuantConfig) -> dict[str, list[str]]:
    """Layer -> the metrics past their threshold (``is_detect_under...``: below it)."""
    out: dict[str, list[str]] = {}
    for layer, values in metrics.items():
        for name, threshold in config.threshold_quantize_error.items():
            value = values.get(name)
            if value is None or not math.isfinite(value):
                continue
            under = config.is_detect_under_threshold_quantize_error.get(name, False)
            if (value < threshold) if under else (value > threshold):
                out.setdefault(layer, []).append(name)
    return out


def _z_max(s: NodeStatistics) -> float:
    if not s.count:
        return 0.0
    mean = s.sum / s.count
    std = math.sqrt(max(s.sum_squares / s.count - mean * mean, 0.0))
    return max(s.max - mean, mean - s.min) / std if std > 0 else 0.0


def judge(
    graph: Graph, stats: Mapping[str, NodeStatistics], degraded: Mapping[str, list[str]], total: int, config: XQuantConfig
) -> list[dict[str, Any]]:
    """The findings for the degraded layers of ``graph`` (the quantized graph), each with
    the layers it concerns and what to do."""
    if not degraded:
        return [_finding("no degraded layer", [], (
            "no layer crosses the thresholds; if accuracy still drops, compare the float and quantized models on "
            "your validation data, give more representative batches, or let "
            "mct.ptq.*_tuned_post_training_quantization keep the worst layers float"))]  # fmt: skip
    if len(degraded) > config.threshold_degrade_layer_ratio * max(total, 1):
        return [_finding("most layers degraded", sorted(degraded), (
            "the error is not one layer's: check the bit-widths (QuantizationConfig, the platform, a too small "
            "ResourceUtilization budget), use representative data that resembles the real inputs, or keep the "
            "first layers float with mct.core.KeepFloat"))]  # fmt: skip
    findings = []
    outliers = {n: round(_z_max(stats[n]), 1) for n in degraded if n in stats and _z_max(stats[n]) > config.threshold_zscore_outlier_removal}
    if outliers:
        findings.append(_finding("outliers", sorted(outliers), (
            f"these outputs reach {max(outliers.values())} standard deviations from their mean "
            f"({outliers}); remove outliers before the threshold search with "
            f"mct.core.QuantizationConfig(z_threshold={config.threshold_zscore_outlier_removal:g})"), outliers))  # fmt: skip
    negative = [n for n in degraded if n in graph and n in stats and stats[n].min < 0 and _shiftable(graph, n)]
    if negative:
        findings.append(_finding("shift negative activation", negative, (
            "these activations have a small negative tail that wastes half of a signed grid; set "
            "mct.core.QuantizationConfig(shift_negative_activation_correction=True)")))  # fmt: skip
    unbalanced = _unbalanced_concats(graph, stats, config.threshold_ratio_unbalanced_concatenation)
    if unbalanced:
        findings.append(_finding("unbalanced concatenation", sorted(unbalanced), (
            f"the inputs of these concatenations differ in range by more than "
            f"{config.threshold_ratio_unbalanced_concatenation:g}x ({unbalanced}): one grid cannot serve both. Scale "
            "the smaller input up before the concatenation in the float model, or keep the concatenation float "
            "with mct.core.KeepFloat"), unbalanced))  # fmt: skip
    last = [n for n in graph.nodes() if n.kind in WEIGHTED and n.quant.weights][-1:]
    limit = config.threshold_bitwidth_mixed_precision_with_model_output_loss_objective
    if last and min(c.n_bits for c in last[0].quant.weights.values()) <= limit:
        findings.append(_finding("last layer at very few bits", [last[0].name], (
            f"the last layer's weights have {limit} bits or fewer; give it more with "
            "mct.core.BitWidthConfig.set_manual_weights_bit_width(NodeNameFilter(...), 8) or a larger budget")))  # fmt: skip
    if not findings:
        findings.append(_finding("no cause found", sorted(degraded), (
            "none of the known causes applies to the degraded layers; keep them float with mct.core.KeepFloat "
            "and check the accuracy, or give them more bits with mct.core.BitWidthConfig")))  # fmt: skip
    return findings


def _shiftable(graph: Graph, name: str) -> bool:
    node = graph.node(name)
    function = str(node.attrs.get("function") or node.fused_activation or "").lower()
    return function in SHIFT_NEGATIVE_FUNCTIONS


def _unbalanced_concats(graph: Graph, stats: Mapping[str, NodeStatistics], ratio: float) -> dict[str, float]:
    out = {}
    for node in graph.nodes():
        if node.kind != OpKind.CONCAT:
            continue
        ranges = [max(abs(stats[e.src].min), abs(stats[e.src].max)) for e in graph.in_edges(node.name) if e.src in stats]
        ranges = [r for r in ranges if r > 0]
        if len(ranges) > 1 and max(ranges) / min(ranges) > ratio:
            out[node.name] = round(max(ranges) / min(ranges), 1)
    return out


def _finding(cause: str, layers: list[str], advice: str, values: Any = None) -> dict[str, Any]:
    LOG.warning("xquant troubleshooting, %s%s: %s", cause, f" ({', '.join(layers)})" if layers else "", advice)
    finding = {"cause": cause, "layers": layers, "advice": advice}
    if values is not None:
        finding["values"] = values
    return finding
