"""MCT's resource utilization facades: what a model takes, quantized at the highest
bit-widths its configuration allows (mixed precision's starting point).

    model -> read (first batch only) -> prepared graph at the highest candidate bits
          -> weights memory, activation memory (peak), total, bops

Nothing is logged and no statistics are collected.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from model_compression_toolkit.core.config import CoreConfig, ResourceUtilization
from model_compression_toolkit.core.resolution import resolve_config
from model_compression_toolkit.core.resources import resource_utilization
from model_compression_toolkit.core.tpc import TargetPlatformCapabilities
from model_compression_toolkit.pipeline.backends import get_backend
from model_compression_toolkit.pipeline.session import Session


def resource_utilization_data(
    model: Any, representative_data_gen: Callable[[], Any], core_config: CoreConfig | None,
    target_platform_capabilities: TargetPlatformCapabilities | None, framework: str,
) -> ResourceUtilization:  # fmt: skip
    """The body of both public functions."""
    config = resolve_config(core_config, False, target_platform_capabilities)
    session = Session(model, representative_data_gen, config, get_backend(model, expected=framework))
    graph = session.prepare()
    top = max(config.mixed_precision_config.candidate_bits)
    for node in graph.nodes():
        for cfg in node.quant.weights.values():
            if not cfg.manual:
                cfg.n_bits = top
    return resource_utilization(graph, quantized=True)


def pytorch_resource_utilization_data(
    in_model: Any,
    representative_data_gen: Callable[[], Any],
    core_config: CoreConfig | None = None,
    target_platform_capabilities: TargetPlatformCapabilities | None = None,
) -> ResourceUtilization:
    """What a PyTorch model takes when quantized at the highest candidate bit-widths (MCT's
    ``mct.core.pytorch_resource_utilization_data``); scale it to make a budget::

        ru = mct.core.pytorch_resource_utilization_data(model, data_gen, core_config, tpc)
        target = mct.core.ResourceUtilization(weights_memory=ru.weights_memory * 0.75)

    Args:
        in_model: the float model.
        representative_data_gen: as for PTQ; only its first batch is read (for shapes).
        core_config: as for PTQ (its bit-widths, manual bit-widths and platform count).
        target_platform_capabilities: as for PTQ.

    Returns:
        A `ResourceUtilization`: ``weights_memory`` and ``activation_memory`` (the peak
        of the activations alive at once, one sample) in bytes, their sum
        ``total_memory``, and ``bops``.
    """
    return resource_utilization_data(in_model, representative_data_gen, core_config, target_platform_capabilities, "pytorch")


def keras_resource_utilization_data(
    in_model: Any,
    representative_data_gen: Callable[[], Any],
    core_config: CoreConfig | None = None,
    target_platform_capabilities: TargetPlatformCapabilities | None = None,
) -> ResourceUtilization:
    """The Keras version of `pytorch_resource_utilization_data`."""
    return resource_utilization_data(in_model, representative_data_gen, core_config, target_platform_capabilities, "keras")
