"""The PTQ pipeline: read, prepare, collect statistics, select thresholds, build.

``model -> initial_graph -> after_graph_preparation -> after_statistics_collection
-> thresholds_selection -> quantized_graph -> quantized model``

A `Session` reads the model and checks the data once, collects statistics once, and can
then quantize as often as asked (the tuning loop keeps more layers float each time).
After each stage of `Session.run` a `StageReport` goes to the run's sink; the pipeline
never checks whether logging is on.
"""

from __future__ import annotations

import logging
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from model_compression_toolkit.core.backend import get_backend
from model_compression_toolkit.core.calibration.bias_correction import set_input_means
from model_compression_toolkit.core.calibration.quantizers import QuantizedWeights
from model_compression_toolkit.core.calibration.statistics import NodeStatistics, StatisticsCollector
from model_compression_toolkit.core.calibration.thresholds import fill_activation_config, fill_weights_config
from model_compression_toolkit.core.config import CoreConfig, DebugConfig, KeepFloat, ResourceUtilization
from model_compression_toolkit.core.data import RepresentativeData
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.info import QuantizationInfo
from model_compression_toolkit.core.memory import graph_memory
from model_compression_toolkit.core.preparation import assign_quantization, prepare_graph
from model_compression_toolkit.core.selection import check_rules
from model_compression_toolkit.core.similarity.analysis import Comparison, SimilarityResult, analyze
from model_compression_toolkit.core.similarity.plan import FloatReference, has_batch_axis
from model_compression_toolkit.errors import ConfigurationError, InputMismatchError, ModelReadError
from model_compression_toolkit.observers.log_folder import RunContext, ptq_run
from model_compression_toolkit.pipeline.events import StageReport, StageSink

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
        raise ConfigurationError(f"core_config must be a mct.core.CoreConfig; got {type(core_config).__name__}")
    core_config.validate()
    return core_config


def select_thresholds(graph: Graph, stats: dict[str, NodeStatistics], l_p_value: float) -> None:
    for node in graph.nodes():
        for wname, cfg in node.quant.weights.items():
            fill_weights_config(cfg, node.weights[wname], l_p_value)
        if node.quant.activation is not None:
            fill_activation_config(node.quant.activation, stats[node.name], l_p_value)


def _after(value: np.ndarray, kept: int, batch: int) -> np.ndarray:
    """The samples of a batch's output after the first ``kept`` (none if it has no batch axis)."""
    return value[kept:] if kept < batch and has_batch_axis(value, batch) else np.empty(0, np.float32)


def _report(sink: StageSink, name: str, graph: Graph, quantized: bool = False, **kwargs: Any) -> None:
    sink.stage(StageReport(name=name, graph=graph, memory=graph_memory(graph, quantized), **kwargs))
    LOG.info("stage %s done", name)


@dataclass
class Trial:
    """One quantization of the session's model."""

    graph: Graph
    q_model: Any
    similarity: SimilarityResult | None = None


class Session:
    """One model's PTQ: checks and reads once, collects statistics once, quantizes on demand.

    Bad input fails in the constructor, before any file is written.
    """

    def __init__(
        self,
        model: Any,
        representative_data_gen: Callable[[], Any],
        core_config: CoreConfig | None,
        framework: str,
        target_resource_utilization: ResourceUtilization | None = None,
    ):
        self.config = check_core_config(core_config)
        if target_resource_utilization is not None:
            if not isinstance(target_resource_utilization, ResourceUtilization):
                raise ConfigurationError(
                    "target_resource_utilization must be a mct.core.ResourceUtilization; "
                    f"got {type(target_resource_utilization).__name__}"
                )
            target_resource_utilization.validate()
        self.target = target_resource_utilization
        self.backend = get_backend(model, expected=framework)
        self.data = RepresentativeData(representative_data_gen, self.backend, model)
        self.model_name = self.backend.model_name(model)
        self.initial, read_warnings = self.backend.read(model, self.data.first)
        check_rules(self.initial, self.config.keep_float_rules)
        self.warnings: list[str] = []
        for message in read_warnings:
            self.warn(message)
        self._stats: dict[str, NodeStatistics] | None = None
        self._reference: FloatReference | None = None
        self._prepared: Graph | None = None
        # Samples whose float outputs the statistics pass keeps for later comparisons, on
        # top of what `run` needs itself (the tuning loop compares every trial).
        self.reference_samples = 0
        if self.target is not None:  # an impossible budget fails now, before any file is written
            from model_compression_toolkit.core.calibration.bias_correction import possible_new_biases
            from model_compression_toolkit.core.mixed_precision.search import check_budget

            graph = self.prepare()
            biases = possible_new_biases(graph) if self.config.quantization_config.weights_bias_correction else {}
            check_budget(graph, self.target, self.config.mixed_precision_config.candidate_bits, biases)

    def warn(self, message: str, category: type[Warning] = UserWarning) -> None:
        """Warn the user, log it, and keep it for ``info.warnings``."""
        warnings.warn(message, category, stacklevel=3)
        LOG.warning(message)
        self.warnings.append(message)

    # -------------------------------------------------------------- the pieces
    def prepare(self, keep_float: Sequence[KeepFloat] | None = None) -> Graph:
        """The prepared graph (BN folded, no-ops removed) with quantization assigned."""
        rules = self.config.keep_float_rules if keep_float is None else list(keep_float)
        check_rules(self.initial, rules)
        if self._prepared is None:
            self._prepared = prepare_graph(self.initial.copy(), self.config.quantization_config)
        graph = self._prepared.copy()
        assign_quantization(graph, self.config.quantization_config, rules)
        graph.validate()
        return graph

    def statistics(self, graph: Graph, reference_samples: int = 0) -> dict[str, NodeStatistics]:
        """Activation statistics of every node quantized in ``graph`` (one pass over the data, cached).

        With ``reference_samples``, the same pass keeps the float outputs that comparing
        ``graph`` with the float model reads, on the first samples, when they fit under
        the similarity memory cap.
        """
        wanted = [n.name for n in graph.nodes() if n.quant.activation is not None]
        if self._stats is None or any(name not in self._stats for name in wanted):
            self._stats, self._reference = self._collect(graph, wanted, reference_samples)
        return self._stats

    @property
    def reference(self) -> FloatReference | None:
        """The float outputs the statistics pass kept, if it was asked to (see `statistics`)."""
        return self._reference

    def _recorder(self, graph: Graph, samples: int) -> FloatReference | None:
        if samples <= 0:
            return None
        plan = Comparison.of(self.initial, graph)
        # over the cap, only the float histograms are kept: the comparison runs the float
        # model again, in chunks, but does not bin its outputs
        keep = plan.keeps_reference(samples, self.config.debug_config.similarity_memory_cap)
        return FloatReference(plan.float_names, samples, keep=keep)

    def _collect(
        self, graph: Graph, names: list[str], reference_samples: int
    ) -> tuple[dict[str, NodeStatistics], FloatReference | None]:
        """One pass of the user's float model (``self.initial``) over the data.

        A node of ``graph`` reproduces the output of its ``output_reference`` in the
        original graph (a conv with a folded batch norm: the batch norm's), so its
        statistics are taken there, and the same pass gives the comparison its float side.
        """
        refs = {n: graph.node(n).output_reference for n in names}
        source, recorder = self.initial, self._recorder(graph, reference_samples)
        if any(ref not in self.initial for ref in refs.values()):  # not expected: measure graph itself
            source, recorder, refs = graph, None, {n: n for n in names}
        outputs = list(dict.fromkeys([*refs.values(), *(recorder.names if recorder and recorder.keep else [])]))
        bins = self.config.quantization_config.histogram_bins
        collectors = {n: StatisticsCollector(bins, graph.node(n).channel_axis) for n in names}
        model = self.backend.build(source, quantized=False, extra_outputs=outputs)
        if recorder is not None and not recorder.keep:  # the comparison runs it again
            recorder.model = model
        n_outputs = len(source.outputs)
        batches = tqdm(self.data.batches(), desc="Collecting statistics", unit="batch", leave=False)
        for index, batch in enumerate(batches):
            try:
                values = dict(zip(outputs, self.backend.run(model, batch)[n_outputs:]))
            except (RuntimeError, ValueError, TypeError) as err:  # the first batch ran: this one is bad
                shapes = ", ".join(f"input {i}: {a.shape}" for i, a in enumerate(batch))
                first = ", ".join(str(a.shape) for a in self.data.first)
                raise InputMismatchError(
                    f"batch {index}, {shapes} does not fit the model, though batch 0 ({first}) did: {err}"
                ) from err
            for name, ref in refs.items():
                collectors[name].update(values[ref])
            room = recorder.room if recorder is not None else 0
            if room:
                recorder.add(batch, values)
                if not recorder.room:  # the float histograms of exactly the kept samples
                    recorder.histograms = {
                        n: c.histogram_without(_after(values[refs[n]], room, len(batch[0])))
                        for n, c in collectors.items()
                    }
            del values
        stats = {n: c.result() for n, c in collectors.items()}
        if recorder is not None and recorder.histograms is None:  # the data held fewer samples
            recorder.histograms = {n: (s.counts, s.edges) for n, s in stats.items()}
        for name, s in stats.items():
            if s.nonfinite:
                self.warn(
                    f"{s.nonfinite} non-finite values (NaN or inf) in the output of {name!r} were skipped "
                    "when collecting statistics",
                    RuntimeWarning,
                )
        return stats, recorder

    def select_thresholds(self, graph: Graph) -> None:
        """Choose every grid; with ``weights_bias_correction``, also give each layer the
        input means its quantized bias is corrected with."""
        qc = self.config.quantization_config
        stats = self.statistics(graph)
        select_thresholds(graph, stats, qc.l_p_value)
        if qc.weights_bias_correction:
            corrected = set_input_means(graph, stats)
            LOG.debug("bias correction on %d layers: %s", len(corrected), ", ".join(corrected))

    def build(self, graph: Graph, weights: QuantizedWeights | None = None) -> Any:
        q_model = self.backend.build(graph, quantized=True, weights=weights)
        remember(q_model, graph)
        return q_model

    def analyze(
        self, graph: Graph, weights: QuantizedWeights | None = None, q_model: Any = None
    ) -> SimilarityResult:
        debug = self.config.debug_config
        return analyze(
            self.backend, self.initial, graph, self.data, debug.similarity_samples,
            debug.similarity_memory_cap, self.statistics(graph), self.reference, weights, q_model,
        )  # fmt: skip

    def quantize(self, keep_float: Sequence[KeepFloat] | None = None, similarity: bool = False) -> Trial:
        """A whole quantization without stage reports (the tuning loop's trials)."""
        graph = self.prepare(keep_float)
        self.select_thresholds(graph)
        trial = Trial(graph, self.build(graph))
        if similarity:
            trial.similarity = self.analyze(graph, q_model=trial.q_model)
        return trial

    def _reference_samples(self, run: RunContext) -> int:
        """Samples of float outputs the statistics pass keeps for what `run` compares later."""
        n = self.reference_samples
        if self.config.debug_config.analyze_similarity and run.folder is not None:
            n = max(n, self.config.debug_config.similarity_samples)
        if self.target is not None:
            n = max(n, self.config.mixed_precision_config.samples)
        return n

    def info(self, graph: Graph, run: RunContext) -> QuantizationInfo:
        return QuantizationInfo.of(graph, self.model_name, run.folder, self.warnings)

    def _write(self, write: Callable[[Any], None], folder: Any) -> None:
        """Write report files; a failing disk warns and quantization goes on."""
        try:
            write(folder)
        except OSError as err:
            self.warn(f"could not write report files into {folder}: {err}; quantization goes on", RuntimeWarning)

    # -------------------------------------------------------------- the pipeline
    def run(self, run: RunContext) -> tuple[Any, QuantizationInfo]:
        """Every stage, each reported to ``run.sink`` when it completes."""
        sink = run.sink
        _report(sink, "initial_graph", self.initial)
        graph = self.prepare()
        _report(sink, "after_graph_preparation", graph)
        stats = self.statistics(graph, self._reference_samples(run))
        _report(sink, "after_statistics_collection", graph, statistics=stats)
        self.select_thresholds(graph)
        _report(sink, "thresholds_selection", graph, statistics=stats)
        mixed = None
        if self.target is not None:
            from model_compression_toolkit.core.mixed_precision.search import search_bit_widths

            mixed = search_bit_widths(self, graph, self.target)
            if run.folder is not None:
                self._write(mixed.write, run.folder)
        quantized_weights = QuantizedWeights(graph)
        q_model = self.build(graph, quantized_weights)
        similarity = None
        if self.config.debug_config.analyze_similarity and run.folder is not None:
            similarity = self.analyze(graph, quantized_weights, q_model)
            self._write(similarity.report.write, run.folder)
            LOG.info(similarity.report.summary())
        _report(
            sink, "quantized_graph", graph, quantized=True,
            quantized_weights=quantized_weights, similarity=similarity, mixed_precision=mixed,
        )  # fmt: skip
        info = self.info(graph, run)
        info.similarity = similarity.report if similarity is not None else None
        info.mixed_precision = mixed
        LOG.info(
            "quantized %s: weights %.1f KiB -> %.1f KiB, %d layers kept in float%s",
            self.model_name,
            info.memory.weights_float_bytes / 1024,
            info.memory.weights_quantized_bytes / 1024,
            len(info.float_layers),
            f"; logs in {run.folder}" if run.folder else "",
        )
        return q_model, info


def post_training_quantization(
    model: Any,
    representative_data_gen: Callable[[], Any],
    core_config: CoreConfig | None,
    framework: str,
    target_resource_utilization: ResourceUtilization | None = None,
) -> tuple[Any, QuantizationInfo]:
    """Quantize ``model`` after training; the body of both public PTQ functions."""
    session = Session(model, representative_data_gen, core_config, framework, target_resource_utilization)
    with ptq_run(session.model_name) as run:
        return session.run(run)


def analyze_similarity(
    float_model: Any,
    quantized_model: Any,
    representative_data_gen: Callable[[], Any],
    debug_config: DebugConfig | None = None,
) -> SimilarityResult:
    """Compare a float model with a quantized model this library produced from it.

    The same analysis a logged PTQ call runs (see `DebugConfig`), on its own: with a log
    folder set, it writes a run folder holding the ``similarity`` runs and the report files.

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
    config = CoreConfig(debug_config=debug_config if debug_config is not None else DebugConfig())
    session = Session(float_model, representative_data_gen, config, q_graph.framework)
    with ptq_run(session.model_name) as run:
        result = analyze(
            session.backend, session.initial, q_graph, session.data, config.debug_config.similarity_samples,
            config.debug_config.similarity_memory_cap,
        )  # fmt: skip
        if run.folder is not None:
            result.report.write(run.folder)
            run.sink.stage(
                StageReport("quantized_graph", q_graph, graph_memory(q_graph, True), similarity=result)
            )
        LOG.info(result.report.summary())
    return result
