"""Bias correction: the mean shift that quantizing a layer's kernel causes, taken out of its bias.

A layer computes ``y = W x + b``; quantized, ``Wq x + b``. On average over the data the
output moves by ``E[Wq x] - E[W x] = (Wq - W) E[x]``, the same for every sample, so
subtracting it from the bias gives the quantized layer the float layer's mean output::

    b' = b - sum over input channels and kernel positions of (Wq - W) * mean(x)

``mean(x)`` is the float input's mean per channel, from the statistics pass (the
statistics of the node feeding the layer). This is MCT's ``weights_bias_correction``
and the empirical bias correction of Nagel et al., "Data-Free Quantization Through
Weight Equalization and Bias Correction" (ICCV 2019). For a convolution the sum runs
over the kernel positions; a position that the layer's zero padding covers at some outputs
reads zeros there, so its mean counts only for the fraction of outputs where it reads the
input (`tap_coverage`)::

    b' = b - sum over input channels c and kernel positions k of (Wq - W)[c, k] * mean(x_c) * coverage[k]

Taking every position to read the mean corrected a padded layer for values its border outputs
never read: the digits CNN (3x3 convs with padding 1) gains 0.7 dB of output SQNR from
counting the padding (29.9 -> 30.7 dB, bench/results/peers.md).

The correction depends on the kernel's grid, so it is not stored: a node keeps only
``quant.input_mean`` and the corrected bias is computed wherever the quantized bias is
read (`quantizers.node_weight`), with whatever bit-width the node has at that moment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from model_compression_toolkit.core.calibration.statistics import NodeStatistics
from model_compression_toolkit.core.graph import Edge, Graph, Node, OpKind

# Ops between a layer and the node whose statistics describe its input: they move values
# without changing them, so the mean of each channel carries over (a flatten of 1x1 maps).
_PASS_THROUGH = frozenset({OpKind.RESHAPE, OpKind.DROPOUT, OpKind.IDENTITY})


def set_input_means(graph: Graph, stats: Mapping[str, NodeStatistics]) -> list[str]:
    """Give every layer with a quantized kernel the float mean of its input, per channel.

    A layer is left uncorrected (``quant.input_mean`` None) when its backend did not say
    which kernel axis runs over the input channels, or when no statistics describe its
    input channel by channel. A corrected layer without a bias gets a zero one, so that
    the quantized model has somewhere to put the correction.

    Returns:
        The names of the corrected layers.
    """
    corrected = []
    for node in graph.nodes():
        node.quant.input_mean = None
        if not _correctable(node):
            continue
        mean = _input_mean(graph, node, stats)
        if mean is None:
            continue
        node.quant.input_mean = mean
        if "bias" not in node.weights:
            node.weights["bias"] = np.zeros(_out_channels(node), node.weights["kernel"].dtype)
        corrected.append(node.name)
    return corrected


def input_sources(graph: Graph) -> list[str]:
    """The nodes whose statistics `set_input_means` reads: the data input of every
    correctable layer, through the ops that pass values on unchanged. The statistics pass
    collects them whether or not they are quantized (an output kept float still feeds a
    layer whose bias is corrected)."""
    sources = []
    for node in graph.nodes():
        if not _correctable(node):
            continue
        edge = _only_data_input(graph, node.name)
        while edge is not None and graph.node(edge.src).kind in _PASS_THROUGH:
            edge = _only_data_input(graph, edge.src)
        if edge is not None and edge.src not in sources:
            sources.append(edge.src)
    return sources


def possible_new_biases(graph: Graph) -> dict[str, int]:
    """Layer -> values of the zero bias `set_input_means` would give it, for every layer
    without a bias that it may correct. Whether it does depends on the statistics, so
    this is what a check made before them must count: an upper bound."""
    return {
        node.name: _out_channels(node)
        for node in graph.nodes()
        if _correctable(node) and "bias" not in node.weights
    }


def _correctable(node: Node) -> bool:
    """Whether ``node`` has a quantized kernel whose input-channel axis its backend named:
    a layer bias correction corrects when the statistics describe its input."""
    return "kernel" in node.quant.weights and "kernel" in node.kernel_in_axis


def corrected_bias(node: Node, quantized_kernel: np.ndarray) -> np.ndarray:
    """The bias that gives ``node``, with ``quantized_kernel``, the float layer's mean output."""
    kernel = node.weights["kernel"]
    if node.quant.input_mean is None:
        raise ValueError(f"{node.name}: its bias is corrected only once the input's mean is collected")
    delta = np.asarray(quantized_kernel, np.float64) - kernel
    coverage = tap_coverage(node)
    if coverage is not None:  # a kernel position over the padding reads zeros, not the mean
        delta = delta * coverage
    shift = mean_shift(delta, node.kernel_axes["kernel"], node.kernel_in_axis["kernel"], _groups(node),
                       node.quant.input_mean)  # fmt: skip
    bias = node.weights["bias"]
    return (bias - shift).astype(bias.dtype)


def mean_shift(
    delta: np.ndarray, out_axes: tuple[int, ...], in_axis: int, groups: int, mean: np.ndarray
) -> np.ndarray:
    """``delta * mean`` summed over the input channels and kernel positions, per output channel.

    Args:
        delta: the kernel's quantization error, any layout.
        out_axes: its output-channel axes, in C order (Keras depthwise: ``(in, mult)``).
        in_axis: its input-channel axis; may be one of ``out_axes`` (a depthwise kernel,
            where output channel ``(c, m)`` reads input channel ``c`` only).
        groups: input and output channels split into this many groups, group ``g`` of the
            outputs reading group ``g`` of the inputs (PyTorch ``groups``, Keras ``groups``).
        mean: the input's mean, one per input channel.
    """
    nd = delta.ndim
    out_axes = tuple(a % nd for a in out_axes)
    in_axis %= nd
    spatial = tuple(a for a in range(nd) if a not in out_axes and a != in_axis)
    summed = delta.sum(axis=spatial)  # axes left in their order: out axes and the input axis
    kept = [a for a in range(nd) if a not in spatial]
    if in_axis in out_axes:  # depthwise: each output reads one input channel
        shape = [1] * summed.ndim
        shape[kept.index(in_axis)] = -1
        return (summed * np.reshape(mean, shape)).reshape(-1)
    per_out = np.moveaxis(summed, kept.index(in_axis), -1).reshape(-1, summed.shape[kept.index(in_axis)])
    outputs, in_per_group = per_out.shape
    means = np.reshape(mean, (groups, in_per_group))  # group g's input channels
    group_of_output = np.arange(outputs) // (outputs // groups)
    return np.einsum("oi,oi->o", per_out, means[group_of_output])


def _pair(value: object, n: int) -> tuple | None:
    if isinstance(value, int):
        return (value,) * n
    if isinstance(value, (tuple, list)) and len(value) == n and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


def tap_coverage(node: Node) -> np.ndarray | None:
    """Per kernel position, the fraction of the output positions at which it reads the
    input rather than the layer's own zero padding, shaped to broadcast against the
    kernel; None when the layer pads nothing, pads with other values than zeros, or its
    geometry is not known (every position is then taken to read the mean).

    Along a spatial axis of input size ``I``, output size ``O``, kernel ``K``, stride
    ``S``, dilation ``D`` and ``P`` zeros padded before, tap ``k`` reads the input at
    ``o S - P + k D`` for output ``o``: inside for a fraction of the ``O`` outputs.
    """
    layout = conv_layout(node)
    if layout is None:
        return None
    nd = node.weights["kernel"].ndim
    coverage = np.ones([1] * nd)
    for a, i, o, k, st, dl, pb in zip(
        layout.spatial, layout.sizes_in, layout.sizes_out, layout.kernel, layout.stride, layout.dilation,
        layout.before,
    ):  # fmt: skip
        at = np.arange(o)[None, :] * st - pb + np.arange(k)[:, None] * dl
        frac = ((at >= 0) & (at < i)).mean(axis=1)
        shape = [1] * nd
        shape[a] = k
        coverage = coverage * frac.reshape(shape)
    return None if np.all(coverage == 1.0) else coverage


@dataclass(frozen=True)
class ConvLayout:
    """A zero-padded convolution's geometry, per spatial dimension (in the order of the
    input's dimensions after the batch, the channel axis left out).

    Attributes:
        spatial: the kernel's spatial axes.
        channel: the input's channel axis.
        sizes_in / sizes_out: the input's and output's sizes.
        kernel: the kernel's sizes.
        stride / dilation / before: as `conv_geometry` gives them (``before``: zeros padded
            before the input).
    """

    spatial: tuple[int, ...]
    channel: int
    sizes_in: tuple[int, ...]
    sizes_out: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    before: tuple[int, ...]


def conv_layout(node: Node) -> ConvLayout | None:
    """``node``'s `ConvLayout`, or None when it is not a convolution padded with zeros (not
    transposed), or its shapes or geometry are not known."""
    if node.kind != OpKind.CONV or node.attrs.get("transposed") or "Transpose" in str(node.layer_type):
        return None
    if node.attrs.get("padding_mode", "zeros") != "zeros":  # reflect, replicate, circular: data values
        return None
    kernel = node.weights["kernel"]
    nd = kernel.ndim
    out_axes = tuple(a % nd for a in node.kernel_axes["kernel"])
    in_axis = node.kernel_in_axis["kernel"] % nd
    spatial = tuple(a for a in range(nd) if a not in out_axes and a != in_axis)
    if not spatial or not node.input_shapes or not node.output_shapes or node.channel_axis is None:
        return None
    in_shape, out_shape = node.input_shapes[0], node.output_shapes[0]
    if len(in_shape) != len(spatial) + 2 or len(out_shape) != len(in_shape):
        return None
    channel = node.channel_axis % len(in_shape)
    dims = [d for d in range(1, len(in_shape)) if d != channel]
    sizes_in, sizes_out = tuple(in_shape[d] for d in dims), tuple(out_shape[d] for d in dims)
    if not all(isinstance(v, int) and v > 0 for v in sizes_in + sizes_out):
        return None
    ks = tuple(int(kernel.shape[a]) for a in spatial)
    geometry = conv_geometry(node, ks, list(sizes_in), list(sizes_out))
    if geometry is None:
        return None
    return ConvLayout(spatial, channel, sizes_in, sizes_out, ks, *geometry)


def conv_geometry(
    node: Node, kernel: tuple[int, ...], sizes_in: list, sizes_out: list
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
    """A convolution's stride, dilation and zeros padded before, per spatial dimension (its
    input and output sizes ``sizes_in``/``sizes_out`` there, its ``kernel`` size), or None
    when its attributes say something not modelled ("causal" padding, a padding per side)."""
    n = len(kernel)
    strides = _pair(node.attrs.get("stride", node.attrs.get("strides", 1)), n)
    dilation = _pair(node.attrs.get("dilation", node.attrs.get("dilation_rate", 1)), n)
    padding = node.attrs.get("padding", 0)
    if strides is None or dilation is None:
        return None
    if isinstance(padding, str):
        if padding.lower() == "valid":
            return strides, dilation, (0,) * n
        if padding.lower() != "same":
            return None
        before = tuple(
            max((o - 1) * st + (k - 1) * dl + 1 - i, 0) // 2
            for i, o, k, st, dl in zip(sizes_in, sizes_out, kernel, strides, dilation)
        )
        return strides, dilation, before
    pairs = _pair(padding, n)
    return None if pairs is None else (strides, dilation, pairs)


def _groups(node: Node) -> int:
    groups = node.attrs.get("groups", 1)
    return groups if isinstance(groups, int) and groups > 0 else 1


def _out_channels(node: Node) -> int:
    kernel = node.weights["kernel"]
    return int(np.prod([kernel.shape[a] for a in node.kernel_axes["kernel"]]))


def _in_channels(node: Node) -> int:
    kernel, in_axis = node.weights["kernel"], node.kernel_in_axis["kernel"]
    if in_axis % kernel.ndim in tuple(a % kernel.ndim for a in node.kernel_axes["kernel"]):
        return int(kernel.shape[in_axis])
    return int(kernel.shape[in_axis]) * _groups(node)


def _input_mean(graph: Graph, node: Node, stats: Mapping[str, NodeStatistics]) -> np.ndarray | None:
    """The mean per input channel of ``node``'s data input, if statistics give it (see
    `input_channel_stat`)."""
    return input_channel_stat(graph, node, stats, "mean_per_channel", "mean_per_feature")


def input_channel_stat(
    graph: Graph, node: Node, stats: Mapping[str, NodeStatistics], per_channel: str, per_feature: str
) -> np.ndarray | None:
    """A statistic per input channel of ``node``'s data input (the ``per_channel`` field
    of the feeding node's statistics, or its ``per_feature`` one), if statistics give it.

    The statistics of the node feeding it, along that node's channel axis (of each feature,
    for a (batch, features) input), serve when that axis is the one the layer reads
    channels on, or, past a flatten or reshape, when each sample holds exactly one value
    per channel (``pool(1x1) -> flatten -> dense``).
    """
    edge = _only_data_input(graph, node.name)
    if edge is None or not node.output_shapes or node.channel_axis is None:
        return None
    src, crossed = graph.node(edge.src), False
    while src.name not in stats and src.kind in _PASS_THROUGH:
        edge = _only_data_input(graph, src.name)
        if edge is None:
            return None
        src, crossed = graph.node(edge.src), True
    s = stats.get(src.name)
    if s is None or not src.output_shapes or src.channel_axis is None:
        return None
    if getattr(s, per_channel) is None:
        return None
    mean = np.asarray(getattr(s, per_channel), np.float64).reshape(-1)
    if mean.size != _in_channels(node) and getattr(s, per_feature) is not None:
        mean = np.asarray(getattr(s, per_feature), np.float64).reshape(-1)
    if mean.size != _in_channels(node) or not np.isfinite(mean).all():
        return None
    src_shape, out_shape = src.output_shapes[0], node.output_shapes[0]
    if crossed:  # each sample must hold one value per channel
        return mean if None not in src_shape[1:] and int(np.prod(src_shape[1:])) == mean.size else None
    src_axis, axis = src.channel_axis % len(src_shape), node.channel_axis % len(out_shape)
    return mean if len(src_shape) == len(out_shape) and src_axis == axis else None


def _only_data_input(graph: Graph, name: str) -> Edge | None:
    """The edge feeding input 0 of ``name`` from its producer's first output, or None (the
    statistics describe a node's first output only)."""
    edges = [e for e in graph.in_edges(name) if e.dst_index == 0]
    return edges[0] if len(edges) == 1 and edges[0].src_index == 0 else None
