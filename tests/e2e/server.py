"""Start and stop the real TensorBoard on a free local port, with bounded waits.

log folder -> `python -m tensorboard.main` on 127.0.0.1:<free port> -> /data/runs answers
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 30.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class TensorBoard:
    """A running TensorBoard: its base URL and its process."""

    url: str
    process: subprocess.Popen
    output: Path

    def get(self, route: str, **params: str) -> bytes:
        """The body of `GET <url><route>?<params>`; raises on an HTTP error."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{route}{query}", timeout=REQUEST_TIMEOUT_S) as response:
            return response.read()

    def json(self, route: str, **params: str) -> Any:
        return json.loads(self.get(route, **params))

    def log_tail(self, chars: int = 3000) -> str:
        return self.output.read_text(errors="replace")[-chars:]


def _command(log_folder: Path, port: int) -> list[str]:
    # --load_fast=false: the pure-Python multiplexer, no Rust data server to find or download.
    return [
        sys.executable, "-m", "tensorboard.main", "--logdir", str(log_folder),
        "--host", "127.0.0.1", "--port", str(port), "--load_fast=false",
    ]  # fmt: skip


def _wait_until_serving(board: TensorBoard, timeout_s: float) -> bool:
    """Poll /data/runs until it answers; False if the process exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if board.process.poll() is not None:
            return False
        with contextlib.suppress(OSError):
            board.json("/data/runs")
            return True
        time.sleep(0.25)
    return False


def stop(process: subprocess.Popen, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """Terminate, then kill if it has not exited within `timeout_s`."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout_s)


@contextlib.contextmanager
def tensorboard(
    log_folder: Path, timeout_s: float = START_TIMEOUT_S, attempts: int = 3
) -> Iterator[TensorBoard]:
    """TensorBoard serving `log_folder` until the block ends; stopped on success and on failure.

    A free port can be taken by someone else before TensorBoard binds it: then it exits,
    and it is started again on another port (at most `attempts` times).
    """
    with tempfile.TemporaryDirectory(prefix="tensorboard_") as tmp:
        output = Path(tmp) / "tensorboard.log"
        for attempt in range(1, attempts + 1):
            port = free_port()
            with output.open("wb") as sink:
                process = subprocess.Popen(
                    _command(Path(log_folder), port), stdout=sink, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )  # fmt: skip
            board = TensorBoard(f"http://127.0.0.1:{port}", process, output)
            try:
                if _wait_until_serving(board, timeout_s):
                    yield board
                    return
                exited = process.poll() is not None
            finally:
                stop(process)
            if not exited or attempt == attempts:
                raise RuntimeError(
                    f"TensorBoard did not answer /data/runs on port {port} within {timeout_s:.0f} s "
                    f"(attempt {attempt}); its output:\n{board.log_tail()}"
                )
