"""One measurement of `make bench`, in a process of its own: one tool, one model, one mode.

    .venv-bench/bin/python bench/worker.py --tool ours --model resnet18 --mode log \\
        --data /tmp/bench-data --log-dir /tmp/bench-logs/x --out /tmp/x.json [--profile x.txt]

Tools: ``mct`` (Sony MCT 2.6.1 from .venv-bench's site-packages) or ``ours`` (this source
tree). Both are imported as ``model_compression_toolkit``, so which one a process gets is
decided by sys.path here, and checked. Modes:

    off  no log folder
    log  log folder set; no similarity analysis (ours: analyze_similarity=False; MCT: default)
    sim  log folder set and similarity analysis (ours: default; MCT: analyze_similarity=True)

Only the PTQ call is timed. Writes one JSON record (see bench/table.py); on failure the
record carries ``error`` and the process still exits 0 so the driver can go on.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def proc_status_bytes(field: str) -> int | None:
    """``VmHWM`` (peak resident memory) or ``VmRSS`` of this process, in bytes (Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    if field == "VmHWM":
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return None


def import_tool(tool: str, mode: str):
    """The tool's ``model_compression_toolkit``, imported (with what it loads lazily) now."""
    if tool == "ours":
        sys.path.insert(0, str(REPO))  # before site-packages, where MCT 2.6.1 lives
        import model_compression_toolkit as mct
        import model_compression_toolkit.pytorch.backend  # noqa: F401  (loaded at first call)

        if mode != "off":  # what ours loads lazily when a log folder is set
            import PIL.Image  # noqa: F401
            from matplotlib import colormaps  # noqa: F401

            import model_compression_toolkit.observers.tensorboard  # noqa: F401

        if Path(mct.__file__).resolve().parent != REPO / "model_compression_toolkit":
            raise RuntimeError(f"expected our package from {REPO}; got {mct.__file__}")
    else:
        sys.path.append(str(REPO))  # for bench/ and tutorials/ only: site-packages comes first
        import model_compression_toolkit as mct

        if (
            getattr(mct, "__version__", None) != "2.6.1"
            or Path(mct.__file__).resolve().parent == REPO / "model_compression_toolkit"
        ):
            raise RuntimeError(f"expected MCT 2.6.1 from site-packages; got {mct.__file__}")
    return mct


def build_model(name: str, data: Path):
    import torch

    if name == "digits":
        from tests.fixtures.digits import torch_digits_cnn

        model = torch_digits_cnn()
        model.load_state_dict(torch.load(data / "digits_weights.pt", weights_only=True))
        return model.eval()
    if name.startswith("conv_stack_"):
        from bench.models import torch_conv_stack

        return torch_conv_stack(int(name.rsplit("_", 1)[1]))
    from bench.models import torchvision_model

    return torchvision_model(name)


DATA_FILES = {"digits": "digits_rep.npy", "resnet18": "imagenet_rep.npy", "mobilenet_v2": "imagenet_rep.npy"}
BATCH_SIZES = {"digits": 32, "resnet18": 8, "mobilenet_v2": 8}


def representative_batches(model: str, data: Path):
    import numpy as np

    if model.startswith("conv_stack_"):
        x, bs = np.load(data / "small_rep.npy"), 4
    else:
        x, bs = np.load(data / DATA_FILES[model]), BATCH_SIZES[model]
    return [x[i : i + bs] for i in range(0, len(x), bs)]


def run_ptq(mct, tool: str, mode: str, model, gen, log_dir: str | None):
    """The PTQ call as each tool's user would write it for ``mode``."""
    if mode != "off":
        mct.set_log_folder(log_dir)
    if tool == "ours":
        config = (
            None
            if mode == "sim"
            else mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))
        )
        return mct.ptq.pytorch_post_training_quantization(model, gen, core_config=config)
    config = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=(mode == "sim")))
    return mct.ptq.pytorch_post_training_quantization(model, gen, core_config=config)


def accuracy(model, x, y) -> float:
    import numpy as np
    import torch

    outs = []
    with torch.no_grad():
        for i in range(0, len(x), 128):
            out = model(torch.from_numpy(x[i : i + 128]))
            out = out[0] if isinstance(out, list | tuple) else out
            outs.append(out.detach().cpu().numpy())
    return float((np.concatenate(outs).argmax(axis=1) == y).mean() * 100.0)


def measure(args) -> dict:
    record: dict = {"tool": args.tool, "model": args.model, "mode": args.mode, "rep": args.rep}
    t0 = time.perf_counter()
    mct = import_tool(args.tool, args.mode)
    import numpy as np
    import torch

    record["import_seconds"] = time.perf_counter() - t0
    record["tool_version"] = getattr(mct, "__version__", "?")
    record["torch_version"] = torch.__version__
    record["torch_threads"] = torch.get_num_threads()
    data = Path(args.data)
    model = build_model(args.model, data)
    batches = representative_batches(args.model, data)

    def representative_data_gen():
        for b in batches:
            yield [b]

    if args.model == "digits":
        x_test, y_test = np.load(data / "digits_test_x.npy"), np.load(data / "digits_test_y.npy")
        record["float_acc"] = accuracy(model, x_test, y_test)
    record["rss_before_ptq"] = proc_status_bytes("VmRSS")

    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    start = time.perf_counter()
    q_model, _info = run_ptq(mct, args.tool, args.mode, model, representative_data_gen, args.log_dir)
    record["seconds"] = time.perf_counter() - start
    if profiler is not None:
        profiler.disable()
        write_profile(profiler, Path(args.profile))
    record["peak_rss"] = proc_status_bytes("VmHWM")
    if args.model == "digits":
        record["quant_acc"] = accuracy(q_model, x_test, y_test)
    return record


def write_profile(profiler, path: Path) -> None:
    import io
    import pstats

    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs()
    out.write("== by cumulative time ==\n")
    stats.sort_stats("cumulative").print_stats(25)
    out.write("== by own time ==\n")
    stats.sort_stats("tottime").print_stats(15)
    path.write_text(out.getvalue(), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tool", choices=["mct", "ours"], required=True)
    parser.add_argument("--model", required=True, help="digits, resnet18, mobilenet_v2 or conv_stack_<depth>")
    parser.add_argument("--mode", choices=["off", "log", "sim"], required=True)
    parser.add_argument("--data", required=True, help="folder written by compare_mct.py")
    parser.add_argument("--log-dir", help="log folder (modes log and sim)")
    parser.add_argument("--out", required=True, help="JSON record to write")
    parser.add_argument("--rep", type=int, default=0)
    parser.add_argument("--profile", help="write a cProfile summary of the PTQ call here")
    args = parser.parse_args()
    if args.mode != "off" and not args.log_dir:
        parser.error("--log-dir is needed for modes log and sim")
    try:
        record = measure(args)
    except BaseException as exc:  # noqa: BLE001  (the benchmark records the failure and goes on)
        record = {"tool": args.tool, "model": args.model, "mode": args.mode, "rep": args.rep,
                  "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}  # fmt: skip
    Path(args.out).write_text(json.dumps(record, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
