"""The zoo table: for each model of `tests.zoo.models`, PTQ with logging on, and the
layers kept float (unsupported), the output cosine to float and the PTQ time (wall, and
the process's CPU time, which a busy shared machine disturbs less).

    .venv/bin/python bench/zoo.py [--package DIR] [--before DIR] [--only NAME ...] [--json OUT]

``--package DIR`` imports ``model_compression_toolkit`` from DIR (an older checkout); with
``--before DIR`` each model runs with DIR's package and then with this one, one right
after the other, so that both times see the same load on a shared machine. The zoo itself
always comes from this tree. Each run is its own process, so a crash or a hang costs only
its row.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(name: str) -> dict:
    """One model in this process: PTQ with a log folder, then float vs quantized on batch 0."""
    import numpy as np

    import model_compression_toolkit as mct
    from tests.zoo.models import ZOO
    from tests.zoo.outputs import first_output, run_model

    zoo = ZOO[name]
    model, batches = zoo.make(), zoo.batches()
    ptq = {
        "pytorch": mct.ptq.pytorch_post_training_quantization,
        "keras": mct.ptq.keras_post_training_quantization,
    }[zoo.framework]
    row: dict = {"model": name, "family": zoo.family}
    with tempfile.TemporaryDirectory() as folder:
        mct.set_log_folder(folder)
        start, cpu = time.perf_counter(), time.process_time()
        try:
            q_model, info = ptq(model, lambda: iter(batches))
        except Exception as e:  # the table records it
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
            return row
        finally:
            mct.set_log_folder(None)
        row["ptq_s"] = round(time.perf_counter() - start, 2)
        row["ptq_cpu_s"] = round(time.process_time() - cpu, 2)  # all threads: fair on a loaded machine
    row["unsupported"] = len(info.unsupported_layers)
    row["unsupported_types"] = sorted({info.layers[n].layer_type for n in info.unsupported_layers})
    row["float_weights"] = sum(
        1 for layer in info.layers.values() if layer.weights_float_reason and layer.kind != "constant"
    )
    f = first_output(run_model(model, batches[0], zoo.framework)).ravel().astype(np.float64)
    q = first_output(run_model(q_model, batches[0], zoo.framework)).ravel().astype(np.float64)
    row["cosine"] = round(float(f @ q / (np.linalg.norm(f) * np.linalg.norm(q) + 1e-30)), 4)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", type=Path, default=ROOT)
    parser.add_argument("--before", type=Path)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        sys.path.insert(0, str(args.package))
        import model_compression_toolkit  # noqa: F401  (from --package, before this tree's tests)

        sys.path.insert(0, str(ROOT))
        print("ROW " + json.dumps(measure(args.one)), flush=True)
        return
    sys.path.insert(0, str(ROOT))
    from tests.zoo.models import ZOO

    rows = []
    packages = [args.before, args.package] if args.before else [args.package]
    for name in args.only or list(ZOO):
        for package in packages:
            cmd = [sys.executable, __file__, "--one", name, "--package", str(package)]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("ROW ")), None)
            failed = {"model": name, "error": f"exit {proc.returncode}: " + proc.stderr[-300:]}
            row = json.loads(line[4:]) if line else failed
            row["package"] = str(package)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
