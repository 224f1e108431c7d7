"""Subprocess side of the robustness tests: ``python -m tests.robustness.worker <mode> ...``.

Modes (each prints one JSON line last on success):

    ptq <log_folder> <ready_file> <go_file>
        builds the digits CNN, writes ``ready_file``, waits for ``go_file`` to exist, then
        quantizes with logging on (two processes started together race on the same folder).
    hang <log_folder> <signal_file>
        quantizes with a data generator that, asked for its 3rd batch (statistics
        collection is under way), writes ``signal_file`` and blocks: the parent kills it.
    big <log_folder>
        quantizes a 1000-layer model with logging on; reports the peak RSS growth.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TQDM_DISABLE", "1")


def _wait_for(path: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)


def _peak_rss_kib() -> int:
    """This process's peak resident set size (VmHWM). Not ``ru_maxrss``: Linux keeps that
    across fork + exec, so a worker started by a large pytest process would report the
    parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def _images():
    """Digits-shaped images without importing scikit-learn (seconds on a loaded machine)."""
    import numpy as np

    return np.random.default_rng(0).random((80, 1, 32, 32), dtype=np.float32)


def ptq(log_folder: str, ready_file: str, go_file: str) -> dict:
    import model_compression_toolkit as mct
    from tests.fixtures.digits import representative_dataset, torch_digits_cnn

    x = _images()
    model = torch_digits_cnn().eval()
    mct.set_log_folder(log_folder)
    config = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))
    Path(ready_file).touch()
    _wait_for(Path(go_file))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, info = mct.ptq.pytorch_post_training_quantization(model, representative_dataset(x, 3, 16), config)
    return {"run": str(info.log_folder), "pid": os.getpid()}


def hang(log_folder: str, signal_file: str) -> dict:
    import model_compression_toolkit as mct
    from tests.fixtures.digits import torch_digits_cnn

    x = _images()
    model = torch_digits_cnn().eval()
    mct.set_log_folder(log_folder)

    def data_gen():
        for i in range(5):
            if i == 2:
                Path(signal_file).write_text(str(os.getpid()))
                time.sleep(600)  # the parent SIGKILLs us here
            yield [x[i * 16 : (i + 1) * 16]]

    mct.ptq.pytorch_post_training_quantization(model, data_gen)
    return {"finished": True}  # not reached when killed


def big(log_folder: str) -> dict:
    import numpy as np
    import torch
    from torch import nn

    import model_compression_toolkit as mct

    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(500):
        layers += [nn.Linear(16, 16), nn.ReLU()]
    model = nn.Sequential(*layers).eval()
    batches = np.random.default_rng(0).standard_normal((2, 8, 16)).astype(np.float32)
    mct.set_log_folder(log_folder)
    base = _peak_rss_kib()
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q_model, info = mct.ptq.pytorch_post_training_quantization(model, lambda: [[b] for b in batches])
    seconds = time.perf_counter() - start
    peak = _peak_rss_kib()
    with torch.no_grad():
        out = q_model(torch.from_numpy(batches[0]))
    return {
        "base_mib": base / 1024,
        "peak_mib": peak / 1024,
        "growth_mib": (peak - base) / 1024,
        "seconds": seconds,
        "layers": len(info.layers),
        "run": str(info.log_folder),
        "finite": bool(torch.isfinite(out).all()),
    }


MODES = {"ptq": ptq, "hang": hang, "big": big}

if __name__ == "__main__":
    result = MODES[sys.argv[1]](*sys.argv[2:])
    print(json.dumps(result), flush=True)
