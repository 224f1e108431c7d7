"""A call's progress on the console: one display per call, from its first step to its last.

    Sequential: statistics   5 batches
    Sequential: thresholds   100%|██████████| 9/9 layers
    Sequential: similarity   100%|██████████| 20/20 samples     (one line, redrawn in place)
    Sequential: done in 3.2 s; to see this call: tensorboard --logdir /tmp/mct_logs/Sequential_<time>
        and open http://localhost:6006/#quantization&run=Sequential_<time>      (all on one line)

The pipeline reports `Progress` events; this observer is the only one that draws them
(with tqdm, on stderr). A step with a known total shows a bar, the others a count. The last
line's URL opens this call's page in the Quantization dashboard (`tensorboard_plugin`) when
TensorBoard is started as printed (its default port).
"""

from __future__ import annotations

import shlex
import sys
import time
import urllib.parse
from pathlib import Path
from typing import IO

from tqdm.auto import tqdm

from model_compression_toolkit.observers.plugin_files import PLUGIN_FILE
from model_compression_toolkit.pipeline.events import NullObserver, Progress

DASHBOARD_URL = "http://localhost:6006/#quantization&run="  # TensorBoard's default port, the plugin's tab


def dashboard_url(call: str) -> str:
    """The URL of one call's page in the Quantization dashboard (``call``: its id, the call
    folder's name when TensorBoard serves that folder)."""
    return DASHBOARD_URL + urllib.parse.quote(call, safe="")


class ConsoleProgress(NullObserver):
    """The progress display of one call named ``name`` (the model's name); every other
    event it ignores (`NullObserver`).

    Args:
        name: what the display is about (the model's name).
        stream: where it is drawn (default: stderr).
    """

    def __init__(self, name: str, stream: IO[str] | None = None) -> None:
        self.name = name
        self.stream = stream
        self.start = time.perf_counter()
        self._bar: tqdm | None = None
        self._step: str | None = None

    def progress(self, progress: Progress) -> None:
        unit = f" {progress.unit}" if progress.unit else "it"
        if self._bar is None:
            self._step = progress.step
            self._bar = tqdm(total=progress.total, desc=self._desc(progress), unit=unit, file=self.stream or sys.stderr,
                             leave=True, dynamic_ncols=True, mininterval=0.2)  # fmt: skip
        bar = self._bar
        if progress.step != self._step:
            bar.refresh()  # the finished step's last count, before the line moves on
            self._step = progress.step
            bar.unit = unit
            bar.set_description_str(self._desc(progress), refresh=False)
            bar.reset(total=progress.total)
        bar.update(progress.done - bar.n)

    def _desc(self, progress: Progress) -> str:
        return f"{self.name}: {progress.step}"

    def close(self, folder: Path | None = None, failed: bool = False) -> None:
        """End the display with one line: how long the call took and how to see its logs."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elapsed = time.perf_counter() - self.start
        line = f"{self.name}: {'failed after' if failed else 'done in'} {elapsed:.1f} s"
        if folder is not None:
            line += f"; to see this call: tensorboard --logdir {shlex.quote(str(folder))}"  # a path with spaces too
            if (folder / PLUGIN_FILE).is_file():
                line += f" and open {dashboard_url(folder.name)}"
        print(line, file=self.stream or sys.stderr, flush=True)
