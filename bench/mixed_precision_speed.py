"""PTQ time with and without a mixed-precision budget (50 % of the 8-bit weights memory).

    .venv/bin/python bench/mixed_precision_speed.py     # ResNet-18 shape, 4 x 8x3x224x224

Prints both times and the ratio of the search's extra time to plain PTQ (target <= 2).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import model_compression_toolkit as mct  # noqa: E402
from bench.models import torch_resnet18  # noqa: E402


def main() -> None:
    rng = np.random.default_rng(0)
    model = torch_resnet18()
    batches = [rng.standard_normal((8, 3, 224, 224), dtype=np.float32) for _ in range(4)]
    gen = lambda: iter([[b] for b in batches])  # noqa: E731
    config = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))
    mct.set_log_folder(None)
    ptq = mct.ptq.pytorch_post_training_quantization
    start = time.perf_counter()
    _, info = ptq(model, gen, config)
    plain = time.perf_counter() - start
    budget = mct.core.ResourceUtilization(weights_memory=0.5 * info.memory.weights_quantized_bytes)
    start = time.perf_counter()
    _, mixed_info = ptq(model, gen, budget, config)
    mixed = time.perf_counter() - start
    print(f"PTQ without budget: {plain:.1f} s (8-bit weights {info.memory.weights_quantized_bytes / 2**20:.2f} MiB)")
    print(f"PTQ with 50 % budget: {mixed:.1f} s (weights {mixed_info.memory.weights_quantized_bytes / 2**20:.2f} MiB)")
    print(f"search / plain PTQ: {(mixed - plain) / plain:.2f} (target <= 2)")


if __name__ == "__main__":
    main()
