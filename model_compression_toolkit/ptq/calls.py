"""The wiring of every public call: check and resolve the configuration once, choose the
backend, open the call's logging, run the pipeline.

    config -> resolve_config -> Session (reads, checks: fails before anything is written)
           -> observe_call (folder, mct.log, observer) -> pipeline -> (q_model, info)
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import logging
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from model_compression_toolkit.core.config import CoreConfig, DebugConfig, ResourceUtilization, TuningConfig
from model_compression_toolkit.core.info import QuantizationInfo
from model_compression_toolkit.core.numbers import format_bytes
from model_compression_toolkit.core.resolution import keep_float_notes, resolve_config
from model_compression_toolkit.core.similarity.analysis import SimilarityResult
from model_compression_toolkit.core.similarity.fix_menu import FixMetric
from model_compression_toolkit.errors import ConfigurationError, ModelReadError
from model_compression_toolkit.observers.call import CallLog, observe_call
from model_compression_toolkit.observers.call_name import call_label
from model_compression_toolkit.observers.log_folder import get_log_folder
from model_compression_toolkit.pipeline.backends import get_backend
from model_compression_toolkit.pipeline.session import Session, produced_graph
from model_compression_toolkit.pipeline.stages import compare_in_stage, quantize_in_stages
from model_compression_toolkit.pipeline.tuning import Tuner, check_score

LOG = logging.getLogger("model_compression_toolkit")


def check_target(target: ResourceUtilization | None) -> ResourceUtilization | None:
    if target is not None:
        if not isinstance(target, ResourceUtilization):
            raise ConfigurationError(
                "target_resource_utilization must be a mct.core.ResourceUtilization (the third argument, as in "
                f"MCT; a mct.core.CoreConfig there is read as core_config); got {type(target).__name__}"
            )
        target.validate()
    return target


def mct_arguments(target: object, core_config: object) -> tuple[object, object]:
    """(target_resource_utilization, core_config) in MCT's order; a `CoreConfig` given third,
    where this library's first releases took it, is read as the core_config."""
    if core_config is None and isinstance(target, CoreConfig):
        return None, target
    if (
        core_config is None
        and not isinstance(target, ResourceUtilization)  # MCT's own third argument
        and type(target).__module__.startswith("model_compression_toolkit.core.config")
    ):
        raise ConfigurationError(  # a QuantizationConfig or DebugConfig where core_config once went
            f"core_config must be a mct.core.CoreConfig; got {type(target).__name__} (third). Wrap it: "
            f"mct.core.CoreConfig({_field_of(target)}=...)"
        )
    return target, core_config


def _field_of(config: object) -> str:
    """The CoreConfig field an object of ``config``'s type goes in."""
    for f in dataclasses.fields(CoreConfig):
        if type(config).__name__ in str(f.type).split(" | "):
            return f.name
    return "quantization_config"


def check_tuning_config(tuning_config: TuningConfig | None) -> TuningConfig:
    if tuning_config is None:
        return TuningConfig()
    if not isinstance(tuning_config, TuningConfig):
        raise ConfigurationError(f"tuning_config must be a mct.core.TuningConfig; got {type(tuning_config).__name__}")
    tuning_config.validate()
    return tuning_config


def note_keep_float(session: Session, config: CoreConfig) -> dict[str, str]:
    """Warn (into the call's ``mct.log`` too) of KeepFloat rules that keep every layer float or
    overlap a BitWidthConfig (`core.resolution.keep_float_notes`); the float reason of each
    overlapped layer, for ``info``."""
    if not config.keep_float_rules:
        return {}
    messages, reasons = keep_float_notes(session.prepare(keep_float=[]), session.prepare(), config)
    for message in messages:
        session.warn(message)
    return reasons


def _finish(
    info: QuantizationInfo, session: Session, call: CallLog, reasons: dict[str, str] | None = None
) -> QuantizationInfo:
    """The call's logging facts in ``info``, and the line that closes ``mct.log``."""
    for name, reason in (reasons or {}).items():
        layer = info.layers.get(name)
        if layer is not None and layer.weights_float_reason is not None and "KeepFloat" in layer.weights_float_reason:
            layer.weights_float_reason = reason
        if layer is not None and layer.activation_float_reason is not None and "KeepFloat" in layer.activation_float_reason:
            layer.activation_float_reason = reason
    info.log_folder = call.folder
    info.warnings += call.warnings
    LOG.info(
        "quantized %s: weights %s -> %s, %d layers quantized, %d kept in float%s",
        session.model_name,
        format_bytes(info.memory.weights_float_bytes),
        format_bytes(info.memory.weights_quantized_bytes),
        info.counts.quantized,
        info.counts.kept_float,
        f"; to see this call alone: tensorboard --logdir {shlex.quote(str(call.folder))}" if call.folder else "",
    )
    return info


@contextlib.contextmanager
def _older_objects_set_aside() -> Iterator[None]:
    """The cyclic garbage collector scans only the objects the call makes: those alive
    before it (the user's model, the libraries loaded) are set aside for the call
    (`gc.freeze`) and handed back after it, error or not. On PP-OCRv4 rec (626 layers) the
    one full collection a call triggered scanned 465,000 older objects: 0.23 s, 0.4 of a
    float pass over its 16 calibration lines. Garbage the call makes is collected as ever."""
    if not gc.isenabled() or gc.get_freeze_count():  # a caller who runs without it, or who
        yield  # froze objects of their own (a pre-fork server), keeps the collector as it is
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _with_older_objects_set_aside(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        with _older_objects_set_aside():
            return function(*args, **kwargs)

    return call


@_with_older_objects_set_aside
def post_training_quantization(
    model: Any,
    representative_data_gen: Callable[[], Any],
    core_config: CoreConfig | None,
    framework: str,
    target_resource_utilization: ResourceUtilization | None = None,
    target_platform_capabilities: object = None,
    run_name: str | None = None,
) -> tuple[Any, QuantizationInfo]:
    """Quantize ``model`` after training; the body of both public PTQ functions."""
    target_resource_utilization, core_config = mct_arguments(target_resource_utilization, core_config)
    root = get_log_folder()
    config = resolve_config(core_config, root is not None, target_platform_capabilities)
    target = check_target(target_resource_utilization)
    session = Session(model, representative_data_gen, config, get_backend(model, expected=framework), target)
    label = call_label(run_name, config, budget=target is not None)
    with session, observe_call(session.model_name, root, label) as call:
        reasons = note_keep_float(session, config)
        result, info = quantize_in_stages(session, call.observer)
        return result.model, _finish(info, session, call, reasons)


@_with_older_objects_set_aside
def tuned_post_training_quantization(
    model: Any,
    representative_data_gen: Callable[[], Any],
    evaluate: Callable[[Any], Any],
    tuning_config: TuningConfig | None,
    core_config: CoreConfig | None,
    framework: str,
    target_platform_capabilities: object = None,
    run_name: str | None = None,
) -> tuple[Any, QuantizationInfo]:
    """PTQ that keeps the worst layers float until ``evaluate`` drops little enough.

    The body of both public tuned PTQ functions. Bad configuration, a non-callable
    ``evaluate`` or a float score that is not a finite number fail before any file is written.

    Returns:
        The best trial's quantized model and its `QuantizationInfo`, whose ``tuning`` is a
        `TuningResult` and whose ``similarity`` is that trial's report.
    """
    tuning = check_tuning_config(tuning_config)
    if not callable(evaluate):
        raise ConfigurationError(
            f"evaluate must be a callable taking a model and returning a score (higher is better); "
            f"got {type(evaluate).__name__}"
        )
    root = get_log_folder()
    config = resolve_config(core_config, root is not None, target_platform_capabilities)
    session = Session(model, representative_data_gen, config, get_backend(model, expected=framework))
    with session:
        return _tune(session, model, evaluate, tuning, config, root, call_label(run_name, config, tuned=True))


def _tune(
    session: Session,
    model: Any,
    evaluate: Callable[[Any], Any],
    tuning: TuningConfig,
    config: CoreConfig,
    root: Path | None,
    label: str,
) -> tuple[Any, QuantizationInfo]:
    """The tuned call once its session is open: the float score, then the logged trials."""
    session.reference_samples = config.debug_config.similarity_samples  # every trial is compared
    baseline = check_score(evaluate(model), "the float model")
    if tuning.relative and baseline == 0:
        raise ConfigurationError(
            "a relative max_drop is a fraction of the float model's score, which is 0; "
            "use an absolute max_drop (relative=False)"
        )
    session.fix_metric = FixMetric(evaluate, baseline, tuning.max_drop, tuning.relative)
    with observe_call(session.model_name, root, label) as call:
        note_keep_float(session, config)
        first, _ = quantize_in_stages(session, call.observer)
        if first.similarity is None:  # the ranking needs it, logged or not
            first.similarity = session.analyze(first.graph, q_model=first.model)
        tuner = Tuner(
            lambda rules, bits: session.quantize(keep_float=rules, bits=bits, similarity=True), session.initial,
            config.keep_float_rules, evaluate, tuning, baseline, call.observer,
        )  # fmt: skip
        best, result = tuner.tune(first)
        message = result.shortfall()
        if message is not None:
            session.warn(message)
        info = session.info(best.graph)
        info.similarity = best.similarity.report
        info.tuning = result
        return best.model, _finish(info, session, call)


@_with_older_objects_set_aside
def analyze_similarity(
    float_model: Any,
    quantized_model: Any,
    representative_data_gen: Callable[[], Any],
    debug_config: DebugConfig | None = None,
) -> SimilarityResult:
    """Compare a float model with a quantized model this library produced from it.

    The same analysis a logged PTQ call runs (see `DebugConfig`), on its own: with a log
    folder set, it writes a call folder holding the ``similarity`` runs and the report files.

    Args:
        float_model: the original float model.
        quantized_model: the model a PTQ call of this process returned for it.
        representative_data_gen: as for PTQ; its first ``similarity_samples`` samples are used.
        debug_config: samples and memory cap; defaults when None.

    Returns:
        The `SimilarityResult`; ``.report`` is the ranked `SimilarityReport`.
    """
    q_graph = produced_graph(quantized_model)
    if q_graph is None:
        raise ModelReadError(
            "quantized_model must be a model returned by a PTQ call of this library in this process; "
            f"got a {type(quantized_model).__name__} it did not produce"
        )
    root = get_log_folder()
    config = resolve_config(CoreConfig(debug_config=debug_config or DebugConfig()), logging_on=root is not None)
    session = Session(float_model, representative_data_gen, config, get_backend(float_model, expected=q_graph.framework))
    with session, observe_call(session.model_name, root) as call:
        return compare_in_stage(session, q_graph, call.observer)
