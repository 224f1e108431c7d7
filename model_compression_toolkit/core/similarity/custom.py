"""User metrics between float and quantized outputs, called per compare point and batch
(MCT's ``XQuantConfig(custom_similarity_metrics=...)``).

    batch -> float model (outputs at the references) ----\\
          -> quantized model (outputs at the points) ----> metric(float, quantized) per point
                                                             -> mean over batches

Each metric gets the two tensors as ``convert`` makes them (the framework's tensors, for
metrics written with torch or keras functions) and returns a number.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from model_compression_toolkit.core.backend import Backend
from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.core.similarity.plan import compare_points
from model_compression_toolkit.errors import ConfigurationError

OUTPUT = "model_output"  # the key of the model's (first) output


def custom_metrics(
    backend: Backend,
    float_graph: Graph,
    q_graph: Graph,
    batches: Iterable[list[np.ndarray]],
    metrics: Mapping[str, Callable[[Any, Any], Any]],
    convert: Callable[[np.ndarray], Any] = lambda a: a,
) -> dict[str, dict[str, float]]:
    """Each metric at each compare point (and at the model output, key `OUTPUT`), averaged over batches.

    Returns:
        point name -> metric name -> mean value.

    Raises:
        ConfigurationError: a metric that raises or returns something that is not a number
            (the message names the metric and the point).
    """
    points = compare_points(float_graph, q_graph)
    refs = list(dict.fromkeys(p.reference for p in points))
    names = [p.name for p in points]
    f_model = backend.build(float_graph, quantized=False, extra_outputs=refs)
    q_model = backend.build(q_graph, quantized=True, extra_outputs=names)
    n_f, n_q = len(float_graph.outputs), len(q_graph.outputs)
    sums: dict[str, dict[str, float]] = {}
    count = 0
    for batch in batches:
        f_out = backend.forward(f_model, batch)
        q_out = backend.forward(q_model, batch)
        f_at = dict(zip(refs, f_out[n_f:]))
        pairs = {OUTPUT: (f_out[0], q_out[0])}
        pairs.update({p.name: (f_at[p.reference], q) for p, q in zip(points, q_out[n_q:])})
        for point, (f, q) in pairs.items():
            row = sums.setdefault(point, dict.fromkeys(metrics, 0.0))
            for metric, fn in metrics.items():
                row[metric] += _number(fn, convert(f), convert(q), metric, point)
        count += 1
    return {point: {m: v / max(count, 1) for m, v in row.items()} for point, row in sums.items()}


def _number(fn: Callable, f: Any, q: Any, metric: str, point: str) -> float:
    try:
        value = fn(f, q)
        value = float(value.item() if hasattr(value, "item") else value)
    except Exception as err:  # a user's function: say whose and where
        raise ConfigurationError(
            f"custom similarity metric {metric!r} failed at {point!r}: {type(err).__name__}: {err}. It is called "
            "as metric(float_tensor, quantized_tensor) and must return a number"
        ) from err
    return value
