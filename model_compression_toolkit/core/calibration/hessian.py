"""The Hessian diagonal ``HMSE`` weighs weight errors by.

A layer computes ``y = W x``. The squared error its quantized weights cause,
``E||(Wq - W) x||^2``, has the Hessian ``2 E[x x^T]`` with respect to each output's weights;
its diagonal, ``2 E[x_i^2]``, says how much an error in the weight that multiplies input
``i`` costs (the layer-wise Hessian of OBS and GPTQ). Each weight's importance is the second
moment of the input channel it reads, from the statistics pass::

    stats[input].mean_square_per_channel --input channel of each weight--> cfg.importance
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from model_compression_toolkit.core.calibration.bias_correction import _groups, input_channel_stat
from model_compression_toolkit.core.calibration.statistics import NodeStatistics
from model_compression_toolkit.core.config import QuantizationErrorMethod
from model_compression_toolkit.core.graph import Graph, Node


def wants_second_moments(graph: Graph) -> bool:
    """Whether any weight of ``graph`` is quantized with ``HMSE``."""
    return any(
        cfg.error_method == QuantizationErrorMethod.HMSE for node in graph.nodes() for cfg in node.quant.weights.values()
    )


def set_importance(graph: Graph, stats: Mapping[str, NodeStatistics]) -> list[str]:
    """Give each ``HMSE`` kernel its importance (an array shaped like it); a layer whose
    input's second moments are not known keeps None (its errors count the same).

    Returns:
        The layers given one.
    """
    done = []
    for node in graph.nodes():
        cfg = node.quant.weights.get("kernel")
        if cfg is None or cfg.error_method != QuantizationErrorMethod.HMSE or "kernel" not in node.kernel_in_axis:
            continue
        moments = input_channel_stat(graph, node, stats, "mean_square_per_channel", "mean_square_per_feature")
        cfg.importance = None if moments is None else kernel_importance(node, moments)
        if cfg.importance is not None:
            done.append(node.name)
    return done


def kernel_importance(node: Node, moments: np.ndarray) -> np.ndarray:
    """``moments[c]`` of the input channel ``c`` each kernel element multiplies, shaped
    like the kernel (grouped and depthwise kernels included), floored at a millionth of
    the largest so that no weight is free to be anything."""
    kernel = node.weights["kernel"]
    nd = kernel.ndim
    in_axis = node.kernel_in_axis["kernel"] % nd
    out_axes = tuple(a % nd for a in node.kernel_axes["kernel"])
    shape = [1] * nd
    shape[in_axis] = kernel.shape[in_axis]
    channel = np.arange(kernel.shape[in_axis]).reshape(shape)
    if in_axis not in out_axes and out_axes:  # group g of the outputs reads group g of the inputs
        out_axis = out_axes[0]
        outputs = kernel.shape[out_axis]
        out_shape = [1] * nd
        out_shape[out_axis] = outputs
        group = (np.arange(outputs) // max(outputs // _groups(node), 1)).reshape(out_shape)
        channel = group * kernel.shape[in_axis] + channel
    moments = np.asarray(moments, np.float64)
    floor = max(float(moments.max(initial=0.0)) * 1e-6, 1e-30)
    return np.broadcast_to(np.maximum(moments, floor)[np.clip(channel, 0, moments.size - 1)], kernel.shape)
