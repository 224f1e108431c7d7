"""TensorBoard protos built by small pure functions (the writer is in `event_file`).

Pure builders (each checked on its own by the tests):

- `graph_def(graph, attrs, devices)`: one NodeDef per node, for the Graphs dashboard.
- `run_metadata(graph, memory)`: per-node memory, shown with the ``Resources`` tag.
- `histogram_proto(...)` / `histogram_from_values(...)`: right bucket edges, true counts.
- `figure_to_png(fig)`: a matplotlib figure as PNG bytes (matplotlib >= 3.10).
"""

from __future__ import annotations

import functools
import hashlib
import io
import itertools
import math
import struct
import sys
import time
import unicodedata
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

import numpy as np
from tensorboard.compat.proto import (
    attr_value_pb2,
    config_pb2,
    graph_pb2,
    summary_pb2,
    tensor_pb2,
    tensor_shape_pb2,
    types_pb2,
)
from tensorboard.plugins.text import metadata as text_metadata

from model_compression_toolkit.core.graph import Graph
from model_compression_toolkit.pipeline.events import NodeMemory

RESOURCES_TAG = "Resources"
IN_SHORT = "» in short"  # the node panel lists attributes in reverse alphabetical order: this one first
ALLOCATOR = "weights_and_activation"


def device_name(label: str, index: int = 0) -> str:
    """A device name TensorBoard lists and colours: ``/device:<label>:<index>`` (its legend
    shows what follows the prefix every device shares, the index included)."""
    return "/device:" + (str(label).replace(":", "_").replace("/", "_") or "unknown") + f":{int(index)}"


def _array_index(name: str) -> bool:
    """Whether JavaScript orders ``name`` as an array index, before every other object key."""
    return name.isdigit() and name.isascii() and (name == "0" or name[0] != "0") and int(name) < 2**32 - 1


def graph_node_names(graph: Graph) -> dict[str, str]:
    """Node name -> a unique name TensorBoard parses back unchanged.

    ``:`` would be read as an output index and ``^`` as a control edge, and empty
    ``/`` segments break the hierarchy, so those are replaced. A name that is an integer
    (the layers of an ``nn.Sequential``) becomes ``[5]``: TensorBoard keeps nodes in an
    object, which would list such names before all others and so choose device colours
    in their order instead of the graph's.
    """
    names: dict[str, str] = {}
    used: set[str] = set()
    for node in graph.nodes():
        clean = "/".join(p for p in node.name.replace(":", "_").lstrip("^").split("/") if p) or "_"
        clean = "/".join(f"[{p}]" if _array_index(p) else p for p in clean.split("/"))
        candidate = clean
        for k in itertools.count(1):
            if candidate not in used:
                break
            candidate = f"{clean}_{k}"
        used.add(candidate)
        names[node.name] = candidate
    return names


# ---------------------------------------------------------------- attr values
# TensorBoard's graph viewer shows a string attribute as it stands between the quotes of the
# served pbtxt, escapes included: ``after '5'`` showed as ``after \\'5\\'`` and a non-ASCII
# character as octal bytes (``\\342\\211\\245``). Strings are written in the ASCII that
# text_format leaves alone.
_AS_SHOWN = str.maketrans(
    {"'": "`", '"': "`", "\\": "/", "\n": " ", "\r": " ", "\t": " ", "≥": ">=", "≤": "<="}
)


def shown_text(text: str) -> str:
    """``text`` as the node panel can show it: quotes as backticks, a backslash as ``/``, line
    breaks as spaces, accented letters without their accents, other non-ASCII as ``?``."""
    if text.isascii():  # nothing to decompose or replace: the translation alone
        return text.translate(_AS_SHOWN)
    decomposed = unicodedata.normalize("NFKD", text.translate(_AS_SHOWN))
    ascii_only = "".join(c for c in decomposed if not unicodedata.combining(c))
    return ascii_only.encode("ascii", "replace").decode("ascii").translate(_AS_SHOWN)


@functools.lru_cache(maxsize=8192)
def _shown_bytes(text: str) -> bytes:
    """`shown_text` as bytes, once per string: a graph's panels repeat the same few values."""
    return shown_text(text).encode("utf-8")


def set_attr_value(av: attr_value_pb2.AttrValue, value: Any) -> None:
    """Fill the empty ``av`` (a NodeDef's ``attr[key]``) as `attr_value` would, in place: a
    plain str, bool, int or float (most attributes) without building an AttrValue to copy."""
    kind = type(value)
    if kind is str:
        av.s = _shown_bytes(value)
    elif kind is bool:
        av.b = value
    elif kind is int:
        av.i = value
    elif kind is float:
        av.f = value
    else:
        av.CopyFrom(attr_value(value))


def attr_value(value: Any) -> attr_value_pb2.AttrValue:
    """A plain Python value as an AttrValue: str, bool, int, float, or lists of them
    (strings as `shown_text`)."""
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
        return AV(s=shown_text(value).encode("utf-8"))
    if isinstance(value, (list, tuple)) and value:
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return AV(list=LV(i=value))
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return AV(list=LV(f=value))
        if all(isinstance(v, str) for v in value):
            return AV(list=LV(s=[shown_text(v).encode("utf-8") for v in value]))
    return AV(s=shown_text(repr(value)).encode("utf-8"))


def _legend_text(device: str) -> str:
    return "this colour: " + device.removeprefix("/device:").rpartition(":")[0]


def _shape_proto(shape: Sequence[int | None]) -> tensor_shape_pb2.TensorShapeProto:
    try:
        return _shape_proto_cached(tuple(shape))  # the same few shapes, over and over
    except TypeError:  # a dimension that does not hash
        return _new_shape_proto(shape)


@functools.lru_cache(maxsize=4096)
def _shape_proto_cached(shape: tuple) -> tensor_shape_pb2.TensorShapeProto:
    return _new_shape_proto(shape)


def _new_shape_proto(shape: Sequence[int | None]) -> tensor_shape_pb2.TensorShapeProto:
    dims = [tensor_shape_pb2.TensorShapeProto.Dim(size=-1 if d is None else int(d)) for d in shape]
    return tensor_shape_pb2.TensorShapeProto(dim=dims)


# ---------------------------------------------------------------- graph
def graph_def(
    graph: Graph,
    attrs: Mapping[str, Mapping[str, Any]] | None = None,
    devices: Mapping[str, str] | None = None,
    legend: Sequence[tuple[str, str]] = (),
    names: Mapping[str, str] | None = None,
) -> graph_pb2.GraphDef:
    """One NodeDef per node: inputs in order (``src:k`` for output k > 0), op = layer type.

    Args:
        graph: the graph at the stage.
        attrs: node name -> the attributes its panel shows (`graph_view.graph_attrs`).
        devices: node name -> its device (`device_name`; default: its layer type), so
            "Color by device" groups by it.
        legend: (node name, device) of nodes with no edge put first, so that TensorBoard
            meets their devices first and gives them the first palette colours in order.
        names: `graph_node_names` of the graph, where the caller has them already.
    """
    names = graph_node_names(graph) if names is None else names
    proto = graph_pb2.GraphDef()
    add = proto.node.add  # each NodeDef built in place: no copy into the GraphDef
    for name, device in legend:
        set_attr_value(add(name=name, op="legend", device=device).attr[IN_SHORT], _legend_text(device))
    attrs, devices = attrs or {}, devices or {}
    for node in graph.nodes():
        inputs = [
            names[e.src] + (f":{e.src_index}" if e.src_index > 0 else "") for e in graph.in_edges(node.name)
        ]
        device = devices.get(node.name) or device_name(node.layer_type)
        nd = add(name=names[node.name], op=node.layer_type, input=inputs, device=device)
        panel = nd.attr
        for key, value in attrs.get(node.name, {}).items():
            set_attr_value(panel[key], value)
        if node.output_shapes:
            panel["_output_shapes"].list.shape.extend([_shape_proto(s) for s in node.output_shapes])
    return proto


def run_metadata(
    graph: Graph,
    memory: Mapping[str, NodeMemory],
    devices: Mapping[str, str] | None = None,
    start_micros: int | None = None,
    legend: Sequence[tuple[str, str]] = (),
    names: Mapping[str, str] | None = None,
) -> config_pb2.RunMetadata:
    """Per-node memory as step stats, read by the Graphs dashboard under the ``Resources`` tag.

    TensorBoard sums ``total_bytes`` over a node's allocators, so there is one allocator
    whose ``total_bytes`` is weights + activation bytes (``live_bytes``: the weights, which
    stay resident); the activation bytes are in ``output``, whose shapes TensorBoard shows
    (batch 1). TensorBoard overwrites a node's device with its DeviceStepStats device, so
    nodes are grouped by the same device label as in `graph_def`. No compute time is measured,
    so ``all_end_rel_micros`` stays 0 and TensorBoard shows none rather than a made-up one.

    Under this tag TensorBoard colours the devices in the order the step stats list them,
    not the graph's: the ``legend`` nodes (`graph_def`'s, each a device, in palette order)
    come first, with no memory, so a class has the same colour here as in the run graph.
    """
    names = graph_node_names(graph) if names is None else names
    start = int(time.time() * 1e6) if start_micros is None else start_micros
    by_device: dict[str, list] = {device: [name] for name, device in legend}  # a legend node: its name
    for node in graph.nodes():
        device = (devices or {}).get(node.name) or device_name(node.layer_type)
        by_device.setdefault(device, []).append(node)
    proto = config_pb2.RunMetadata()
    add_device = proto.step_stats.dev_stats.add  # built in place: no copies
    for device, members in by_device.items():
        add_stats = add_device(device=device).node_stats.add
        for node in members:
            if isinstance(node, str):
                add_stats(node_name=node, all_start_micros=start)
                continue
            _node_stats(add_stats, node, names[node.name], memory.get(node.name, NodeMemory(0.0, 0.0)), start)
    return proto


def _node_stats(add_stats: Any, node: Any, name: str, mem: NodeMemory, start: int) -> None:
    """A node's memory as `run_metadata` lays it out, added by ``add_stats``."""
    w_bytes, a_bytes = math.ceil(mem.weights_bytes), math.ceil(mem.activation_bytes)
    total = math.ceil(mem.total_bytes)
    stats = add_stats(node_name=name, all_start_micros=start, timeline_label=f"{name} = {node.layer_type}()")
    stats.memory.add(allocator_name=ALLOCATOR, total_bytes=total, peak_bytes=total, live_bytes=w_bytes)
    n_out = max(1, len(node.output_shapes))
    for slot, shape in enumerate(node.output_shapes):
        description = stats.output.add(slot=slot).tensor_description
        description.dtype = types_pb2.DT_FLOAT
        description.shape.CopyFrom(_shape_proto([1, *shape[1:]]))
        allocation = description.allocation_description
        allocation.requested_bytes = math.ceil(a_bytes / n_out)
        allocation.allocator_name = "activation"


# ---------------------------------------------------------------- histograms
MAX_BUCKETS = 256  # buckets written per histogram; TensorBoard's chart redraws them as 30


def histogram_proto(
    counts: np.ndarray,
    edges: np.ndarray,
    count: int | None = None,
    sum: float | None = None,  # noqa: A002 - the proto's field name
    sum_squares: float | None = None,
    min: float | None = None,  # noqa: A002
    max: float | None = None,  # noqa: A002
    max_buckets: int = MAX_BUCKETS,
) -> summary_pb2.HistogramProto:
    """A HistogramProto with RIGHT bucket edges (``bucket_limit[i] = edges[i + 1]``).

    Empty buckets at both ends are dropped (TensorBoard drops them too); counts are kept
    exactly. ``num`` is the number of values (``count``, default the sum of counts), not
    the number of bins. Sums default to bin centres only when not given. More than
    ``max_buckets`` used bins are merged, k adjacent bins at a time, into at most that
    many buckets: every bucket edge is one of ``edges`` and counts stay exact.
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
    limits, buckets = merge_buckets(counts[lo : hi + 1], edges[lo : hi + 2], max_buckets)
    return summary_pb2.HistogramProto(
        min=float(edges[lo] if min is None else min),
        max=float(edges[hi + 1] if max is None else max),
        num=num,
        sum=float(np.dot(counts, centres) if sum is None else sum),
        sum_squares=float(np.dot(counts, centres**2) if sum_squares is None else sum_squares),
        bucket_limit=limits.tolist(),
        bucket=buckets.tolist(),
    )


def merge_buckets(counts: np.ndarray, edges: np.ndarray, max_buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """(right edges, counts) with at most ``max_buckets`` buckets, k adjacent bins summed."""
    k = max(1, math.ceil(counts.size / max(1, max_buckets)))
    if k == 1:
        return edges[1:], counts
    padded = np.zeros(math.ceil(counts.size / k) * k)
    padded[: counts.size] = counts
    limits = edges[k::k]
    if limits.size * k < counts.size:  # the last, partial group ends at the last edge
        limits = np.append(limits, edges[-1])
    return limits, padded.reshape(-1, k).sum(axis=1)


def histogram_from_values(
    values: np.ndarray, bins: int | np.ndarray = 256, value_range: tuple[float, float] | None = None
) -> summary_pb2.HistogramProto:
    """Histogram of the finite values of an array; ``bins`` may be a count or the edges.

    With a count and ``value_range`` the bins are uniform over that range (numpy's fast
    path, and the same edges for every array given the same range). Float32 values are
    binned as they are (no float64 copy); the sums are accumulated in float64.
    """
    flat = finite_values(values)
    if flat.size == 0:
        return summary_pb2.HistogramProto()
    if value_range is None and np.ndim(bins) == 0:
        value_range = (flat.min(), flat.max())
    if value_range is not None:  # float64 bounds: float64 edges, whatever the values' dtype
        value_range = (np.float64(value_range[0]), np.float64(value_range[1]))
    counts, edges = np.histogram(flat, bins=bins, range=value_range)
    return histogram_proto(
        counts,
        edges,
        count=flat.size,
        sum=float(np.sum(flat, dtype=np.float64)),
        sum_squares=float(np.einsum("i,i->", flat, flat, dtype=np.float64)),
        min=float(flat.min()),
        max=float(flat.max()),
    )


def finite_values(values: np.ndarray) -> np.ndarray:
    """The finite values of an array, flat, in its floating dtype (a copy only when some are not)."""
    flat = np.ravel(values)
    if not np.issubdtype(flat.dtype, np.floating):
        flat = flat.astype(np.float64)
    finite = np.isfinite(flat)
    return flat if finite.all() else flat[finite]


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


def canvas_png(canvas: Any) -> bytes:
    """An Agg canvas as drawn so far, as a PNG with a 256-colour palette, not dithered.

    A plot of lines and text has few colours: the palette keeps it unchanged to the eye
    at a third of the bytes of RGB, and every byte written costs checksum time
    (deflated at `PNG_COMPRESSION`).
    """
    return _png(_quantize(_canvas_image(canvas)))


class PaletteCanvas:
    """PNGs (as `canvas_png`) of one canvas redrawn several times, the per-sample plots:
    the palette is chosen on the first image and reused, so every later image only maps
    its colours onto it (a tenth of the time). The first image must show every colour."""

    def __init__(self, canvas: Any) -> None:
        self.canvas = canvas
        self._palette = None

    def png(self) -> bytes:
        image = _canvas_image(self.canvas)
        if self._palette is None:
            self._palette = _quantize(image)
            return _png(self._palette)
        return _png(image.quantize(palette=self._palette, dither=_dither_none()))


def _canvas_image(canvas: Any) -> Any:
    from PIL import Image  # Pillow ships with matplotlib

    width, height = (int(v) for v in canvas.get_width_height(physical=True))
    rgba = Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    return rgba.convert("RGB")


def _dither_none() -> Any:
    from PIL import Image

    return Image.Dither.NONE


def _quantize(image: Any) -> Any:
    from PIL import Image

    return image.quantize(256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)


# zlib level for the pictures' PNGs: 3 deflates a palette plot in half the time of the default
# 6 for a fifth more bytes (the pixels are the same: PNG is lossless)
PNG_COMPRESSION = 3


def _png(image: Any) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="png", compress_level=PNG_COMPRESSION)
    return buf.getvalue()


def png_size(png: bytes) -> tuple[int, int, int]:
    """(height, width, channels) read from a PNG header."""
    if png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR":
        raise ValueError("not a PNG image")
    width, height = struct.unpack(">II", png[16:24])
    channels = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}.get(png[25], 3)
    return height, width, channels


def text_summary_value(tag: str, markdown: str) -> summary_pb2.Summary.Value:
    """A string tensor summary with the text plugin's metadata (the Text dashboard). A
    character UTF-8 cannot hold (a lone surrogate in a model's name) is written as its
    ``\\u`` escape."""
    tensor = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(),
        string_val=[markdown.encode("utf-8", "backslashreplace")],
    )
    meta = text_metadata.create_summary_metadata(display_name=tag, description="")
    return summary_pb2.Summary.Value(tag=tag, metadata=meta, tensor=tensor)


def clean_tag(tag: str) -> str:
    """A tag without control characters (``/`` is kept: TensorBoard groups by it).

    A ``/``-separated part that had to change gets a short hash of the original, so that
    two names never share a tag: ``"a\tb"`` -> ``"a_b-<hash>"``, while ``"a_b"`` stays.
    """
    return "/".join(_clean_part(part) for part in str(tag).split("/")) or "_"


def _clean_part(part: str) -> str:
    clean = "".join(c if c.isprintable() else "_" for c in part)
    if clean == part:
        return part
    return f"{clean}-{hashlib.sha1(part.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"
