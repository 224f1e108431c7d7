"""What one suggested-fix search measures once, though it asks more than once.

The search (`core.similarity.fix`) measures a candidate's margin while it grows the causes'
fix, then judges the candidate it kept: the same changes, so the same graph and the same
model outputs. Each candidate's graph is made once per search (`SearchStats.graph_of`,
remembered by the fix's changes) and measured once (`MeasuredOnce`, by that graph)::

    margin(fix)  -> graph_of(fix) -> G -> probe.impact(G): a model run
    judged(fix)  -> graph_of(fix) -> G -> the impact above, no run

The activation grids of more bits are chosen once per activation (`ActivationGrids`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from model_compression_toolkit.core.calibration.rounding import InputMoments
from model_compression_toolkit.core.calibration.statistics import NodeStatistics
from model_compression_toolkit.core.calibration.wider import ActivationGrids
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.similarity.causes import ImpactProbe
from model_compression_toolkit.core.similarity.parts import OutputImpact
from model_compression_toolkit.core.similarity.suggested import SuggestedFix


def changes(fix: SuggestedFix) -> tuple:
    """What of ``fix`` makes its graph (`fix.fixed_graph`): the bits, the float layers, the rounding."""
    return (
        tuple(fix.activations),
        tuple(fix.weights),
        tuple(sorted(fix.weight_bits.items())),
        tuple(sorted(fix.activation_bits.items())),
        fix.activation_n_bits,
        fix.weights_n_bits,
        fix.compensated_rounding,
    )


class SearchStats(ActivationGrids):
    """The statistics of one fix search: its grids of more bits (`ActivationGrids`), the
    graph of each candidate it made, and the input moments of compensated rounding.

    Args:
        stats: the collected statistics by node.
    """

    def __init__(self, stats: Mapping[str, NodeStatistics]) -> None:
        super().__init__(stats)
        self._graphs: dict[tuple, tuple[Graph, Graph]] = {}
        # the compensated layers' input moments, once a candidate rounds with compensation
        self.moments: Mapping[str, InputMoments] | None = None

    def graph_of(self, graph: Graph, fix: SuggestedFix, l_p_value: float, make: Callable[[], Graph]) -> Graph:
        """``make()`` (``graph`` as ``fix`` quantizes it) the first time these changes are
        asked for on this very ``graph``; the same object later."""
        key = (id(graph), float(l_p_value), changes(fix))
        known = self._graphs.get(key)
        if known is not None and known[0] is graph:
            return known[1]
        made = make()
        self._graphs[key] = (graph, made)
        return made


class MeasuredOnce:
    """``probe`` (an `ImpactProbe`), whose impact of a whole graph it has measured is
    given again for the very same graph object, with no model run."""

    def __init__(self, probe: ImpactProbe) -> None:
        self.probe = probe
        self._impacts: dict[int, tuple[Graph, OutputImpact]] = {}
        self.runs_saved = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.probe, name)

    def impact(self, variant: Graph, at: str | None = None) -> OutputImpact:
        if at is not None:
            return self.probe.impact(variant, at)
        known = self._impacts.get(id(variant))
        if known is not None and known[0] is variant:
            self.runs_saved += 1
            return known[1]
        impact = self.probe.impact(variant)
        self._impacts[id(variant)] = (variant, impact)  # the graph kept: its id stays its own
        return impact

    def output_sqnr_db(self, variant: Graph, at: str | None = None) -> float:
        return self.impact(variant, at).sqnr_db
