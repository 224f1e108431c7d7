"""`RunWriter`: one TensorBoard run, one event file, written as tensorboard's writer frames it.

Each event is a TFRecord, ``length (uint64) | masked crc of length | data | masked crc of
data``, the bytes tensorboard's ``RecordWriter`` writes (`frame_record`), with two
differences from tensorboard's ``EventFileWriter``:

- the file is opened with plain ``open`` instead of ``tensorboard.compat.tf.io.gfile``,
  which would import TensorFlow (seconds) whenever it is installed, even on the PyTorch
  path;
- the CRC32C checksums come from ``google-crc32c`` (C, the CPU's CRC32 instruction)
  instead of tensorboard's pure-Python one, which takes about 0.28 s per MiB: a ResNet-18
  PTQ call logs about 2 MiB.

Records are written by the calling thread into a buffered file: there is no writer thread
to leak, to outlive an interrupt, or to swallow an error. Promises: every event carries
the real wall time; `flush` returns once the bytes are in the file; a write error reaches
the caller (or the ``on_error`` callback); `close` always releases the file.

`NullRunWriter` is the writer of a call that writes nothing: the same methods, no file.
"""

from __future__ import annotations

import itertools
import math
import os
import socket
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import google_crc32c
import numpy as np
from tensorboard.compat.proto import (
    config_pb2,
    event_pb2,
    graph_pb2,
    summary_pb2,
    tensor_pb2,
    tensor_shape_pb2,
    types_pb2,
)
from tensorboard.plugins.graph.metadata import PLUGIN_NAME_RUN_METADATA_WITH_GRAPH as GRAPH_WITH_RUN_METADATA
from tensorboard.plugins.histogram import metadata as histogram_metadata
from tensorboard.plugins.image import metadata as image_metadata

from model_compression_toolkit.observers.protos import clean_tag, png_size, text_summary_value

_uid = itertools.count()


def masked_crc32c(data: bytes) -> int:
    """The CRC32C of ``data``, masked as TFRecord files store it (the same value as
    ``tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c``)."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame_record(data: bytes) -> bytes:
    """``data`` as one TFRecord: the bytes tensorboard's ``RecordWriter.write(data)`` writes."""
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data))


def scalar_series_events(series: Mapping[str, np.ndarray], wall_time: float) -> list[event_pb2.Event]:
    """Series ``tag -> values`` with step = index, one Event per step holding every tag that has it.

    A per-channel statistic of many layers becomes as many events as the widest layer has
    channels, not one event per value.
    """
    lists = [(clean_tag(t), np.asarray(v, dtype=np.float64).ravel().tolist()) for t, v in series.items()]
    longest = max((len(v) for _, v in lists), default=0)
    events = []
    for step in range(longest):
        values = [
            summary_pb2.Summary.Value(tag=t, simple_value=v[step])
            for t, v in lists
            if step < len(v) and math.isfinite(v[step])
        ]
        events.append(event_pb2.Event(wall_time=wall_time, step=step, summary=summary_pb2.Summary(value=values)))
    return events


def _display(tag: str, names: Mapping[str, str] | None, plugin: Any) -> summary_pb2.SummaryMetadata | None:
    """The metadata giving a card its title (TensorBoard shows it above the tag), from the
    plugin's own metadata builder, so every reader knows which dashboard it is for."""
    name = (names or {}).get(tag)
    return plugin.create_summary_metadata(display_name=name, description="") if name else None


def _event_file_name() -> str:
    """A name no other writer, of this process or another, uses: time, host, pid, a counter."""
    return f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_uid)}"


class RunWriter:
    """One TensorBoard run: a directory holding one event file.

    Args:
        path: the run directory (created if needed).
        on_error: called with (path, OSError) when writing fails; the writer then stops
            writing and closes its file. Without it the OSError is raised.
        root: a folder that must already exist: only the folders between it and ``path``
            are created, so a call folder deleted mid-run fails the write (FileNotFoundError)
            instead of being created again.
    """

    def __init__(
        self,
        path: str | Path,
        on_error: Callable[[Path, OSError], None] | None = None,
        root: str | Path | None = None,
    ) -> None:
        self.path = Path(path)
        self._root = Path(root) if root is not None else None
        self._on_error = on_error
        self._file: IO[bytes] | None = None
        self.disabled = False
        try:
            self._guard(self._open)
        except BaseException:  # an interrupt while the file opens: release it before it is raised
            self._release()
            raise

    def _open(self) -> None:
        if self._root is None:
            os.makedirs(self.path, exist_ok=True)
        else:
            folder = self._root
            for part in self.path.relative_to(self._root).parts:
                folder = folder / part
                try:
                    os.mkdir(folder)
                except FileExistsError:
                    pass
        self._file = open(self.path / _event_file_name(), "wb")  # noqa: SIM115 - closed in _release()
        start = event_pb2.Event(
            wall_time=time.time(),
            file_version="brain.Event:2",
            source_metadata=event_pb2.SourceMetadata(writer="model_compression_toolkit"),
        )
        self._write(frame_record(start.SerializeToString()))
        self._file.flush()

    def _write(self, data: bytes) -> None:
        self._file.write(data)

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

    # -------------------------------------------------------------- writing
    def add_events(self, events: Sequence[event_pb2.Event]) -> None:
        def _add() -> None:
            if self._file is not None:
                self._write(b"".join(frame_record(e.SerializeToString()) for e in events))

        self._guard(_add)

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
            tagged = event_pb2.TaggedRunMetadata(tag=clean_tag(tag), run_metadata=metadata.SerializeToString())
            self.add_events([event_pb2.Event(wall_time=time.time(), tagged_run_metadata=tagged)])

    def add_tagged_graph(self, tag: str, graph: graph_pb2.GraphDef) -> None:
        """A second graph in this run, chosen by ``tag`` in the Graphs dashboard's Tag menu
        (TensorBoard's ``graph_run_metadata_graph`` summary: a RunMetadata holding it)."""
        if self.disabled:
            return
        metadata = config_pb2.RunMetadata()
        metadata.function_graphs.add().pre_optimization_graph.CopyFrom(graph)
        plugin = summary_pb2.SummaryMetadata.PluginData(plugin_name=GRAPH_WITH_RUN_METADATA, content=b"1")
        tensor = tensor_pb2.TensorProto(
            dtype=types_pb2.DT_STRING, string_val=[metadata.SerializeToString()],
            tensor_shape=tensor_shape_pb2.TensorShapeProto(),
        )  # fmt: skip
        value = summary_pb2.Summary.Value(
            tag=clean_tag(tag), tensor=tensor, metadata=summary_pb2.SummaryMetadata(plugin_data=plugin)
        )
        self._summary([value], 0)

    def add_histogram(self, tag: str, histogram: summary_pb2.HistogramProto, step: int = 0) -> None:
        self._summary([summary_pb2.Summary.Value(tag=clean_tag(tag), histo=histogram)], step)

    def add_histograms(
        self,
        histograms: Mapping[str, summary_pb2.HistogramProto],
        step: int = 0,
        display_names: Mapping[str, str] | None = None,
    ) -> None:
        """Several histograms at one step, as one event; ``display_names``: the card titles."""
        values = [
            summary_pb2.Summary.Value(tag=clean_tag(t), histo=h, metadata=_display(t, display_names, histogram_metadata))
            for t, h in histograms.items()
        ]
        if values:
            self._summary(values, step)

    def add_histogram_pairs(
        self, pairs: Mapping[str, tuple], titles: Mapping[str, str] | None = None
    ) -> None:
        """Each (float, quantized) pair of histograms under one tag, float at step 0 and
        quantized at step 1: TensorBoard's overlay mode draws the two in one card."""
        for step in (0, 1):
            self.add_histograms({tag: pair[step] for tag, pair in pairs.items()}, step, titles if step == 0 else None)

    def add_scalar(self, tag: str, value: float, step: int = 0) -> None:
        self._summary([summary_pb2.Summary.Value(tag=clean_tag(tag), simple_value=float(value))], step)

    def add_scalar_series(self, series: Mapping[str, np.ndarray]) -> None:
        """Scalars ``tag -> values`` with step = index (non-finite values are left out)."""
        if not self.disabled:
            self.add_events(scalar_series_events(series, time.time()))

    def add_text(self, tag: str, markdown: str, step: int = 0) -> None:
        self._summary([text_summary_value(clean_tag(tag), markdown)], step)

    def add_image(self, tag: str, png: bytes, step: int = 0, display_name: str | None = None) -> None:
        height, width, channels = png_size(png)
        image = summary_pb2.Summary.Image(height=height, width=width, colorspace=channels, encoded_image_string=png)
        meta = _display(tag, {tag: display_name} if display_name else None, image_metadata)
        self._summary([summary_pb2.Summary.Value(tag=clean_tag(tag), image=image, metadata=meta)], step)

    def flush(self) -> None:
        """Return once everything added so far is in the file."""

        def _flush() -> None:
            if self._file is not None:
                self._file.flush()

        self._guard(_flush)

    def close(self) -> None:
        """Flush and close; safe to call twice, never leaves the file open."""
        try:
            self.flush()
        finally:
            self._release()


class NullRunWriter:
    """The writer handed out when nothing is written: the methods of `RunWriter`, no file."""

    disabled = True

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else Path()

    def _nothing(self, *args: Any, **kwargs: Any) -> None:
        return None

    add_events = add_graph = add_tagged_graph = add_run_metadata = add_histogram = add_histograms = _nothing
    add_histogram_pairs = _nothing
    add_scalar = add_scalar_series = add_text = add_image = flush = close = disable = _nothing
