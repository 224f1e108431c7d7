"""The xquant report: the similarity analysis of a quantized model on the representative
and the validation data, in MCT's result layout.

    float model, quantized model (made by this library in this process)
      -> for repr, val: compare (TensorBoard runs + similarity_report.* in report_dir)
                        [+ custom metrics per compare point and batch]
      -> result dict -> report_dir/quant_report.json  [+ troubleshooting findings]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from model_compression_toolkit.core.config import CoreConfig, DebugConfig
from model_compression_toolkit.core.resolution import resolve_config
from model_compression_toolkit.core.similarity.custom import OUTPUT, custom_metrics
from model_compression_toolkit.core.similarity.report import SimilarityReport
from model_compression_toolkit.errors import ConfigurationError, ModelReadError
from model_compression_toolkit.observers.call import observe_call
from model_compression_toolkit.observers.xquant_files import write_xquant_report
from model_compression_toolkit.pipeline.backends import get_backend
from model_compression_toolkit.pipeline.session import Session, produced_graph
from model_compression_toolkit.pipeline.stages import compare_in_stage
from model_compression_toolkit.xquant.config import XQuantConfig
from model_compression_toolkit.xquant.troubleshoot import degraded_layers, judge

LOG = logging.getLogger("model_compression_toolkit")
DATASETS = ("repr", "val")


def _inputs_only(validation_dataset: Callable[[], Any]) -> Callable[[], Iterator[Any]]:
    """MCT's validation items are ``[inputs, labels]``: the inputs, as a list."""

    def gen() -> Iterator[Any]:
        for item in validation_dataset():
            inputs = item[0] if isinstance(item, (list, tuple)) and item else item
            yield list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]

    return gen


def _count(data: Callable[[], Any]) -> int:
    return sum(len(batch[0]) for batch in data())


def _converter(framework: str) -> Callable[[np.ndarray], Any]:
    """How custom metrics get tensors: torch tensors for PyTorch, numpy arrays for Keras (as in MCT)."""
    if framework != "pytorch":
        return lambda a: a
    import torch  # only for a PyTorch model, whose backend has imported it already

    return lambda a: torch.from_numpy(np.ascontiguousarray(a))


def _metrics(report: SimilarityReport) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    layers = {layer.name: {"mse": layer.mse, "cs": layer.cosine_mean, "sqnr": layer.sqnr_db} for layer in report.layers}
    outputs = [layer for layer in report.layers if layer.is_output] or report.layers[-1:]
    output = {k: float(np.mean([layers[o.name][k] for o in outputs])) for k in ("mse", "cs", "sqnr")}
    return output, layers


def xquant_report(
    float_model: Any,
    quantized_model: Any,
    repr_dataset: Callable[[], Any],
    validation_dataset: Callable[[], Any],
    xquant_config: XQuantConfig,
    framework: str,
    troubleshoot: bool = False,
) -> dict[str, Any]:
    """The body of every public xquant function (see `xquant_report_pytorch_experimental`)."""
    if not isinstance(xquant_config, XQuantConfig):
        raise ConfigurationError(f"xquant_config must be a mct.xquant.XQuantConfig; got {type(xquant_config).__name__}")
    xquant_config.validate()
    q_graph = produced_graph(quantized_model)
    if q_graph is None:
        raise ModelReadError(
            "quantized_model must be a model returned by a PTQ call of this library in this process; "
            f"got a {type(quantized_model).__name__} it did not produce"
        )
    backend = get_backend(float_model, expected=framework)
    root = Path(xquant_config.report_dir)
    root.mkdir(parents=True, exist_ok=True)
    if xquant_config.quantize_reported_dir is not None:
        LOG.info("xquant: quantize_reported_dir is not read; statistics are recomputed from the models")
    result: dict[str, Any] = {}
    session = None
    for which, data in zip(DATASETS, (repr_dataset, _inputs_only(validation_dataset))):
        debug = DebugConfig(analyze_similarity=True, similarity_samples=max(_count(data), 1))
        config = resolve_config(CoreConfig(debug_config=debug), logging_on=True)
        session = Session(float_model, data, config, backend)
        with observe_call(f"{session.model_name}_xquant_{which}", root) as call:
            similarity = compare_in_stage(session, q_graph, call.observer)
        output, layers = _metrics(similarity.report)
        if xquant_config.custom_similarity_metrics:
            custom = custom_metrics(
                backend, session.initial, q_graph, session.data.batches(),
                dict(xquant_config.custom_similarity_metrics), _converter(framework),
            )  # fmt: skip
            output.update(custom.pop(OUTPUT, {}))
            for name, values in custom.items():
                layers.setdefault(name, {}).update(values)
        result[f"output_similarity_metrics_{which}"] = output
        result[f"intermediate_similarity_metrics_{which}"] = layers
    if troubleshoot and session is not None:
        degraded = degraded_layers(result["intermediate_similarity_metrics_repr"], xquant_config)
        for layer, names in degraded_layers(result["intermediate_similarity_metrics_val"], xquant_config).items():
            degraded.setdefault(layer, []).extend(n for n in names if n not in degraded[layer])
        stats = session.statistics(q_graph)
        total = len(result["intermediate_similarity_metrics_repr"])
        result["troubleshoot"] = {"degraded_layers": degraded, "findings": judge(q_graph, stats, degraded, total, xquant_config)}
    try:
        write_xquant_report(root, result)
    except OSError as err:
        LOG.warning("could not write the xquant report into %s: %s", root, err)
    return result


def xquant_report_pytorch_experimental(
    float_model: Any,
    quantized_model: Any,
    repr_dataset: Callable[[], Any],
    validation_dataset: Callable[[], Any],
    xquant_config: XQuantConfig,
) -> dict[str, Any]:
    """Compare a PyTorch model with its quantized version, layer by layer, on the
    representative and the validation data (MCT's xquant, on this library's analysis).

    Writes into ``xquant_config.report_dir`` one call folder per dataset
    (``<Model>_xquant_repr_<time>``, ``..._val_<time>``: the quantized graph coloured by
    error, the similarity runs, ``similarity_report.json``/``.csv``; ``tensorboard
    --logdir`` on the report_dir shows them) and ``quant_report.json``.

    Args:
        float_model: the float model.
        quantized_model: the model a PTQ call of this library returned for it, in this process.
        repr_dataset: as PTQ's ``representative_data_gen``; every sample is compared.
        validation_dataset: a callable yielding ``[inputs, labels]`` (``inputs`` an array
            or a list of arrays); the labels are not used.
        xquant_config: the report folder and custom metrics.

    Returns:
        MCT's result dict: mean squared error, cosine similarity (1: identical) and SQNR
        in dB (finite; MCT's is a linear ratio), plus each custom metric's mean over
        batches, at the model output and at every layer::

            {"output_similarity_metrics_repr": {"mse": ..., "cs": ..., "sqnr": ..., "mae": ...},
             "output_similarity_metrics_val": {...},
             "intermediate_similarity_metrics_repr": {layer: {...}},
             "intermediate_similarity_metrics_val": {layer: {...}}}
    """
    return xquant_report(float_model, quantized_model, repr_dataset, validation_dataset, xquant_config, "pytorch")


def xquant_report_keras_experimental(
    float_model: Any,
    quantized_model: Any,
    repr_dataset: Callable[[], Any],
    validation_dataset: Callable[[], Any],
    xquant_config: XQuantConfig,
) -> dict[str, Any]:
    """The Keras version of `xquant_report_pytorch_experimental` (custom metrics get numpy arrays)."""
    return xquant_report(float_model, quantized_model, repr_dataset, validation_dataset, xquant_config, "keras")


def xquant_report_troubleshoot_pytorch_experimental(
    float_model: Any,
    quantized_model: Any,
    repr_dataset: Callable[[], Any],
    validation_dataset: Callable[[], Any],
    xquant_config: XQuantConfig,
) -> dict[str, Any]:
    """`xquant_report_pytorch_experimental`, then the troubleshooting: the layers past
    ``xquant_config``'s thresholds, and for them the known causes (outliers, negative
    tails, unbalanced concatenations, a last layer at very few bits) with what to set in
    this library. The findings are logged as warnings and returned in
    ``result["troubleshoot"]`` (``degraded_layers``, ``findings``)."""
    return xquant_report(float_model, quantized_model, repr_dataset, validation_dataset, xquant_config, "pytorch", True)


def xquant_report_troubleshoot_keras_experimental(
    float_model: Any,
    quantized_model: Any,
    repr_dataset: Callable[[], Any],
    validation_dataset: Callable[[], Any],
    xquant_config: XQuantConfig,
) -> dict[str, Any]:
    """The Keras version of `xquant_report_troubleshoot_pytorch_experimental`."""
    return xquant_report(float_model, quantized_model, repr_dataset, validation_dataset, xquant_config, "keras", True)
