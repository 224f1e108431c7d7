"""What the two ONNX writers share (`pytorch.export` through torch.export, and
`pytorch.traced_export` through the TorchScript exporter): the namespace of this library's
ops, the integer ranges, the inputs' names, and keeping the exporters' console output away."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout

import numpy as np

from model_compression_toolkit.core.graph import Graph

NAMESPACE = "model_compression_toolkit"


def integer_range(dtype: str) -> tuple[int, int]:
    """The smallest and largest value of an integer type (``"int8"`` -> -128, 127)."""
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def input_names(graph: Graph) -> list[str]:
    """The ONNX inputs' names: the model's own argument names."""
    return [str((graph.node(n).payload or {}).get("target") or n) for n in graph.inputs]


def first_line(err: BaseException) -> str:
    """An exporter's error in one line: its type and the first line of its message."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return f"{type(err).__name__}: {lines[0][:300] if lines else ''}"


@contextmanager
def quiet_onnx_logging() -> Iterator[None]:
    """Keeps torch.onnx's progress lines (``[torch.onnx] ... ✅``) off the user's console, and
    torch.export's print of a whole traced graph when it meets a data-dependent branch (the
    error it raises says what failed, and a fallback follows)."""
    with open(os.devnull, "w") as sink, redirect_stdout(sink), redirect_stderr(sink):
        yield
