"""Per-layer parity: each quantized tensor of the exported file, read in its runtime, against
the same layer's tensor in the quantized model (and that one against the float model)::

    float model      --> layer output (float)      \\
    quantized model  --> layer output (on its grid) -> LayerParity: steps, share > 1 step, SQNR, why
    runtime (tapped) --> the tensor of that grid   /

Pure numpy: the backends find the runtime's tensors (`TapPoint`) and run the models; here
the layers are matched to the tensors (`match_layers`), compared batch by batch
(`LayerAccumulator`), and the first layer that departs by more than one step is named,
with why when the numbers tell (`LayerTable`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from model_compression_toolkit.core.graph import Graph

# float32 slack on top of one step: a value exactly one step off is "within one step"
STEP_SLACK = 1e-3
# A layer whose inputs already differ by a step may, through its sums, land two steps off on
# a few values: below this share of values, that is carried over, not a departure.
CARRIED_SHARE = 1e-3
# A layer with this many times more values over one step than its inputs have off at all
# adds differences of its own.
OWN_FACTOR = 10
# The per-channel fit reads at most this many values per batch (positions strided), and at
# least this many positions per channel.
FIT_VALUES, FIT_ROWS = 2**18, 256
# the reasons `explain` tells, and those that make a layer depart on its own
KINDS = ("requantization", "mismatch", "offset", "otherwise", "carried", "grown", "fused")
DEPARTING = frozenset({"mismatch", "offset", "otherwise"})
SCALE_RTOL = 1e-5  # a grid's scale as a file stores it (float32) against ours (float64)


@dataclass(frozen=True)
class LayerGrid:
    """A layer whose output the quantized model puts on a grid: the tensors compared.

    Attributes:
        name: the node whose quantizer makes the tensor.
        layer_type: its framework type (``ReLU``, ``Conv2d``).
        scale: the grid's step.
        computed_by: the nodes computed since the previous quantized tensors, ending with
            ``name`` (``conv -> relu``: a conv without a grid of its own, then the ReLU).
        low / high: the grid's smallest and largest values (a value there may be clipped).
        channel_axis: the output's channel axis, for the per-channel fit of a difference
            (the node's, else the framework's: 1 for PyTorch, -1 for Keras).
        inputs: the layers whose tensors ``computed_by`` reads (quantized layers, graph inputs).
    """

    name: str
    layer_type: str
    scale: float
    computed_by: tuple[str, ...]
    low: float = -math.inf
    high: float = math.inf
    channel_axis: int | None = None
    inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class TapPoint:
    """A quantized tensor of the runtime's graph that can be read out.

    Attributes:
        tensor: its name in the file.
        scale: its grid's step, as the file stores it.
        order: the position of the op writing it in the runtime's op order.
        hint: text naming where it came from (TFLite's fused tensor names); may be empty.
    """

    tensor: str
    scale: float
    order: int
    hint: str = ""


def quantized_layers(graph: Graph) -> list[LayerGrid]:
    """The graph's nodes with one output on a per-tensor grid, in topological order."""
    layers = []
    for node in graph.nodes():
        act = node.quant.activation
        if act is None or act.grid is None or np.size(act.grid.scale) != 1 or len(node.output_shapes) > 1:
            continue
        grid = act.grid
        scale, zero = float(np.asarray(grid.scale)), float(np.asarray(grid.zero_point))
        axis = node.channel_axis
        if axis is None:
            axis = 1 if graph.framework == "pytorch" else -1
        computed_by, inputs = _computed_by(graph, node.name)
        low, high = (grid.qmin - zero) * scale, (grid.qmax - zero) * scale
        layers.append(LayerGrid(node.name, node.layer_type, scale, computed_by, low, high, axis, inputs))
    return layers


def _computed_by(graph: Graph, name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``name`` and the float nodes before it, back to the tensors on a grid (or the graph's
    inputs); and those tensors' nodes, the layer's inputs."""
    seen: set[str] = {name}
    inputs: set[str] = set()
    stack = [name]
    while stack:
        for pred in graph.predecessors(stack.pop()):
            act = pred.quant.activation
            if pred.name in graph.inputs or (act is not None and act.grid is not None):
                inputs.add(pred.name)
            elif pred.name not in seen:
                seen.add(pred.name)
                stack.append(pred.name)
    order = graph.topological_order()
    return tuple(n for n in order if n in seen), tuple(n for n in order if n in inputs)


def _named(layer: str, hint: str) -> bool:
    """Whether a TFLite tensor name (``model_1/re_lu_1/Relu;model_1/conv2d_1/add``) comes from
    ``layer``: its name as a scope, with TensorFlow's ``_<k>`` suffix or ``_fake_quant``."""
    pattern = rf"(^|[/;]){re.escape(layer)}(_fake_quant)?(_\d+)?/"
    return re.search(pattern, hint) is not None


def match_layers(layers: Sequence[LayerGrid], points: Sequence[TapPoint]) -> dict[str, str]:
    """Layer name -> the runtime tensor holding its output.

    A tensor matches a layer when its grid has the layer's step; among those, one whose
    hint names the layer, then the first written after the previous layer's tensor (the
    runtime keeps the graph's order), then the first. A layer whose grid no tensor has is
    left out: the runtime fused it away.
    """
    taken: set[str] = set()
    result: dict[str, str] = {}
    last = -1
    for layer in layers:
        found = [
            p
            for p in points
            if p.tensor not in taken and abs(p.scale - layer.scale) <= SCALE_RTOL * abs(layer.scale)
        ]
        named = [p for p in found if p.hint and _named(layer.name, p.hint)]
        found = named or found
        later = [p for p in found if p.order > last]
        if not found:
            continue
        best = min(later or found, key=lambda p: p.order)
        taken.add(best.tensor)
        result[layer.name] = best.tensor
        last = max(last, best.order)
    return result


@dataclass
class LayerParity:
    """One layer: the runtime's tensor against the quantized model's, in steps of its grid.

    Attributes:
        layer / layer_type / computed_by / step: as in `LayerGrid`.
        tensor: the runtime's tensor compared, or None when the runtime has none (fused).
        values: how many values were compared.
        max_steps: the largest difference, in steps (None when not compared).
        over_one_step: the share of values more than one step off.
        one_step: the share of values exactly one step off (the runtime rounding a tie the other way).
        cosine / sqnr_db: the runtime's tensor against the quantized model's.
        float_sqnr_db: the quantized model's tensor against the float model's (what
            quantization costs at this layer), when the float model ran.
        gain / offset_steps: the runtime's tensor fitted as ``gain * ours + offset`` per
            channel (values at the grid's ends left out): the channels' medians.
        gain_off_share: the share of channels whose gain is off 1 by more than 1 %.
        fit_residual: the share of the difference's energy the fit leaves unexplained.
        why: what the numbers say about a difference, or None.
        kind: the reason in one word (`KINDS`), or None when the tensors are equal.
        departs: more than one step off by a reason of its own (`DEPARTING`): not only
            carrying over or growing its inputs' differences (`explain`).
    """

    layer: str
    layer_type: str
    computed_by: tuple[str, ...]
    step: float
    tensor: str | None
    values: int = 0
    max_steps: float | None = None
    over_one_step: float = 0.0
    one_step: float = 0.0
    cosine: float | None = None
    sqnr_db: float | None = None
    float_sqnr_db: float | None = None
    gain: float | None = None
    offset_steps: float | None = None
    gain_off_share: float | None = None
    fit_residual: float | None = None
    why: str | None = None
    kind: str | None = None
    departs: bool = False

    @property
    def beyond_one_step(self) -> bool:
        """More than one step off somewhere."""
        return self.max_steps is not None and self.max_steps > 1 + STEP_SLACK

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["computed_by"] = list(self.computed_by)
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}


def _db(signal: float, noise: float) -> float:
    if noise <= 0:
        return math.inf
    return 10 * math.log10(signal / noise) if signal > 0 else -math.inf


def _by_channel(a: np.ndarray, axis: int) -> np.ndarray:
    """``a`` as (positions, channels), float64, on a strided sample of at most about
    `FIT_VALUES` values (at least `FIT_ROWS` positions): only the sample is copied."""
    if a.ndim == 0:
        return a.reshape(1, 1).astype(np.float64)
    axis %= a.ndim
    channels = a.shape[axis]
    before, after = int(np.prod(a.shape[:axis])), int(np.prod(a.shape[axis + 1 :]))
    view = np.ascontiguousarray(a).reshape(before, channels, after)
    stride = max(1, before * after // max(FIT_ROWS, FIT_VALUES // max(channels, 1)))
    view = view[:, :, ::stride] if after >= stride else view[::stride]
    return view.transpose(0, 2, 1).reshape(-1, channels).astype(np.float64)


class _ChannelFit:
    """Per channel, sums for the fit ``runtime = gain * ours + offset`` over the values off
    both ends of the grid (a clipped value follows no line)."""

    def __init__(self, layer: LayerGrid) -> None:
        self.layer = layer
        self.sums: np.ndarray | None = None  # (7, channels): n, x, y, xx, xy, yy, (y - x)^2

    def add(self, ref: np.ndarray, out: np.ndarray) -> None:
        axis = self.layer.channel_axis if self.layer.channel_axis is not None and ref.ndim > 1 else -1
        x, y = _by_channel(ref, axis), _by_channel(out, axis)
        edge = 0.5 * self.layer.scale
        inside = (x > self.layer.low + edge) & (x < self.layer.high - edge)
        inside &= (y > self.layer.low + edge) & (y < self.layer.high - edge)
        x, y, m = np.where(inside, x, 0.0), np.where(inside, y, 0.0), inside.astype(np.float64)
        sums = np.stack([m.sum(0), x.sum(0), y.sum(0), (x * x).sum(0), (x * y).sum(0), (y * y).sum(0),
                         ((y - x) ** 2).sum(0)])  # fmt: skip
        self.sums = sums if self.sums is None or self.sums.shape != sums.shape else self.sums + sums

    def result(self) -> tuple[float, float, float, float] | None:
        """(median gain, median offset, share of channels whose gain is off 1 by over 1 %,
        share of the difference the fit leaves), or None when no channel has two values."""
        if self.sums is None:
            return None
        n, sx, sy, sxx, sxy, syy, sdd = self.sums
        ok = n >= 2
        n, sx, sy, sxx, sxy, syy = (v[ok] for v in (n, sx, sy, sxx, sxy, syy))
        if not n.size:
            return None
        vxx, vxy, vyy = sxx - sx**2 / n, sxy - sx * sy / n, syy - sy**2 / n
        spread = vxx > 0
        gain = np.where(spread, vxy / np.where(spread, vxx, 1.0), 1.0)
        offset = (sy - gain * sx) / n
        residual = np.where(spread, vyy - vxy**2 / np.where(spread, vxx, 1.0), vyy)
        diff = float(sdd[ok].sum())
        share = float(np.clip(residual, 0, None).sum()) / diff if diff > 0 else 0.0
        return (
            float(np.median(gain)),
            float(np.median(offset)),
            float(np.mean(np.abs(gain - 1) > 0.01)),
            share,
        )


class LayerAccumulator:
    """Sums over batches for one layer, so that no batch is held after it is compared."""

    def __init__(self, layer: LayerGrid, tensor: str | None) -> None:
        self.layer, self.tensor = layer, tensor
        self.n = 0
        self.max_abs = 0.0
        self.over = self.one = 0
        self.s_rr = self.s_oo = self.s_ro = self.s_dd = 0.0
        self.f_signal = self.f_noise = 0.0
        self.fit = _ChannelFit(layer)
        self.shape_error: str | None = None

    def add(
        self, reference: np.ndarray, runtime: np.ndarray | None, floating: np.ndarray | None = None
    ) -> None:
        ref = np.asarray(reference, dtype=np.float32)  # values on grids: float32 holds their steps exactly
        if floating is not None and np.size(floating) == ref.size:
            flt = np.asarray(floating, dtype=np.float32).ravel()
            noise = ref.ravel() - flt
            self.f_signal += float(np.dot(flt, flt))
            self.f_noise += float(np.dot(noise, noise))
        if runtime is None:
            return
        if np.size(runtime) != ref.size:
            self.shape_error = f"shape {list(np.shape(runtime))} against ours {list(ref.shape)}"
            return
        out = np.asarray(runtime, dtype=np.float32).reshape(ref.shape)
        diff = out - ref
        size = np.abs(diff)
        scale = self.layer.scale
        over = int(np.count_nonzero(size > (1 + STEP_SLACK) * scale))
        self.n += ref.size
        self.max_abs = max(self.max_abs, float(size.max()) / scale if size.size else 0.0)
        self.over += over
        self.one += int(np.count_nonzero(size > 0.5 * scale)) - over
        flat_ref, flat_out, flat_diff = ref.ravel(), out.ravel(), diff.ravel()
        self.s_rr += float(np.dot(flat_ref, flat_ref))
        self.s_oo += float(np.dot(flat_out, flat_out))
        self.s_ro += float(np.dot(flat_ref, flat_out))
        self.s_dd += float(np.dot(flat_diff, flat_diff))
        if over:  # the fit explains departures; a batch within one step has none to explain
            self.fit.add(ref, out)

    def result(self) -> LayerParity:
        layer = self.layer
        row = LayerParity(layer.name, layer.layer_type, layer.computed_by, layer.scale, self.tensor)
        if self.f_signal or self.f_noise:
            row.float_sqnr_db = _db(self.f_signal, self.f_noise)
        if self.tensor is None or self.shape_error or not self.n:
            row.why = (
                f"the runtime's tensor has another {self.shape_error}" if self.shape_error
                else "no tensor of the runtime holds this layer's grid: the runtime fused it into another op"
            )  # fmt: skip
            return row
        n = self.n
        row.values, row.max_steps = n, self.max_abs
        row.over_one_step, row.one_step = self.over / n, self.one / n
        norms = math.sqrt(self.s_rr * self.s_oo)
        row.cosine = min(1.0, self.s_ro / norms) if norms > 0 else (1.0 if self.s_dd == 0 else 0.0)
        row.sqnr_db = _db(self.s_rr, self.s_dd)
        fit = self.fit.result()
        if fit is not None:
            row.gain, offset, row.gain_off_share, row.fit_residual = fit
            row.offset_steps = offset / layer.scale
        return row


@dataclass
class LayerTable:
    """The per-layer parity of one export: one row per quantized layer, in topological order.

    Attributes:
        rows: one `LayerParity` per layer.
        runtime: what ran the file with its tensors exposed (it may differ from the
            runtime of the output parity: TFLite without its XNNPACK delegate).
        notes: what to know about the comparison.
    """

    rows: list[LayerParity]
    runtime: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def first_departure(self) -> LayerParity | None:
        """The first layer, in topological order, more than one step off by a reason of its
        own (`LayerParity.departs`)."""
        return next((row for row in self.rows if row.departs), None)

    @property
    def first_beyond_one_step(self) -> LayerParity | None:
        """The first layer, in topological order, more than one step off for any reason."""
        return next((row for row in self.rows if row.beyond_one_step), None)

    def to_dict(self) -> dict[str, Any]:
        first = self.first_departure
        return {
            "runtime": self.runtime,
            "notes": list(self.notes),
            "first_departure": None if first is None else first.layer,
            "first_beyond_one_step": None if (beyond := self.first_beyond_one_step) is None else beyond.layer,
            "rows": [row.to_dict() for row in self.rows],
        }


def explain(accumulators: Sequence[LayerAccumulator]) -> LayerTable:
    """The rows of ``accumulators`` (in topological order), each with why it differs when
    the numbers tell (``kind``: `KINDS`):

    - ``requantization``: one step off and never more: a tie rounded the other way after
      the runtime's integer arithmetic;
    - ``mismatch`` / ``offset``: a difference that ``gain * ours + offset`` explains per
      channel: a weight or scale (gain off 1), or a zero point or a bias (offset);
    - ``otherwise``: more than one step off where its inputs are equal, or on
      `OWN_FACTOR` times more values than its inputs differ on: the runtime computes it
      otherwise;
    - ``carried`` / ``grown``: more than one step off where its inputs already differ, on
      a few values (under `CARRIED_SHARE`) or more: their differences passed on.

    A layer departs for the first three of those (`DEPARTING`).
    """
    rows: dict[str, LayerParity] = {}
    for acc in accumulators:
        row = acc.result()
        if acc.tensor is None or acc.shape_error:
            row.kind = "fused" if acc.tensor is None else None
        elif row.max_steps is not None and row.max_steps > 0.5:
            inputs = [rows[n] for n in acc.layer.inputs if n in rows and (rows[n].max_steps or 0) > 0.5]
            row.kind, row.why = _why(row, inputs)
            row.departs = row.beyond_one_step and row.kind in DEPARTING
        rows[row.layer] = row
    return LayerTable(list(rows.values()))


def _why(row: LayerParity, inputs: Sequence[LayerParity]) -> tuple[str, str]:
    """The reason of a row off by half a step or more, given its ``inputs`` that differ (`explain`)."""
    chain = " -> ".join(row.computed_by)
    if not row.beyond_one_step:
        return "requantization", (
            f"the runtime's own requantization: {100 * row.one_step:.2g} % of values one step off "
            "(a tie rounded the other way after integer arithmetic)"
        )
    shared = max((r.one_step + r.over_one_step for r in inputs), default=0.0)
    if inputs and row.over_one_step <= max(CARRIED_SHARE, OWN_FACTOR * shared):
        # its inputs differ about as often: on a small tensor (an SE block's pooled vector)
        # their differences fit a line by chance, which names no weight or bias
        return _passed_on(row, inputs)
    fitted = row.fit_residual is not None and row.fit_residual < 0.25
    if fitted and row.gain is not None and (row.gain_off_share or 0) > 0:
        return "mismatch", (
            f"a weight or scale mismatch: the runtime's tensor is {row.gain:.3f} x ours (median over channels; "
            f"{100 * (row.gain_off_share or 0):.0f} % of channels off 1), computed by {chain}"
        )
    if fitted and row.offset_steps is not None and abs(row.offset_steps) >= 0.5:
        return (
            "offset",
            f"a constant offset of {row.offset_steps:+.2f} steps (a zero point or a bias differs)",
        )
    if not inputs:
        return "otherwise", f"computed otherwise by the runtime, its inputs equal (computed by {chain})"
    return "otherwise", (
        f"computed otherwise by the runtime: {100 * row.over_one_step:.2g} % of values more than one step off, "
        f"where its inputs differ on far fewer: {_inputs_text(inputs)} (computed by {chain})"
    )


def _inputs_text(inputs: Sequence[LayerParity]) -> str:
    return ", ".join(
        f"'{r.layer}' ({r.max_steps or 0:.0f} steps on {100 * (r.one_step + r.over_one_step):.2g} %)"
        for r in inputs
    )


def _passed_on(row: LayerParity, inputs: Sequence[LayerParity]) -> tuple[str, str]:
    """``carried`` or ``grown``: a row whose inputs differ about as often as it does."""
    named = _inputs_text(inputs)
    if row.over_one_step <= CARRIED_SHARE:
        return (
            "carried",
            f"carried over: {100 * row.over_one_step:.2g} % of values more than one step off, from {named}",
        )
    return "grown", f"grown from its inputs' differences: {named}"
