"""Post-training quantization, one function per framework: the public facades.

Each resolves its configuration once, builds the call's observer and runs the pipeline
(`ptq.calls`); only this package wires the layers together.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from model_compression_toolkit.core.config import CoreConfig, ResourceUtilization, TuningConfig
from model_compression_toolkit.core.info import QuantizationInfo
from model_compression_toolkit.core.tpc import TargetPlatformCapabilities
from model_compression_toolkit.ptq.calls import post_training_quantization, tuned_post_training_quantization


def pytorch_post_training_quantization(
    in_module: Any,
    representative_data_gen: Callable[[], Any],
    target_resource_utilization: ResourceUtilization | None = None,
    core_config: CoreConfig | None = None,
    target_platform_capabilities: TargetPlatformCapabilities | None = None,
    *,
    run_name: str | None = None,
) -> tuple[Any, QuantizationInfo]:
    """Quantize a trained ``torch.nn.Module`` after training (MCT's signature).

    Args:
        in_module: the float model; it is not modified.
        representative_data_gen: a callable returning an iterable of batches, each a
            list with one array or tensor per model input, batch dimension first.
        target_resource_utilization: a `mct.core.ResourceUtilization` budget; mixed
            precision then chooses each layer's weight bit-width. A `CoreConfig` given
            here (this library's earlier third argument) is read as ``core_config``.
        core_config: quantization and debug settings; defaults when None.
        target_platform_capabilities: the platform to quantize for
            (`mct.get_target_platform_capabilities`); None: this library's defaults
            (8-bit symmetric per-channel weights, 8-bit symmetric activations).
        run_name: (keyword only) a name for this call in TensorBoard's run names (its call folder is
            ``<model>_<run_name>_<time>``); by default, what differs from the default
            configuration (``w4``, ``float-5-out`` for a `KeepFloat` rule, ...).

    Returns:
        The fake-quantized model (a ``torch.fx.GraphModule`` in eval mode, same inputs
        and outputs as ``in_module``) and a `QuantizationInfo`.
    """
    return post_training_quantization(
        in_module, representative_data_gen, core_config, "pytorch", target_resource_utilization,
        target_platform_capabilities, run_name,
    )  # fmt: skip


def keras_post_training_quantization(
    in_model: Any,
    representative_data_gen: Callable[[], Any],
    target_resource_utilization: ResourceUtilization | None = None,
    core_config: CoreConfig | None = None,
    target_platform_capabilities: TargetPlatformCapabilities | None = None,
    *,
    run_name: str | None = None,
) -> tuple[Any, QuantizationInfo]:
    """Quantize a trained Keras 3 model (Functional or Sequential) after training (MCT's signature).

    Args:
        in_model: the float ``keras.Model``; it is not modified.
        representative_data_gen: as for `pytorch_post_training_quantization`, with
            channels-last batches.
        target_resource_utilization: as for `pytorch_post_training_quantization`.
        core_config: quantization and debug settings; defaults when None.
        target_platform_capabilities: as for `pytorch_post_training_quantization`.
        run_name: as for `pytorch_post_training_quantization`.

    Returns:
        The fake-quantized ``keras.Model`` (it saves to ``.keras`` and loads back with
        ``keras.models.load_model``) and a `QuantizationInfo`.
    """
    return post_training_quantization(
        in_model, representative_data_gen, core_config, "keras", target_resource_utilization,
        target_platform_capabilities, run_name,
    )  # fmt: skip


def pytorch_tuned_post_training_quantization(
    in_module: Any,
    representative_data_gen: Callable[[], Any],
    evaluate: Callable[[Any], float],
    tuning_config: TuningConfig | None = None,
    core_config: CoreConfig | None = None,
    target_platform_capabilities: TargetPlatformCapabilities | None = None,
    *,
    run_name: str | None = None,
) -> tuple[Any, QuantizationInfo]:
    """PTQ that keeps the worst layers float until ``evaluate`` drops little enough.

    Args:
        in_module: the float model; it is not modified.
        representative_data_gen: as for `pytorch_post_training_quantization`.
        evaluate: model -> score, higher is better (e.g. accuracy on a validation set);
            called on the float model once and on each trial's quantized model.
        tuning_config: the allowed drop and the trial budget.
        core_config: as for `pytorch_post_training_quantization`.
        target_platform_capabilities: as for `pytorch_post_training_quantization`.
        run_name: as for `pytorch_post_training_quantization` (by default ending in ``tuned``).

    Returns:
        The best quantized model found and a `QuantizationInfo` whose ``tuning`` holds
        every trial. Each evaluation is a TensorBoard run in the call's log folder.
    """
    return tuned_post_training_quantization(
        in_module, representative_data_gen, evaluate, tuning_config, core_config, "pytorch",
        target_platform_capabilities, run_name,
    )  # fmt: skip


def keras_tuned_post_training_quantization(
    in_model: Any,
    representative_data_gen: Callable[[], Any],
    evaluate: Callable[[Any], float],
    tuning_config: TuningConfig | None = None,
    core_config: CoreConfig | None = None,
    target_platform_capabilities: TargetPlatformCapabilities | None = None,
    *,
    run_name: str | None = None,
) -> tuple[Any, QuantizationInfo]:
    """The Keras version of `pytorch_tuned_post_training_quantization`.

    Args:
        in_model: the float ``keras.Model``; it is not modified.
        representative_data_gen: as for `keras_post_training_quantization`.
        evaluate: model -> score, higher is better.
        tuning_config: the allowed drop and the trial budget.
        core_config: as for `keras_post_training_quantization`.
        target_platform_capabilities: as for `keras_post_training_quantization`.
        run_name: as for `pytorch_post_training_quantization`.

    Returns:
        The best quantized model found and a `QuantizationInfo` with ``tuning``.
    """
    return tuned_post_training_quantization(
        in_model, representative_data_gen, evaluate, tuning_config, core_config, "keras", target_platform_capabilities,
        run_name,
    )


__all__ = [
    "keras_post_training_quantization",
    "keras_tuned_post_training_quantization",
    "pytorch_post_training_quantization",
    "pytorch_tuned_post_training_quantization",
]
