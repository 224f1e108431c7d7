"""TensorBoard protos built by small pure functions, and a writer that keeps its promises.

Pure builders (each checked on its own by the tests):

- `graph_def(graph, memory)`: one NodeDef per node, for the Graphs dashboard.
- `run_metadata(graph, memory)`: per-node memory, shown with the ``Resources`` tag.
- `histogram_proto(...)` / `histogram_from_values(...)`: right bucket edges, true counts.
- `figure_to_png(fig)`: a matplotlib figure as PNG bytes (matplotlib >= 3.10).

`RunWriter` writes one TensorBoard run: every event carries the real wall time, `flush`
returns once the bytes are in the file, write errors reach the caller (or the
``on_error`` callback), and `close` always releases the file. It uses tensorboard's own
`EventFileWriter` machinery but never imports TensorFlow, and checksums records with a
vectorised CRC32C instead of tensorboard's per-byte Python loop.
"""

from __future__ import annotations

import functools
import io
import itertools
import math
import os
import socket
import struct
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
from tensorboard.compat.proto import (
    allocation_description_pb2,
    attr_value_pb2,
    config_pb2,
    event_pb2,
    graph_pb2,
    node_def_pb2,
    step_stats_pb2,
    summary_pb2,
    tensor_description_pb2,
    tensor_pb2,
    tensor_shape_pb2,
    types_pb2,
)
from tensorboard.plugins.text import metadata as text_metadata
from tensorboard.summary.writer.event_file_writer import EventFileWriter, _AsyncWriter

from model_compression_toolkit.core.graph import Graph, Node
from model_compression_toolkit.core.quant_config import WeightsQuantConfig
from model_compression_toolkit.core.stage import NodeMemory

RESOURCES_TAG = "Resources"
ALLOCATOR = "weights_and_activation"

# ---------------------------------------------------------------- CRC32C (vectorised)
_POLY = 0x82F63B78
_ROW = 32  # bytes per row in the column-wise pass


def _crc_table() -> np.ndarray:
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = np.where(t & 1, (t >> 1) ^ np.uint32(_POLY), t >> 1).astype(np.uint32)
    return t


_TABLE = _crc_table()
_BASIS = (np.arange(256, dtype=np.uint32)[None, :] << (8 * np.arange(4, dtype=np.uint32))[:, None]).ravel()


def _apply(op: np.ndarray, crc: np.ndarray) -> np.ndarray:
    """Apply a linear 32-bit operator given as 4 byte tables (shape (4, 256))."""
    return op[0][crc & 0xFF] ^ op[1][(crc >> 8) & 0xFF] ^ op[2][(crc >> 16) & 0xFF] ^ op[3][crc >> 24]


@functools.cache
def _zeros_operator(n_bytes: int) -> np.ndarray:
    """The raw CRC register after feeding ``n_bytes`` zero bytes, as a linear operator."""
    if n_bytes > _ROW:
        half = _zeros_operator(n_bytes // 2)
        return _apply(half, _apply(half, _BASIS)).reshape(4, 256)
    state = _BASIS.copy()
    for _ in range(n_bytes):
        state = _TABLE[state & 0xFF] ^ (state >> 8)
    return state.reshape(4, 256)


def _crc32c_aligned(data: np.ndarray) -> np.ndarray:
    """Raw CRC32C (register starting at 0, no final xor) of each row of ``data``.

    ``data`` is (n, P * _ROW) uint8 with P a power of two. Rows are cut into P pieces of
    _ROW bytes, all pieces are checksummed together column by column, then pieces are
    combined pairwise: crc(A || B) = zeros_{|B|}(crc(A)) ^ crc(B).
    """
    n, width = data.shape
    pieces = width // _ROW
    columns = np.ascontiguousarray(data.reshape(n * pieces, _ROW).T)
    crc = np.zeros(n * pieces, dtype=np.uint32)
    for col in columns:
        crc = _TABLE[(crc ^ col) & 0xFF] ^ (crc >> 8)
    crc = crc.reshape(n, pieces)
    span = _ROW
    while crc.shape[1] > 1:
        crc = _apply(_zeros_operator(span), crc[:, 0::2]) ^ crc[:, 1::2]
        span *= 2
    return crc[:, 0]


def masked_crc32c(buffers: Sequence[bytes]) -> list[int]:
    """TFRecord's masked CRC32C of each buffer, computed together with numpy.

    Standard CRC32C starts its register at ~0: for a buffer of at least 4 bytes that is the
    raw CRC of the buffer with its first 4 bytes inverted. Leading zero bytes do not change
    a raw CRC, so buffers are right-aligned in zero-padded rows and grouped by padded size.
    """
    out = [0] * len(buffers)
    groups: dict[int, list[int]] = {}
    for i, buf in enumerate(buffers):
        pieces = max(1, -(-len(buf) // _ROW))
        groups.setdefault(1 << (pieces - 1).bit_length(), []).append(i)
    for pieces, members in groups.items():
        width = pieces * _ROW
        data = np.zeros((len(members), width), dtype=np.uint8)
        for row, i in enumerate(members):
            buf = buffers[i]
            if len(buf) < 4:
                raise ValueError("records shorter than 4 bytes are not supported")
            data[row, width - len(buf) :] = np.frombuffer(buf, dtype=np.uint8)
            data[row, width - len(buf) : width - len(buf) + 4] ^= 0xFF
        crc = _crc32c_aligned(data) ^ np.uint32(0xFFFFFFFF)
        masked = (((crc >> 15) | (crc << 17)) + np.uint32(0xA282EAD8)).astype(np.uint32)
        for row, i in enumerate(members):
            out[i] = int(masked[row])
    return out


def frame_records(payloads: Sequence[bytes]) -> bytes:
    """TFRecord framing: length, masked CRC of length, payload, masked CRC of payload."""
    headers = [struct.pack("<Q", len(p)) for p in payloads]
    crcs = masked_crc32c(headers + list(payloads))
    n = len(payloads)
    parts = []
    for i, p in enumerate(payloads):
        parts += [headers[i], struct.pack("<I", crcs[i]), p, struct.pack("<I", crcs[n + i])]
    return b"".join(parts)


# ---------------------------------------------------------------- names
def device_name(label: str) -> str:
    """A device name TensorBoard lists and colours: ``/device:<label>:0``."""
    return "/device:" + (str(label).replace(":", "_").replace("/", "_") or "unknown") + ":0"


def graph_node_names(graph: Graph) -> dict[str, str]:
    """Node name -> a unique name TensorBoard parses back unchanged.

    ``:`` would be read as an output index and ``^`` as a control edge, and empty
    ``/`` segments break the hierarchy, so those are replaced.
    """
    names: dict[str, str] = {}
    used: set[str] = set()
    for node in graph.nodes():
        clean = "/".join(p for p in node.name.replace(":", "_").lstrip("^").split("/") if p) or "_"
        candidate = clean
        for k in itertools.count(1):
            if candidate not in used:
                break
            candidate = f"{clean}_{k}"
        used.add(candidate)
        names[node.name] = candidate
    return names


# ---------------------------------------------------------------- attr values
def attr_value(value: Any) -> attr_value_pb2.AttrValue:
    """A plain Python value as an AttrValue: str, bool, int, float, or lists of them."""
    value = value.value if isinstance(value, Enum) else value
    value = value.tolist() if isinstance(value, (np.ndarray, np.generic)) else value
    AV, LV = attr_value_pb2.AttrValue, attr_value_pb2.AttrValue.ListValue  # noqa: N806
    if isinstance(value, bool):
        return AV(b=value)
    if isinstance(value, int):
        return AV(i=value)
    if isinstance(value, float):
        return AV(f=value)
    if isinstance(value, str):
        return AV(s=value.encode("utf-8"))
    if isinstance(value, (list, tuple)) and value:
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return AV(list=LV(i=value))
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return AV(list=LV(f=value))
        if all(isinstance(v, str) for v in value):
            return AV(list=LV(s=[v.encode("utf-8") for v in value]))
    return AV(s=repr(value).encode("utf-8"))


def _number(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)


def _summary(values: np.ndarray | float | None) -> str:
    arr = np.asarray(values, dtype=np.float64).ravel()
    if arr.size == 1:
        return f"{arr[0]:.6g}"
    return f"min {arr.min():.6g}, max {arr.max():.6g}, mean {arr.mean():.6g} ({arr.size} channels)"


def _weights_attrs(prefix: str, cfg: WeightsQuantConfig) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        f"{prefix}.{k}": getattr(cfg, k) for k in ("n_bits", "method", "error_method", "per_channel")
    }
    for key in ("threshold", "range_min", "range_max"):
        if getattr(cfg, key) is not None:
            attrs[f"{prefix}.{key}"] = _summary(getattr(cfg, key))
    return attrs


def quant_attrs(node: Node) -> dict[str, Any]:
    """The node's quantization configuration at this stage, as flat attributes."""
    q = node.quant
    attrs: dict[str, Any] = {}
    for wname, cfg in q.weights.items():
        attrs.update(_weights_attrs(f"weights.{wname}", cfg))
    if q.weights_float_reason:
        attrs["weights.float_reason"] = q.weights_float_reason
    act = q.activation
    if act is not None:
        attrs.update(
            {
                "activation.n_bits": act.n_bits,
                "activation.method": act.method,
                "activation.error_method": act.error_method,
            }
        )
        if act.signed is not None:
            attrs["activation.signed"] = act.signed
        for key in ("threshold", "range_min", "range_max"):
            if getattr(act, key) is not None:
                attrs[f"activation.{key}"] = float(getattr(act, key))
        if act.grid is not None:
            attrs["activation.scale"] = _summary(act.grid.scale)
            attrs["activation.zero_point"] = _summary(act.grid.zero_point)
    if q.activation_float_reason:
        attrs["activation.float_reason"] = q.activation_float_reason
    bits = [f"W{c.n_bits}" for c in q.weights.values()] + ([f"A{act.n_bits}"] if act else [])
    attrs["quantization"] = " ".join(bits) if bits else "float"
    return attrs


def _shape_proto(shape: Sequence[int | None]) -> tensor_shape_pb2.TensorShapeProto:
    dims = [tensor_shape_pb2.TensorShapeProto.Dim(size=-1 if d is None else int(d)) for d in shape]
    return tensor_shape_pb2.TensorShapeProto(dim=dims)


# ---------------------------------------------------------------- graph
def graph_def(
    graph: Graph,
    memory: Mapping[str, NodeMemory],
    devices: Mapping[str, str] | None = None,
) -> graph_pb2.GraphDef:
    """One NodeDef per node: inputs in order (``src:k`` for output k > 0), op = layer type.

    Args:
        graph: the graph at the stage.
        memory: bytes per node; shown as ``memory.*`` attributes.
        devices: node name -> label used as the node's device (default: its layer type),
            so "Color by device" groups by it. Wrapped as ``/device:<label>:0``, the form
            TensorBoard lists in its legend and keeps when joining run metadata.
    """
    names = graph_node_names(graph)
    nodes = []
    for node in graph.nodes():
        inputs = [
            names[e.src] + (f":{e.src_index}" if e.src_index > 0 else "") for e in graph.in_edges(node.name)
        ]
        label = (devices or {}).get(node.name, node.layer_type)
        nd = node_def_pb2.NodeDef(
            name=names[node.name], op=node.layer_type, input=inputs, device=device_name(label)
        )
        attrs: dict[str, Any] = {str(k): v for k, v in node.attrs.items()}
        attrs["kind"] = node.kind
        if node.fused_activation:
            attrs["fused_activation"] = node.fused_activation
        if node.origin != [node.name]:
            attrs["origin"] = list(node.origin)
        for wname, w in node.weights.items():
            attrs[f"weights.{wname}.shape"] = list(w.shape)
        attrs.update(quant_attrs(node))
        mem = memory.get(node.name)
        if mem is not None:
            attrs["memory.weights_bytes"] = _number(mem.weights_bytes)
            attrs["memory.activation_bytes"] = _number(mem.activation_bytes)
            attrs["memory.total_bytes"] = _number(mem.total_bytes)
        for key, value in attrs.items():
            nd.attr[key].CopyFrom(attr_value(value))
        if node.output_shapes:
            shapes = [_shape_proto(s) for s in node.output_shapes]
            nd.attr["_output_shapes"].list.shape.extend(shapes)
        nodes.append(nd)
    return graph_pb2.GraphDef(node=nodes)


def run_metadata(
    graph: Graph,
    memory: Mapping[str, NodeMemory],
    devices: Mapping[str, str] | None = None,
    start_micros: int | None = None,
) -> config_pb2.RunMetadata:
    """Per-node memory as step stats, read by the Graphs dashboard under the ``Resources`` tag.

    TensorBoard sums ``total_bytes`` over a node's allocators, so there is one allocator
    whose ``total_bytes`` is weights + activation bytes (``live_bytes``: the weights, which
    stay resident); the activation bytes are in ``output``, whose shapes TensorBoard shows
    (batch 1). TensorBoard overwrites a node's device with its DeviceStepStats device, so
    nodes are grouped by the same device label as in `graph_def`. No compute time is measured, so ``all_end_rel_micros`` stays 0 and
    TensorBoard shows none rather than a made-up one.
    """
    names = graph_node_names(graph)
    start = int(time.time() * 1e6) if start_micros is None else start_micros
    by_device: dict[str, list[step_stats_pb2.NodeExecStats]] = {}
    for node in graph.nodes():
        mem = memory.get(node.name, NodeMemory(0.0, 0.0))
        w_bytes, a_bytes = math.ceil(mem.weights_bytes), math.ceil(mem.activation_bytes)
        total = math.ceil(mem.total_bytes)
        allocs = [
            step_stats_pb2.AllocatorMemoryUsed(
                allocator_name=ALLOCATOR, total_bytes=total, peak_bytes=total, live_bytes=w_bytes
            )
        ]
        n_out = max(1, len(node.output_shapes))
        outputs = [
            step_stats_pb2.NodeOutput(
                slot=slot,
                tensor_description=tensor_description_pb2.TensorDescription(
                    dtype=types_pb2.DT_FLOAT,
                    shape=_shape_proto([1, *shape[1:]]),
                    allocation_description=allocation_description_pb2.AllocationDescription(
                        requested_bytes=math.ceil(a_bytes / n_out), allocator_name="activation"
                    ),
                ),
            )
            for slot, shape in enumerate(node.output_shapes)
        ]
        stats = step_stats_pb2.NodeExecStats(
            node_name=names[node.name],
            all_start_micros=start,
            memory=allocs,
            output=outputs,
            timeline_label=f"{names[node.name]} = {node.layer_type}()",
        )
        label = (devices or {}).get(node.name, node.layer_type)
        by_device.setdefault(device_name(label), []).append(stats)
    dev_stats = [step_stats_pb2.DeviceStepStats(device=d, node_stats=s) for d, s in by_device.items()]
    return config_pb2.RunMetadata(step_stats=step_stats_pb2.StepStats(dev_stats=dev_stats))


# ---------------------------------------------------------------- histograms
def histogram_proto(
    counts: np.ndarray,
    edges: np.ndarray,
    count: int | None = None,
    sum: float | None = None,  # noqa: A002 - the proto's field name
    sum_squares: float | None = None,
    min: float | None = None,  # noqa: A002
    max: float | None = None,  # noqa: A002
) -> summary_pb2.HistogramProto:
    """A HistogramProto with RIGHT bucket edges (``bucket_limit[i] = edges[i + 1]``).

    Empty buckets at both ends are dropped (TensorBoard drops them too); counts are kept
    exactly. ``num`` is the number of values (``count``, default the sum of counts), not
    the number of bins. Sums default to bin centres only when not given.
    """
    counts = np.asarray(counts, dtype=np.float64)
    edges = np.asarray(edges, dtype=np.float64)
    if edges.shape != (counts.size + 1,):
        raise ValueError(f"histogram needs len(edges) == len(counts) + 1; got {edges.size} and {counts.size}")
    nonzero = np.flatnonzero(counts)
    num = float(counts.sum()) if count is None else float(count)
    if nonzero.size == 0:
        return summary_pb2.HistogramProto(num=num, sum=sum or 0.0, sum_squares=sum_squares or 0.0)
    lo, hi = int(nonzero[0]), int(nonzero[-1])
    centres = (edges[:-1] + edges[1:]) / 2
    return summary_pb2.HistogramProto(
        min=float(edges[lo] if min is None else min),
        max=float(edges[hi + 1] if max is None else max),
        num=num,
        sum=float(np.dot(counts, centres) if sum is None else sum),
        sum_squares=float(np.dot(counts, centres**2) if sum_squares is None else sum_squares),
        bucket_limit=edges[lo + 1 : hi + 2].tolist(),
        bucket=counts[lo : hi + 1].tolist(),
    )


def histogram_from_values(values: np.ndarray, bins: int | np.ndarray = 256) -> summary_pb2.HistogramProto:
    """Histogram of the finite values of an array; ``bins`` may be a count or the edges."""
    flat = np.asarray(values, dtype=np.float64).ravel()
    flat = flat[np.isfinite(flat)]
    if flat.size == 0:
        return summary_pb2.HistogramProto()
    counts, edges = np.histogram(flat, bins=bins)
    return histogram_proto(
        counts,
        edges,
        count=flat.size,
        sum=float(flat.sum()),
        sum_squares=float(np.dot(flat, flat)),
        min=float(flat.min()),
        max=float(flat.max()),
    )


# ---------------------------------------------------------------- figures and text
def figure_to_png(fig: Any, dpi: float | None = None) -> bytes:
    """Render a matplotlib figure to PNG bytes with the Agg renderer, then close it."""
    try:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi)
        return buf.getvalue()
    finally:
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is not None:
            pyplot.close(fig)


def png_size(png: bytes) -> tuple[int, int, int]:
    """(height, width, channels) read from a PNG header."""
    if png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR":
        raise ValueError("not a PNG image")
    width, height = struct.unpack(">II", png[16:24])
    channels = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}.get(png[25], 3)
    return height, width, channels


def text_summary_value(tag: str, markdown: str) -> summary_pb2.Summary.Value:
    """A string tensor summary with the text plugin's metadata (the Text dashboard)."""
    tensor = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(),
        string_val=[markdown.encode("utf-8")],
    )
    meta = text_metadata.create_summary_metadata(display_name=tag, description="")
    return summary_pb2.Summary.Value(tag=tag, metadata=meta, tensor=tensor)


def clean_tag(tag: str) -> str:
    """A tag without control characters (``/`` is kept: TensorBoard groups by it)."""
    return "".join(c if c.isprintable() else "_" for c in str(tag)) or "_"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def scalar_series_payloads(series: Mapping[str, np.ndarray], wall_time: float) -> list[bytes]:
    """Serialized Events, one per step, each holding every series that has that step.

    Series ``tag -> values`` are written with step = index (a per-channel statistic:
    step = channel). Events are assembled as bytes with numpy; the wire format is that of
    ``Event(wall_time, step, summary=Summary(value=[Value(tag, simple_value)...]))``.
    """
    items = [(clean_tag(t).encode("utf-8"), np.asarray(v, dtype="<f4").ravel()) for t, v in series.items()]
    items = [(t, v) for t, v in items if v.size]
    if not items:
        return []
    cuts = sorted(
        {
            0,
            *(v.size for _, v in items),
            *(b for b in (128, 16384, 1 << 21) if b < max(v.size for _, v in items)),
        }
    )
    wall = b"\x09" + struct.pack("<d", wall_time)
    payloads: list[bytes] = []
    for s0, s1 in itertools.pairwise(cuts):
        active = [(t, v[s0:s1]) for t, v in items if v.size > s0]
        n = s1 - s0
        blocks: list[np.ndarray] = []
        for tag, vals in active:
            inner = b"\x0a" + _varint(len(tag)) + tag + b"\x15"
            prefix = b"\x0a" + _varint(len(inner) + 4) + inner
            blocks += [
                np.broadcast_to(np.frombuffer(prefix, np.uint8), (n, len(prefix))),
                vals.view(np.uint8).reshape(n, 4),
            ]
        summary = np.concatenate(blocks, axis=1)
        steps = np.arange(s0, s1, dtype=np.int64)
        k = len(_varint(s0))
        varint = np.stack(
            [((steps >> (7 * j)) & 0x7F) | (0x80 if j < k - 1 else 0) for j in range(k)], axis=1
        )
        head = wall + b"\x10"
        tail = b"\x2a" + _varint(summary.shape[1])
        rows = np.concatenate(
            [
                np.broadcast_to(np.frombuffer(head, np.uint8), (n, len(head))),
                varint.astype(np.uint8),
                np.broadcast_to(np.frombuffer(tail, np.uint8), (n, len(tail))),
                summary,
            ],
            axis=1,
        )
        payloads += [r.tobytes() for r in rows]
    return payloads


# ---------------------------------------------------------------- writer
class _RecordFile:
    """The file under tensorboard's async writer: takes framed bytes, never raises.

    An OSError (disk full, file system gone) is kept and reported by `RunWriter.flush`
    in the caller's thread instead of killing the writer thread with a traceback.
    """

    def __init__(self, path: str) -> None:
        self._file = open(path, "wb")  # noqa: SIM115 - closed in close()
        self.error: OSError | None = None

    def _do(self, fn: Callable[..., Any], *args: Any) -> None:
        if self.error is None:
            try:
                fn(*args)
            except OSError as exc:
                self.error = exc

    def write(self, data: bytes) -> None:
        self._do(self._file.write, data)

    def flush(self) -> None:
        self._do(self._file.flush)

    def close(self) -> None:
        if self._file.closed:
            return
        self._do(self._file.flush)
        try:
            self._file.close()
        except OSError as exc:
            self.error = self.error or exc

    @property
    def closed(self) -> bool:
        return self._file.closed


_uid = itertools.count()


class _EventFile(EventFileWriter):
    """tensorboard's EventFileWriter opened without TensorFlow, taking framed records.

    ``EventFileWriter.__init__`` resolves ``tensorboard.compat.tf``, which imports
    TensorFlow when it is installed (seconds); this one opens a plain file instead and
    keeps the inherited async queue, blocking `flush` and `close`.
    """

    def __init__(self, logdir: str, flush_secs: float = 120) -> None:
        os.makedirs(logdir, exist_ok=True)
        self._logdir = logdir
        name = (
            f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_uid)}"
        )
        self._file_name = os.path.join(logdir, name)
        self._general_file_writer = _RecordFile(self._file_name)
        try:
            self._async_writer = _AsyncWriter(self._general_file_writer, 32, flush_secs)
        except BaseException:
            self._general_file_writer.close()
            raise

    def add_event(self, event: event_pb2.Event) -> None:
        self.add_payloads([event.SerializeToString()])

    def add_payloads(self, payloads: Sequence[bytes]) -> None:
        if payloads:
            self._async_writer.write(frame_records(payloads))


class RunWriter:
    """One TensorBoard run: a directory holding one event file.

    Args:
        path: the run directory (created if needed).
        on_error: called with (path, OSError) when writing fails; the writer then stops
            writing and closes its file. Without it the OSError is raised.
    """

    def __init__(self, path: str | Path, on_error: Callable[[Path, OSError], None] | None = None) -> None:
        self.path = Path(path)
        self._on_error = on_error
        self._file: _EventFile | None = None
        self.disabled = False
        self._guard(self._open)

    def _open(self) -> None:
        self._file = _EventFile(str(self.path))
        start = event_pb2.Event(
            wall_time=time.time(),
            file_version="brain.Event:2",
            source_metadata=event_pb2.SourceMetadata(writer="model_compression_toolkit"),
        )
        self._file.add_event(start)
        self.flush()

    def _guard(self, fn: Callable[..., None], *args: Any) -> None:
        if self.disabled:
            return
        try:
            fn(*args)
        except OSError as exc:
            self.disable()
            if self._on_error is None:
                raise
            self._on_error(self.path, exc)

    def disable(self) -> None:
        """Stop writing and release the file; what was written stays readable."""
        self.disabled = True
        self._release()

    def _release(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            try:
                f.close()
            except OSError:
                pass
            finally:
                f._general_file_writer.close()

    # -------------------------------------------------------------- writing
    def _check(self) -> None:
        if self._file is not None and self._file._general_file_writer.error is not None:
            raise self._file._general_file_writer.error

    def add_payloads(self, payloads: Sequence[bytes]) -> None:
        """Serialized Event protos, framed and queued as one write."""

        def _add() -> None:
            if self._file is not None:
                self._check()
                self._file.add_payloads(payloads)

        self._guard(_add)

    def add_events(self, events: Sequence[event_pb2.Event]) -> None:
        if not self.disabled:
            self.add_payloads([e.SerializeToString() for e in events])

    def _summary(self, values: Sequence[summary_pb2.Summary.Value], step: int) -> None:
        if not self.disabled:
            self.add_events(
                [event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=values))]
            )

    def add_graph(self, graph: graph_pb2.GraphDef) -> None:
        if not self.disabled:
            self.add_events([event_pb2.Event(wall_time=time.time(), graph_def=graph.SerializeToString())])

    def add_run_metadata(self, tag: str, metadata: config_pb2.RunMetadata) -> None:
        if not self.disabled:
            tagged = event_pb2.TaggedRunMetadata(
                tag=clean_tag(tag), run_metadata=metadata.SerializeToString()
            )
            self.add_events([event_pb2.Event(wall_time=time.time(), tagged_run_metadata=tagged)])

    def add_histogram(self, tag: str, histogram: summary_pb2.HistogramProto, step: int = 0) -> None:
        self._summary([summary_pb2.Summary.Value(tag=clean_tag(tag), histo=histogram)], step)

    def add_histograms(self, histograms: Mapping[str, summary_pb2.HistogramProto], step: int = 0) -> None:
        """Several histograms at one step, as one event."""
        values = [summary_pb2.Summary.Value(tag=clean_tag(t), histo=h) for t, h in histograms.items()]
        if values:
            self._summary(values, step)

    def add_scalar(self, tag: str, value: float, step: int = 0) -> None:
        self._summary([summary_pb2.Summary.Value(tag=clean_tag(tag), simple_value=float(value))], step)

    def add_scalar_series(self, series: Mapping[str, np.ndarray]) -> None:
        """Scalars ``tag -> values`` with step = index, one event per step (fast)."""
        if not self.disabled:
            self.add_payloads(scalar_series_payloads(series, time.time()))

    def add_text(self, tag: str, markdown: str, step: int = 0) -> None:
        self._summary([text_summary_value(clean_tag(tag), markdown)], step)

    def add_image(self, tag: str, png: bytes, step: int = 0) -> None:
        height, width, channels = png_size(png)
        image = summary_pb2.Summary.Image(
            height=height, width=width, colorspace=channels, encoded_image_string=png
        )
        self._summary([summary_pb2.Summary.Value(tag=clean_tag(tag), image=image)], step)

    def flush(self) -> None:
        """Block until everything added so far is in the file."""

        def _flush() -> None:
            if self._file is not None:
                self._file.flush()
                self._check()

        self._guard(_flush)

    def close(self) -> None:
        """Flush and close; safe to call twice, never leaves the file open."""
        try:
            self.flush()
        finally:
            self._release()


class NullRunWriter(RunWriter):
    """The writer handed out when logging is off: accepts everything, writes nothing."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else Path()
        self._on_error = None
        self._file = None
        self.disabled = True
