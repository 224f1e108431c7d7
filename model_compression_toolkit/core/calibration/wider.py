"""Activation grids at other bits, chosen once per activation from the statistics.

The suggested fix (`core.similarity.fix`) measures several candidates that widen the same
activations: a cause at 16 bits alone, grown with the next entries, then every activation
at 16 bits, then the causes' fix with every activation at 16 bits. Each re-chose those
grids with the threshold search (`thresholds.fill_activation_config`): on a 600-layer
model, every activation at 16 bits is ~70 searches, and the search is the fix's largest
cost after the model runs. The grid depends only on the statistics, the bits and the
settings the search reads, so it is chosen once and copied into each candidate::

    fill(cfg at 16 bits) -> key (node, bits, settings) -> the search once -> chosen fields
                                                       -> copied into every later cfg

`ActivationGrids` is the collected statistics by node (a read-only mapping, as the fix's
callers pass them) that also remembers these grids: one lives for one fix search.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping

from model_compression_toolkit.core.calibration.statistics import NodeStatistics
from model_compression_toolkit.core.calibration.thresholds import fill_activation_config
from model_compression_toolkit.core.quant_config import ActivationQuantConfig

# what the search writes: copied from the remembered config into a later one
CHOSEN = ("method", "signed", "threshold", "range_min", "range_max", "grid")


def search_key(cfg: ActivationQuantConfig, l_p_value: float) -> tuple:
    """Everything `fill_activation_config` reads of ``cfg`` (and the p of ``LP``): two
    configs with the same key get the same grid from the same statistics. The method is
    read only where the search does not choose it."""
    return (
        cfg.n_bits,
        None if cfg.choose_grid else cfg.method,
        cfg.error_method,
        cfg.z_threshold,
        cfg.shift_negative_ratio,
        cfg.fixed_range,
        cfg.choose_grid,
        cfg.model_output,
        cfg.values_per_sample,
        cfg.bounds,
        float(l_p_value),
    )


class ActivationGrids(Mapping[str, NodeStatistics]):
    """The statistics by node; `fill` chooses a grid from them once per node and key.

    Args:
        stats: the collected statistics by node.
    """

    def __init__(self, stats: Mapping[str, NodeStatistics]) -> None:
        self.stats = stats
        self._chosen: dict[tuple[str, tuple], ActivationQuantConfig] = {}
        self.searches = 0  # threshold searches run (the rest were copied)

    def __getitem__(self, name: str) -> NodeStatistics:
        return self.stats[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.stats)

    def __len__(self) -> int:
        return len(self.stats)

    def fill(self, name: str, cfg: ActivationQuantConfig, l_p_value: float = 2.0) -> None:
        """As ``fill_activation_config(cfg, self[name], l_p_value)``; the search runs the
        first time this node is asked for with these settings, later ones copy its result."""
        key = (name, search_key(cfg, l_p_value))
        chosen = self._chosen.get(key)
        if chosen is None:
            fill_activation_config(cfg, self.stats[name], l_p_value)
            self.searches += 1
            self._chosen[key] = copy.deepcopy(cfg)
            return
        for field in CHOSEN:
            setattr(cfg, field, copy.deepcopy(getattr(chosen, field)))


def fill(
    cfg: ActivationQuantConfig, name: str, stats: Mapping[str, NodeStatistics], l_p_value: float
) -> None:
    """``cfg``'s grid from ``stats[name]``: remembered where ``stats`` is `ActivationGrids`."""
    if isinstance(stats, ActivationGrids):
        stats.fill(name, cfg, l_p_value)
    else:
        fill_activation_config(cfg, stats[name], l_p_value)
