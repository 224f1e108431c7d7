"""`RunWriter`: one TensorBoard run, written with tensorboard's own event writer.

Records are written by tensorboard's asynchronous queue, as ``EventFileWriter`` does, in
the framing of its ``RecordWriter``, with two differences:

- the file is opened with plain ``open`` instead of ``tensorboard.compat.tf.io.gfile``,
  which would import TensorFlow (seconds) whenever it is installed, even on the PyTorch
  path;
- the records' CRC32C checksums come from ``google-crc32c`` (C, the CPU's CRC32
  instruction) instead of tensorboard's pure-Python one, which takes about 0.28 s per MiB
  and holds the GIL meanwhile: a ResNet-18 PTQ call logs about 2 MiB.

Promises: every event carries the real wall time; `flush` returns once the bytes are in
the file; a write error reaches the caller (or the ``on_error`` callback) instead of
dying in the writer thread; `close` always releases the file.
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
from typing import Any

import google_crc32c
import numpy as np
from tensorboard.compat.proto import config_pb2, event_pb2, graph_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import _AsyncWriter

from model_compression_toolkit.observers.protos import clean_tag, png_size, text_summary_value

_uid = itertools.count()


class _File:
    """The file under the writer thread: an OSError is kept, not raised in that thread."""

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


def masked_crc32c(data: bytes) -> int:
    """The CRC32C of ``data``, masked as TFRecord files store it (the same value as
    ``tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c``)."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class _Records:
    """TFRecord framing, as tensorboard's ``RecordWriter`` writes it (the same bytes), with
    the C checksum: ``length (uint64) | masked crc of length | data | masked crc of data``."""

    def __init__(self, file: _File) -> None:
        self.file = file

    def write(self, data: bytes) -> None:
        header = struct.pack("<Q", len(data))
        crcs = struct.pack("<I", masked_crc32c(header)), struct.pack("<I", masked_crc32c(data))
        self.file.write(header + crcs[0] + data + crcs[1])

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class _EventFile:
    """TFRecord framing (`_Records`) behind tensorboard's async queue, over a plain file with a
    unique name."""

    def __init__(self, logdir: str, flush_secs: float = 120) -> None:
        os.makedirs(logdir, exist_ok=True)
        host, pid = socket.gethostname(), os.getpid()
        name = f"events.out.tfevents.{int(time.time()):010d}.{host}.{pid}.{next(_uid)}"
        self.file = _File(os.path.join(logdir, name))
        try:
            self._queue = _AsyncWriter(_Records(self.file), 64, flush_secs)
        except BaseException:
            self.file.close()
            raise

    def add(self, events: Sequence[event_pb2.Event]) -> None:
        for event in events:
            self._queue.write(event.SerializeToString())

    def flush(self) -> None:
        self._queue.flush()

    def close(self) -> None:
        try:
            self._queue.close()
        finally:
            self.file.close()


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
        self._file.add([start])
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

    def _check(self) -> None:
        if self._file is not None and self._file.file.error is not None:
            raise self._file.file.error

    # -------------------------------------------------------------- writing
    def add_events(self, events: Sequence[event_pb2.Event]) -> None:
        def _add() -> None:
            if self._file is not None:
                self._check()
                self._file.add(events)

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
        """Scalars ``tag -> values`` with step = index (non-finite values are left out)."""
        if not self.disabled:
            self.add_events(scalar_series_events(series, time.time()))

    def add_text(self, tag: str, markdown: str, step: int = 0) -> None:
        self._summary([text_summary_value(clean_tag(tag), markdown)], step)

    def add_image(self, tag: str, png: bytes, step: int = 0) -> None:
        height, width, channels = png_size(png)
        image = summary_pb2.Summary.Image(height=height, width=width, colorspace=channels, encoded_image_string=png)
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
