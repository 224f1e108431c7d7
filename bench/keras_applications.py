"""Every ``keras.applications`` model with ``weights=None`` through PTQ: does it quantize,
what stays float, how long it takes. Each model in its own process, at the smallest input
size it accepts (32, or 75 / 71 / 331 for the models that need more).

    .venv/bin/python bench/keras_applications.py [--only NAME ...] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIN_SIZE = {"InceptionV3": 75, "InceptionResNetV2": 75, "Xception": 71, "NASNetLarge": 331}


def applications() -> list[str]:
    import keras

    return sorted(
        n for n in dir(keras.applications) if n[0].isupper() and callable(getattr(keras.applications, n))
    )


def measure(name: str) -> dict:
    import keras
    import numpy as np

    import model_compression_toolkit as mct

    size = MIN_SIZE.get(name, 32)
    model = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3), classes=10)
    x = np.random.default_rng(0).uniform(0, 255, (2, size, size, 3)).astype(np.float32)
    config = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))
    start = time.perf_counter()
    q_model, info = mct.ptq.keras_post_training_quantization(model, lambda: [[x]], config)
    seconds = time.perf_counter() - start
    out = np.asarray(q_model(x, training=False))
    return {
        "model": name, "size": size, "params_m": round(model.count_params() / 1e6, 1), "ptq_s": round(seconds, 1),
        "unsupported": sorted({info.layers[n].layer_type for n in info.unsupported_layers}),
        "finite": bool(np.isfinite(out).all()),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.one:
        print("ROW " + json.dumps(measure(args.one)), flush=True)
        return
    rows = []
    for name in args.only or applications():
        cmd = [sys.executable, __file__, "--one", name]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("ROW ")), None)
            row = (
                json.loads(line[4:])
                if line
                else {"model": name, "error": proc.stderr.strip().splitlines()[-1:]}
            )
        except subprocess.TimeoutExpired:
            row = {"model": name, "error": "timeout"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
