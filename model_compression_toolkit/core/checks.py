"""What no quantization can make usable: non-finite weights, degenerate calibration data.

    read graph --check_weights--> ModelWeightsError          (before anything is written)
    statistics --check_activations--> RepresentativeDataError, or one warning per activation

An activation is degenerate when its statistics give its quantizer nothing to calibrate on:

- **no finite value**: every value was NaN or infinite;
- **constant**: one value everywhere (all-zero data, a dead ReLU), so the quantization
  range is a single point and any other value is clipped to it;
- **absurdly large**: a magnitude above `LARGEST_PLAUSIBLE` (1e10). No trained network
  computes with values that large (the largest activations measured in large language
  models are in the thousands, and float16 stops at 65504); they come from unscaled or
  corrupted data, such as an uninitialised buffer, and the grid they give rounds every
  real value to zero.

A degenerate *model input* means the data itself is unusable: `check_activations` raises.
A degenerate activation inside the model may be what the model does (a dead ReLU): it is
one warning, unless it holds no finite value at all (the float model itself then computes
nothing usable), which raises too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from model_compression_toolkit.core.calibration.statistics import NodeStatistics
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.errors import ModelWeightsError, RepresentativeDataError

LARGEST_PLAUSIBLE = 1e10  # magnitude beyond which an activation cannot come from real data


def check_weights(graph: Graph) -> None:
    """Raise a ModelWeightsError naming every weight that holds NaN or infinite values.

    Constants (``OpKind.CONSTANT``: a mask of ``-inf`` in an attention layer) are not
    weights and are left alone.
    """
    found = []
    for node in graph.nodes():
        if node.kind == OpKind.CONSTANT:
            continue
        for wname, w in node.weights.items():
            values = np.asarray(w)
            if not np.issubdtype(values.dtype, np.floating) or np.isfinite(values).all():
                continue
            nan = int(np.isnan(values).sum())
            parts = [f"{nan} NaN"] if nan else []
            if values.size - nan - int(np.isfinite(values).sum()):
                parts.append(f"{values.size - nan - int(np.isfinite(values).sum())} infinite")
            found.append(
                f"{node.name!r} ({node.layer_type}) weight {wname!r}: {' and '.join(parts)} of {values.size}"
            )
    if found:
        raise ModelWeightsError(
            "expected finite weights; got non-finite values in " + "; ".join(found) + ". A quantized model "
            "of these weights computes NaN. The training diverged or the checkpoint is damaged: retrain "
            "or reload the weights (check them with torch.isfinite / np.isfinite) and quantize again."
        )


@dataclass(frozen=True)
class Degenerate:
    """One activation whose statistics leave nothing to calibrate on."""

    node: Node
    what: str  # "no finite value ...", "every value is 0", "values up to 2.5e+30 ..."
    unusable: bool  # no finite value at all


def degenerate(stats: NodeStatistics) -> tuple[str, bool] | None:
    """(what is wrong, whether nothing finite was seen), or None for usable statistics."""
    if stats.count == 0:
        return (
            (f"no finite value: all {stats.nonfinite} values are NaN or infinite", True)
            if stats.nonfinite
            else None
        )
    if stats.min == stats.max:
        return f"every value is {stats.min:g}", False
    largest = max(abs(stats.min), abs(stats.max))
    if largest > LARGEST_PLAUSIBLE:
        return (
            f"values up to {largest:.2g} in magnitude, beyond the {LARGEST_PLAUSIBLE:.0e} no real data reaches",
            False,
        )
    return None


def check_activations(graph: Graph, stats: Mapping[str, NodeStatistics], samples: int) -> list[str]:
    """Check every activation's statistics, collected on ``samples`` samples.

    Raises:
        RepresentativeDataError: a model input is degenerate, or an activation holds no
            finite value.

    Returns:
        One warning per degenerate activation inside the model.
    """
    found = [
        Degenerate(graph.node(name), *problem)
        for name, s in stats.items()
        if name in graph and (problem := degenerate(s)) is not None
    ]
    inputs = [d for d in found if d.node.kind == OpKind.INPUT]
    if inputs:
        listed = "; ".join(f"input {d.node.name!r}: {d.what}" for d in inputs)
        keep = ", ".join(repr(d.node.name) for d in inputs)
        raise RepresentativeDataError(
            f"expected calibration data like what the model sees in use; representative_data_gen gave, "
            f"over all {samples} samples read, {listed}. A quantizer calibrated on it makes the model "
            "useless on real data. Check the data pipeline (a missing normalisation, a loader that "
            "yields padding, NaN or an uninitialised buffer); if an input is constant by design, keep "
            f"it float: mct.core.KeepFloat(names=[{keep}], weights=False)."
        )
    broken = [d for d in found if d.unusable]
    if broken:
        listed = "; ".join(f"{d.node.name!r} ({d.node.layer_type}): {d.what}" for d in broken)
        raise RepresentativeDataError(
            f"expected the float model to compute finite values on the representative data; over all "
            f"{samples} samples it computes {listed}. The values overflow float32 (inputs too large for "
            "the model) or the model is broken: check the data's scale and the model's float output first."
        )
    return [
        f"the output of {d.node.name!r} ({d.node.layer_type}) was constant on all {samples} calibration "
        f"samples ({d.what}): its quantization range is a single point, so any other value it takes in use "
        "is clipped to it. If the data is what the model sees in use, this layer does nothing (a dead "
        "ReLU); otherwise give representative_data_gen more varied data."
        if d.what.startswith("every value")
        else f"the output of {d.node.name!r} ({d.node.layer_type}) holds {d.what} on the {samples} "
        "calibration samples: its quantization grid is so coarse that any ordinary value rounds to 0. "
        "Check the data's scale (a missing normalisation)."
        for d in found
    ]
