"""A PTQ call stage by stage, each stage reported to the observer when it completes.

``initial_graph -> after_graph_preparation -> after_statistics_collection
-> thresholds_selection -> [mixed precision] -> quantized_graph [+ similarity]``
"""

from __future__ import annotations

import logging

from model_compression_toolkit.core.calibration.quantizers import QuantizedWeights
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.info import QuantizationInfo
from model_compression_toolkit.core.memory import graph_memory
from model_compression_toolkit.core.mixed_precision.search import search_bit_widths
from model_compression_toolkit.core.similarity.analysis import SimilarityResult, analyze
from model_compression_toolkit.pipeline.events import Observer, StageReport
from model_compression_toolkit.pipeline.session import Quantization, Session

LOG = logging.getLogger("model_compression_toolkit")


def _report(observer: Observer, name: str, graph: Graph, quantized: bool = False, **kwargs) -> None:
    observer.stage_finished(StageReport(name=name, graph=graph, memory=graph_memory(graph, quantized), **kwargs))
    LOG.info("stage %s done", name)


def _reference_samples(session: Session) -> int:
    """Samples of float outputs the statistics pass keeps for what the call compares later."""
    config = session.config
    n = session.reference_samples
    if config.debug_config.analyze_similarity:
        n = max(n, config.debug_config.similarity_samples)
    if session.target is not None:
        n = max(n, config.mixed_precision_config.samples)
    return n


def quantize_in_stages(session: Session, observer: Observer) -> tuple[Quantization, QuantizationInfo]:
    """Every stage of PTQ, each reported to ``observer`` when it completes.

    Returns:
        The quantization (its similarity when ``analyze_similarity`` is on) and its info.
    """
    config = session.config
    session.report_to(observer)
    _report(observer, "initial_graph", session.initial)
    graph = session.prepare()
    _report(observer, "after_graph_preparation", graph)
    stats = session.statistics(graph, _reference_samples(session))
    _report(observer, "after_statistics_collection", graph, statistics=stats)
    session.select_thresholds(graph)
    _report(observer, "thresholds_selection", graph, statistics=stats)
    mixed = None
    if session.target is not None:
        mixed = search_bit_widths(
            session.float_model, graph, session.target, config.mixed_precision_config,
            config.quantization_config.l_p_value, config.debug_config.similarity_memory_cap,
        )  # fmt: skip
    quantized_weights = QuantizedWeights(graph)
    q_model = session.build(graph, quantized_weights)
    similarity = None
    if config.debug_config.analyze_similarity:
        similarity = session.analyze(graph, quantized_weights, q_model)
        LOG.info(similarity.report.summary())
    _report(
        observer, "quantized_graph", graph, quantized=True,
        quantized_weights=quantized_weights, similarity=similarity, mixed_precision=mixed,
    )  # fmt: skip
    info = session.info(graph)
    info.similarity = similarity.report if similarity is not None else None
    info.mixed_precision = mixed
    return Quantization(graph, q_model, similarity), info


def compare_in_stage(session: Session, q_graph: Graph, observer: Observer) -> SimilarityResult:
    """Compare a quantized graph this library produced with the session's float model, and
    report it as the ``quantized_graph`` stage with its similarity."""
    debug = session.config.debug_config
    session.report_to(observer)
    session.follow(q_graph)  # a graph quantized from the equalized model: compared with it
    result = analyze(
        session.float_model, q_graph, debug.similarity_samples, debug.similarity_memory_cap,
        impact_samples=debug.impact_samples, max_impact_quantizers=debug.max_impact_quantizers,
        l_p_value=session.config.quantization_config.l_p_value, progress=session.progress,
    )  # fmt: skip
    _report(observer, "quantized_graph", q_graph, quantized=True, similarity=result)
    LOG.info(result.report.summary())
    return result
