"""One model's PTQ session: read and check once, collect statistics once, quantize on demand.

``model -> read -> prepare -> statistics (one pass) -> thresholds -> build``

A `Session` is what the staged PTQ call (`pipeline.stages`) and the tuning loop
(`pipeline.tuning`) both quantize with; it reports only its progress, to the observer it
is given (`report_to`).
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from model_compression_toolkit.core.backend import Backend
from model_compression_toolkit.core.calibration.bias_correction import (
    input_sources,
    possible_new_biases,
    set_input_means,
)
from model_compression_toolkit.core.calibration.hessian import set_importance, wants_second_moments
from model_compression_toolkit.core.calibration.quantizers import QuantizedWeights
from model_compression_toolkit.core.calibration.rounding import (
    InputMoments,
    Patches,
    compensated_layers,
    set_input_moments,
)
from model_compression_toolkit.core.calibration.shared_grids import share_grids
from model_compression_toolkit.core.calibration.statistics import NodeStatistics, StatisticsCollector
from model_compression_toolkit.core.calibration.thresholds import fill_activation_config, fill_weights_config
from model_compression_toolkit.core.checks import check_activations, check_weights
from model_compression_toolkit.core.config import CoreConfig, KeepFloat, ResourceUtilization
from model_compression_toolkit.core.data import RepresentativeData
from model_compression_toolkit.core.equalization import equalize
from model_compression_toolkit.core.export.grids import PLATFORM_META
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.info import QuantizationInfo
from model_compression_toolkit.core.mixed_precision.search import check_budget
from model_compression_toolkit.core.node_rules import bit_width_rules
from model_compression_toolkit.core.preparation import assign_quantization, prepare_graph
from model_compression_toolkit.core.resolution import quantization_edits
from model_compression_toolkit.core.resources import weights_target
from model_compression_toolkit.core.selection import check_rules
from model_compression_toolkit.core.similarity.analysis import SimilarityResult, analyze
from model_compression_toolkit.core.similarity.fix import FixMenu, SuggestedFix
from model_compression_toolkit.core.similarity.fix_menu import FixMetric
from model_compression_toolkit.core.similarity.plan import Comparison
from model_compression_toolkit.core.similarity.reference import FloatModel, FloatReference, has_batch_axis
from model_compression_toolkit.errors import InputMismatchError, warn_user
from model_compression_toolkit.pipeline.events import NullObserver, Observer, Progress

LOG = logging.getLogger("model_compression_toolkit")
EQUALIZED = "channels_equalized"  # Graph.meta key of a graph whose channels were equalized
COMPENSATED = "compensated_rounding"  # Graph.meta key of a graph a fix rounds with compensation
_PRODUCED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # quantized model -> its graph


def remember(q_model: Any, graph: Graph) -> None:
    """Keep the graph a quantized model was built from, for a later standalone analysis."""
    try:
        _PRODUCED[q_model] = graph
    except TypeError:  # a model type that cannot be weakly referenced: nothing to remember
        pass


def produced_graph(q_model: Any) -> Graph | None:
    """The graph a quantized model of this process was built from, or None."""
    try:
        return _PRODUCED.get(q_model)
    except TypeError:
        return None


def select_thresholds(
    graph: Graph, stats: dict[str, NodeStatistics], l_p_value: float, observer: Observer | None = None
) -> None:
    """Choose every quantizer's range; ``observer`` hears the progress, layer by layer."""
    nodes = [n for n in graph.nodes() if n.quant.weights or n.quant.activation is not None]
    for done, node in enumerate(nodes, start=1):
        for wname, cfg in node.quant.weights.items():
            fill_weights_config(cfg, node.weights[wname], l_p_value)
        if node.quant.activation is not None:
            fill_activation_config(node.quant.activation, stats[node.name], l_p_value)
        if observer is not None:
            observer.progress(Progress("thresholds", done, len(nodes), "layers"))


class _StatisticsTap:
    """The statistics pass's tap: each output, as the model makes it, goes to the collectors
    that read it; only the outputs named in ``keep`` (set before each batch) are held.

    A collector's error is raised after the run (`batch_values`), as the error it is, not
    as the model's failing on the batch."""

    def __init__(self, readers: dict[str, list[Any]]) -> None:
        self.readers = readers  # output -> what reads it (statistics collectors, input moments)
        self.keep: set[str] = set()
        self._values: dict[str, np.ndarray] = {}
        self._error: BaseException | None = None

    def __call__(self, name: str, value: np.ndarray) -> None:
        if self._error is None:
            try:
                for collector in self.readers.get(name, ()):
                    collector.update(value)
            except Exception as error:  # raised again once the run is over
                self._error = error
        if name in self.keep:
            self._values[name] = value

    def batch_values(self) -> dict[str, np.ndarray]:
        """The outputs kept from the run just over (and forgotten here)."""
        if self._error is not None:
            raise self._error
        values, self._values = self._values, {}
        return values


def _after(value: np.ndarray, kept: int, batch: int) -> np.ndarray:
    """The samples of a batch's output after the first ``kept`` (none if it has no batch axis)."""
    return value[kept:] if kept < batch and has_batch_axis(value, batch) else np.empty(0, np.float32)


@dataclass
class Quantization:
    """One quantization of the session's model: its graph, the model built from it, and
    (when it was asked for) its comparison with the float model."""

    graph: Graph
    model: Any
    similarity: SimilarityResult | None = None


class Session:
    """One model's PTQ: checks and reads once, collects statistics once, quantizes on demand.

    Bad input fails in the constructor, before anything is written; calibration data that
    leaves nothing to calibrate on fails when the statistics are collected. `close` (or
    leaving a ``with`` block) closes the user's data iteration if a call ends early.

    Args:
        model: the user's float model (never modified).
        representative_data_gen: the user's data callable.
        config: a validated `CoreConfig` whose ``debug_config.analyze_similarity`` is
            already True or False (`ptq` resolves it).
        backend: the model's framework backend.
        target: a resource budget for mixed precision, validated; kept as the weights
            budget it leaves (`core.resources.weights_target`).
    """

    def __init__(
        self,
        model: Any,
        representative_data_gen: Callable[[], Any],
        config: CoreConfig,
        backend: Backend,
        target: ResourceUtilization | None = None,
    ):
        self.config = config
        self.target = target
        self.backend = backend
        self.data = RepresentativeData(representative_data_gen, backend, model)
        try:  # the user's data iteration is closed if reading or checking fails
            self.model_name = backend.model_name(model)
            self.initial, read_warnings = backend.read(model, self.data.first)
            check_weights(self.initial)
            self.equalized = False
            if config.quantization_config.activation_channel_equalization:
                self.equalize()
            check_rules(self.initial, config.keep_float_rules)
            self.edits = quantization_edits(config)
            self.warnings: list[str] = []
            for message in read_warnings:
                self.warn(message)
            self._stats: dict[str, NodeStatistics] | None = None
            self._reference: FloatReference | None = None
            self._moments: dict[str, InputMoments] = {}
            self._prepared: Graph | None = None
            self.observer: Observer = NullObserver()
            # Samples whose float outputs the statistics pass keeps for later comparisons, on
            # top of what a staged call compares itself (the tuning loop compares every trial).
            self.reference_samples = 0
            # The user's task metric (a tuned call's ``evaluate``): the fix search judges its
            # candidates by it too, so the suggestion is the cheapest that gives the task back.
            self.fix_metric: FixMetric | None = None
            if self.edits:  # a rule that selects nothing fails now, before anything is written
                self.prepare()
            if target is not None:  # an impossible budget fails now, before anything is written
                graph = self.prepare()
                self.target = weights_target(graph, target)
                biases = possible_new_biases(graph) if config.quantization_config.weights_bias_correction else {}
                check_budget(graph, self.target, config.mixed_precision_config.candidate_bits, biases)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the user's data iteration if a pass left it open (a call that failed early)."""
        self.data.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def warn(self, message: str, category: type[Warning] = UserWarning) -> None:
        """Warn the user (at their own line), log it, and keep it for ``info.warnings``."""
        warn_user(message, category)
        LOG.warning(message)
        self.warnings.append(message)

    def report_to(self, observer: Observer) -> None:
        """Tell ``observer`` how far the long steps have got (statistics, thresholds, analysis)."""
        self.observer = observer

    def progress(self, step: str, done: int, total: int | None, unit: str) -> None:
        """Tell the observer that ``done`` of ``total`` ``unit`` of ``step`` are done."""
        self.observer.progress(Progress(step, done, total, unit))

    # -------------------------------------------------------------- the pieces
    def equalize(self) -> None:
        """From now on quantize the model with its channels equalized (`core.equalization`):
        the float graph every later step reads is replaced by the equalized one, whose
        function is the same, and the statistics are collected again on it. The user's
        model is not touched: the graph holds copies of its weights."""
        if self.equalized:
            return
        self.initial, scales = equalize(self.initial)
        self.initial.meta[EQUALIZED] = True  # the graphs prepared from it carry it
        self.equalized = True
        self._stats, self._reference, self._prepared, self._moments = None, None, None, {}
        LOG.info("channels equalized between %d pairs of layers: %s", len(scales), ", ".join(scales))

    def prepare(self, keep_float: Sequence[KeepFloat] | None = None, bits: SuggestedFix | None = None) -> Graph:
        """The prepared graph (BN folded, no-ops removed) with quantization assigned; with
        ``bits``, the bit-widths of a fix (per layer, after every other edit, or of every
        activation or weight), and its equalization (`equalize`, from then on)."""
        rules = self.config.keep_float_rules if keep_float is None else list(keep_float)
        if bits is not None and bits.equalize:
            self.equalize()
        check_rules(self.initial, rules)
        if self._prepared is None:
            self._prepared = prepare_graph(self.initial.copy(), self.config.quantization_config)
        graph = self._prepared.copy()
        edits, qc = self.edits, self.config.quantization_config
        if bits is not None:
            edits = [*edits, *bit_width_rules(bits.bit_width_config())]
            given = {"activation_n_bits": bits.activation_n_bits, "weights_n_bits": bits.weights_n_bits}
            qc = dataclasses.replace(qc, **{k: v for k, v in given.items() if v is not None})
            if bits.compensated_rounding:  # the kernels rounded with compensation (`select_thresholds`)
                graph.meta[COMPENSATED] = True
        assign_quantization(graph, qc, rules, edits, self.config.outputs_float, self.config.grids_for)
        tpc = self.config.target_platform_capabilities
        if tpc is not None:  # what an export refused for another runtime names (`core.export.grids`)
            graph.meta[PLATFORM_META] = " ".join(
                str(getattr(tpc, a)) for a in ("tpc_platform_type", "tpc_version") if getattr(tpc, a, None)
            )
        graph.validate()
        return graph

    def statistics(self, graph: Graph, reference_samples: int = 0) -> dict[str, NodeStatistics]:
        """Activation statistics of every node quantized in ``graph``, and of the inputs of the
        layers whose bias is corrected (one pass over the data, cached).

        With ``reference_samples``, the same pass keeps the float outputs that comparing
        ``graph`` with the float model reads, on the first samples, when they fit under
        the similarity memory cap.
        """
        self.follow(graph)
        wanted = [n.name for n in graph.nodes() if n.quant.activation is not None]
        if self.config.quantization_config.weights_bias_correction:  # what the corrected layers read
            wanted += [name for name in input_sources(graph) if name not in wanted]
        if self._stats is None or any(name not in self._stats for name in wanted):
            compensate = compensated_layers(graph) if self.compensates(graph) else {}
            self._stats, self._reference, moments = self._collect(graph, wanted, reference_samples, compensate)
            self._moments = {**self._moments, **moments}
        return self._stats

    def compensates(self, graph: Graph) -> bool:
        """Whether ``graph``'s kernels are rounded with their errors compensated: the call's
        ``weights_compensated_rounding``, or a fix that asks for it (`prepare`)."""
        return bool(self.config.quantization_config.weights_compensated_rounding or graph.meta.get(COMPENSATED))

    def input_moments(self, graph: Graph) -> dict[str, InputMoments]:
        """The input moments of ``graph``'s compensated layers on the calibration data: those
        the statistics pass collected, or one pass more that collects them (a fix that asks
        for compensated rounding, on a call without it)."""
        compensate = compensated_layers(graph)
        if any(layer not in self._moments for layer in compensate):
            self._moments = {**self._moments, **self._collect(graph, [], 0, compensate, step="input moments")[2]}
        return {layer: self._moments[layer] for layer in compensate}

    def follow(self, graph: Graph) -> None:
        """A graph quantized from the equalized model (a later standalone comparison of a
        model a call equalized) is compared with the equalized float model."""
        if graph.meta.get(EQUALIZED) and not self.equalized:
            self.equalize()

    @property
    def float_model(self) -> FloatModel:
        """The float side of every comparison: the user's model as read, with the outputs
        the statistics pass kept (see `statistics`)."""
        return FloatModel(self.backend, self.initial, self.data, self._reference)

    def _recorder(self, graph: Graph, samples: int) -> FloatReference | None:
        if samples <= 0:
            return None
        plan = Comparison.of(self.initial, graph)
        # over the cap, only the float histograms are kept: the comparison runs the float
        # model again, in chunks, but does not bin its outputs
        keep = plan.keeps_reference(samples, self.config.debug_config.similarity_memory_cap)
        return FloatReference(plan.float_names, samples, keep=keep)

    def _collect(
        self,
        graph: Graph,
        names: list[str],
        reference_samples: int,
        compensate: Mapping[str, tuple[str, Patches]],
        step: str = "statistics",
    ) -> tuple[dict[str, NodeStatistics], FloatReference | None, dict[str, InputMoments]]:
        """One pass of the user's float model (``self.initial``) over the data.

        A node of ``graph`` reproduces the output of its ``output_reference`` in the
        original graph (a conv with a folded batch norm: the batch norm's), so its
        statistics are taken there, and the same pass gives the comparison its float side
        and each layer of ``compensate`` the second moments of its input
        (`core.calibration.rounding`).
        """
        refs = {n: graph.node(n).output_reference for n in names}
        inputs = {layer: graph.node(src).output_reference for layer, (src, _) in compensate.items()}
        source, recorder = self.initial, self._recorder(graph, reference_samples)
        if any(ref not in self.initial for ref in [*refs.values(), *inputs.values()]):  # not expected: graph itself
            source, recorder, refs = graph, None, {n: n for n in names}
            inputs = {layer: src for layer, (src, _) in compensate.items()}
        outputs = list(dict.fromkeys([*refs.values(), *inputs.values(), *(recorder.names if recorder and recorder.keep else [])]))
        bins = self.config.quantization_config.histogram_bins
        second = wants_second_moments(graph)  # HMSE weighs weights by their inputs' E[x^2]
        collectors = {n: StatisticsCollector(bins, graph.node(n).channel_axis, second) for n in names}
        moments = {layer: InputMoments(patches) for layer, (_, patches) in compensate.items()}
        feeds: dict[str, list[Any]] = {}
        for name, ref in refs.items():
            feeds.setdefault(ref, []).append(collectors[name])
        for layer, ref in inputs.items():
            feeds.setdefault(ref, []).append(moments[layer])
        # each output is fed to its collectors as the model makes it and let go, but those the
        # float reference keeps: a batch's outputs are never all held at once (a float reference
        # that does not fit runs again for the comparison, as a model that returns its outputs)
        tap = _StatisticsTap(feeds) if outputs and (recorder is None or recorder.keep) else None
        model = self.backend.build(source, quantized=False, extra_outputs=outputs, tap=tap)
        if recorder is not None and not recorder.keep:  # the comparison runs it again
            recorder.model = model
        n_outputs = len(source.outputs)
        limit = self.config.quantization_config.calibration_batches
        total = self.data.expected_batches(limit)  # the batches read: the limit, or fewer when known
        shown = total if self.data.expected_batches(None) is not None else None  # a bound is not a total
        read = 0
        for index, batch in enumerate(self.data.batches(limit)):
            room = recorder.room if recorder is not None else 0
            if tap is not None:  # what the reference keeps; on the batch that fills it, for its
                tap.keep = set(recorder.names) if recorder is not None and room else set()
                if 0 < room <= len(batch[0]):  # histograms, every output the collectors read
                    tap.keep |= set(refs.values())
            try:
                returned = self.backend.forward(model, batch)
            except (RuntimeError, ValueError, TypeError) as err:  # the first batch ran: this one is bad
                shapes = ", ".join(f"input {i}: {a.shape}" for i, a in enumerate(batch))
                first = ", ".join(str(a.shape) for a in self.data.first)
                raise InputMismatchError(
                    f"batch {index}, {shapes} does not fit the model, though batch 0 ({first}) did: {err}"
                ) from err
            if tap is not None:
                values = tap.batch_values()
            else:
                values = dict(zip(outputs, returned[n_outputs:]))
                for ref, readers in feeds.items():
                    for reader in readers:
                        reader.update(values[ref])
            del returned
            if room:
                recorder.add(batch, values)
                if not recorder.room:  # the float histograms of exactly the kept samples
                    recorder.histograms = {
                        n: c.histogram_without(_after(values[refs[n]], room, len(batch[0])))
                        for n, c in collectors.items()
                    }
            del values
            read = index + 1
            self.progress(step, read, shown, "batches")
        if limit is not None and read == limit:
            LOG.info(
                "statistics collected on the first %d batches of representative_data_gen "
                "(QuantizationConfig.calibration_batches=%d); later batches, if any, were not read",
                read, limit,
            )  # fmt: skip
        stats = {n: c.result() for n, c in collectors.items()}
        for message in check_activations(graph, stats, self.data.samples_read):
            self.warn(message, RuntimeWarning)
        if recorder is not None and recorder.histograms is None:  # the data held fewer samples
            recorder.histograms = {n: (s.counts, s.edges) for n, s in stats.items()}
        for name, s in stats.items():
            if s.nonfinite:
                self.warn(
                    f"{s.nonfinite} non-finite values (NaN or inf) in the output of {name!r} were skipped "
                    "when collecting statistics",
                    RuntimeWarning,
                )
        return stats, recorder, moments

    def select_thresholds(self, graph: Graph) -> None:
        """Choose every grid; with ``weights_bias_correction``, also give each layer the
        input means its quantized bias is corrected with."""
        qc = self.config.quantization_config
        stats = self.statistics(graph)
        if wants_second_moments(graph):
            set_importance(graph, stats)
        if self.compensates(graph):
            compensated = set_input_moments(graph, self.input_moments(graph))
            LOG.debug("kernels rounded with their errors compensated on %d layers: %s", len(compensated), ", ".join(compensated))
        select_thresholds(graph, stats, qc.l_p_value, self.observer)
        share_grids(graph)
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
        """Compare ``graph`` (quantized) with the float model on the configured samples."""
        self.follow(graph)
        debug = self.config.debug_config
        return analyze(
            self.float_model, graph, debug.similarity_samples, debug.similarity_memory_cap,
            self.statistics(graph), weights, q_model, debug.impact_samples, debug.max_impact_quantizers,
            self.config.quantization_config.l_p_value, self.progress,
            dataclasses.replace(FixMenu.of(self.config), metric=self.fix_metric, moments=self.input_moments),
        )  # fmt: skip

    def quantize(
        self,
        keep_float: Sequence[KeepFloat] | None = None,
        bits: SuggestedFix | None = None,
        similarity: bool = False,
    ) -> Quantization:
        """A whole quantization, reported to nobody (the tuning loop's later trials)."""
        graph = self.prepare(keep_float, bits)
        self.select_thresholds(graph)
        result = Quantization(graph, self.build(graph))
        if similarity:
            result.similarity = self.analyze(graph, q_model=result.model)
        return result

    def info(self, graph: Graph) -> QuantizationInfo:
        """What quantizing to ``graph`` decided, with the warnings shown so far."""
        return QuantizationInfo.of(graph, self.model_name, self.warnings, float_graph=self.initial)
