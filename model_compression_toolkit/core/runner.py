"""The PTQ pipeline: read, prepare, collect statistics, select thresholds, build.

``model -> initial_graph -> after_graph_preparation -> after_statistics_collection
-> thresholds_selection -> quantized_graph -> quantized model``

After each stage the runner hands a `StageReport` to the run's sink; it never checks
whether logging is on.
"""

from __future__ import annotations

import logging
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from model_compression_toolkit.core.analysis import analyze
from model_compression_toolkit.core.backend import Backend, get_backend
from model_compression_toolkit.core.config import CoreConfig
from model_compression_toolkit.core.data import RepresentativeData
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.info import QuantizationInfo
from model_compression_toolkit.core.memory import graph_memory
from model_compression_toolkit.core.preparation import prepare_graph
from model_compression_toolkit.core.quantizers import fake_quant
from model_compression_toolkit.core.selection import check_rules
from model_compression_toolkit.core.stage import StageReport, StageSink
from model_compression_toolkit.core.statistics import NodeStatistics, StatisticsCollector
from model_compression_toolkit.core.thresholds import fill_activation_config, fill_weights_config
from model_compression_toolkit.errors import ConfigurationError
from model_compression_toolkit.logger import ptq_run

LOG = logging.getLogger("model_compression_toolkit")
_PRODUCED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # quantized model -> its graph


def remember(q_model: Any, graph: Graph) -> None:
    """Keep the graph a quantized model was built from, for a later standalone analysis."""
    try:
        _PRODUCED[q_model] = graph
    except TypeError:  # a model type that cannot be weakly referenced: nothing to remember
        pass


def produced_graph(q_model: Any) -> Graph | None:
    try:
        return _PRODUCED.get(q_model)
    except TypeError:
        return None


def check_core_config(core_config: CoreConfig | None) -> CoreConfig:
    if core_config is None:
        return CoreConfig()
    if not isinstance(core_config, CoreConfig):
        raise ConfigurationError(
            f"core_config must be a mct.core.CoreConfig; got {type(core_config).__name__}"
        )
    core_config.validate()
    return core_config


def collect_statistics(backend: Backend, graph: Graph, data: RepresentativeData, n_bins: int) -> dict[str, NodeStatistics]:
    """One pass over the data through the float model, reducing each quantized activation to statistics."""
    names = [n.name for n in graph.nodes() if n.quant.activation is not None]
    collectors = {n: StatisticsCollector(n_bins, graph.node(n).channel_axis) for n in names}
    model = backend.build(graph, quantized=False, extra_outputs=names)
    n_outputs = len(graph.outputs)
    for batch in tqdm(data.batches(), desc="Collecting statistics", unit="batch", leave=False):
        outputs = backend.run(model, batch)
        for name, value in zip(names, outputs[n_outputs:]):
            collectors[name].update(value)
    return {n: c.result() for n, c in collectors.items()}


def select_thresholds(graph: Graph, stats: dict[str, NodeStatistics], l_p_value: float) -> None:
    for node in graph.nodes():
        for wname, cfg in node.quant.weights.items():
            fill_weights_config(cfg, node.weights[wname], l_p_value)
        if node.quant.activation is not None:
            fill_activation_config(node.quant.activation, stats[node.name], l_p_value)


def quantized_weights(graph: Graph) -> dict[str, dict[str, np.ndarray]]:
    return {
        node.name: {w: fake_quant(node.weights[w], cfg.grid, cfg.channel_axes) for w, cfg in node.quant.weights.items()}
        for node in graph.nodes()
        if node.quant.weights
    }


def _report(sink: StageSink, name: str, graph: Graph, quantized: bool = False, **kwargs: Any) -> None:
    sink.stage(StageReport(name=name, graph=graph, memory=graph_memory(graph, quantized), **kwargs))
    LOG.info("stage %s done", name)


def post_training_quantization(
    model: Any,
    representative_data_gen: Callable[[], Any],
    core_config: CoreConfig | None,
    framework: str,
) -> tuple[Any, QuantizationInfo]:
    """Quantize ``model`` after training; the body of both public PTQ functions."""
    config = check_core_config(core_config)
    backend = get_backend(model, expected=framework)
    data = RepresentativeData(representative_data_gen, backend, model)
    model_name = backend.model_name(model)
    graph, read_warnings = backend.read(model, data.first)  # bad input fails here, before any file exists
    check_rules(graph, config.keep_float_rules)
    with ptq_run(model_name) as run:
        return _pipeline(backend, graph, read_warnings, data, config, run, model_name)


def _warn(shown: list[str], message: str, category: type[Warning] = UserWarning) -> None:
    """Warn the user, log it, and keep it for ``info.warnings``."""
    warnings.warn(message, category, stacklevel=4)
    LOG.warning(message)
    shown.append(message)


def _pipeline(backend, graph: Graph, read_warnings: list[str], data, config: CoreConfig, run, model_name: str):
    qc = config.quantization_config
    shown: list[str] = []
    for message in read_warnings:
        _warn(shown, message)
    _report(run.sink, "initial_graph", graph)
    initial = graph.copy()  # the user's model as read: the float side of the similarity analysis
    prepare_graph(graph, qc, config.keep_float_rules)
    _report(run.sink, "after_graph_preparation", graph)
    stats = collect_statistics(backend, graph, data, qc.histogram_bins)
    for name, s in stats.items():
        if s.nonfinite:
            _warn(
                shown,
                f"{s.nonfinite} non-finite values (NaN or inf) in the output of {name!r} were skipped "
                "when collecting statistics",
                RuntimeWarning,
            )
    _report(run.sink, "after_statistics_collection", graph, statistics=stats)
    select_thresholds(graph, stats, qc.l_p_value)
    _report(run.sink, "thresholds_selection", graph, statistics=stats)
    q_model = backend.build(graph, quantized=True)
    remember(q_model, graph)
    similarity = None
    debug = config.debug_config
    if debug.analyze_similarity and run.folder is not None:
        similarity = analyze(
            backend, initial, graph, data, debug.similarity_samples, debug.similarity_memory_cap, stats
        )
        similarity.report.write(run.folder)
        LOG.info(similarity.report.summary())
    _report(
        run.sink,
        "quantized_graph",
        graph,
        quantized=True,
        quantized_weights=quantized_weights(graph),
        similarity=similarity,
    )
    info = QuantizationInfo.of(graph, model_name, run.folder, shown)
    if similarity is not None:
        info.similarity = similarity.report
    LOG.info(
        "quantized %s: weights %.1f KiB -> %.1f KiB, %d layers kept in float%s",
        model_name,
        info.memory.weights_float_bytes / 1024,
        info.memory.weights_quantized_bytes / 1024,
        len(info.float_layers),
        f"; logs in {run.folder}" if run.folder else "",
    )
    return q_model, info
