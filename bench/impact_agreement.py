"""How far the similarity report's ranking of causes agrees with the exact measure, and
what it costs.

    .venv/bin/python bench/impact_agreement.py [--samples 20]

The report measures a quantizer's output impact (the model output's SQNR with that
quantizer alone switched on) on the first ``impact_samples`` samples (8), and only for the
quantizers whose own error is not negligible, at most ``max_impact_quantizers`` (12). The
exact measure runs every quantizer alone on ``--samples`` samples. For each model this
prints: how many quantizers the report measured, whether every quantizer that the exact
measure finds harmful (under the cause bound, 20 dB) was among them, the rank correlation of the two
orders on the quantizers both measured, the largest difference in dB, and the seconds
each took.

Models: ResNet-18 (`bench.models`, random weights and inputs), plain and with an outlier
channel (``layer2.0.bn1``'s channel 0 300x larger, ``layer2.0.conv2``'s weights for it 300x
smaller: the same float function), and the digits CNN of the tests, plain and with an
outlier channel (`tests.fixtures.damage`).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import model_compression_toolkit as mct  # noqa: E402
from model_compression_toolkit.core.similarity.causes import CAUSE_DB, ImpactProbe, isolate  # noqa: E402
from model_compression_toolkit.pipeline.backends import get_backend  # noqa: E402
from model_compression_toolkit.pipeline.session import produced_graph  # noqa: E402


def spearman(a: list[float], b: list[float]) -> float:
    """The rank correlation of two lists of numbers."""
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1]) if len(a) > 1 else 1.0


def compare(name: str, model, batches: list[np.ndarray], samples: int) -> None:
    gen = lambda: iter([[b] for b in batches])  # noqa: E731
    config = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=True))
    start = time.perf_counter()
    q_model, info = mct.ptq.pytorch_post_training_quantization(model, gen, config)
    report_s = time.perf_counter() - start
    report = info.similarity
    graph, backend = produced_graph(q_model), get_backend(model)
    start = time.perf_counter()
    probe = ImpactProbe(backend, graph, [[np.concatenate(batches)[:samples]]])
    exact = {(q.name, q.kind): probe.output_sqnr_db(isolate(graph, q)) for q in report.quantizers}
    exact_s = time.perf_counter() - start
    measured = [q for q in report.quantizers if q.output_sqnr_db is not None]
    harmful = {key for key, db in exact.items() if db < CAUSE_DB}
    missed = harmful - {(q.name, q.kind) for q in measured}
    keys = [(q.name, q.kind) for q in measured]
    rho = spearman([q.output_sqnr_db for q in measured], [exact[k] for k in keys])
    diff = max((abs(q.output_sqnr_db - exact[(q.name, q.kind)]) for q in measured), default=0.0)
    print(
        f"{name:<26} quantizers {len(report.quantizers):>3}  measured {len(measured):>3}  "
        f"harmful (exact < {CAUSE_DB:g} dB) {len(harmful):>2}  missed {len(missed)}  "
        f"rank correlation {rho:.3f}  largest difference {diff:.1f} dB  "
        f"causes {[f'{q.name} ({q.kind})' for q in report.causes()]}  "
        f"PTQ with the report {report_s:.1f} s, exact impacts alone {exact_s:.1f} s"
    )


def resnet18_outlier(model, scale: float = 300.0):
    """``layer2.0``'s first batch norm's channel 0 ``scale`` times larger, the conv reading it
    ``scale`` times smaller for that channel: the same function, one outlier channel."""
    import torch

    block = model.layer2[0]
    with torch.no_grad():
        block.bn1.weight[0] *= scale
        block.bn1.bias[0] *= scale
        block.conv2.weight[:, 0] /= scale
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=20, help="samples of the exact measure")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    mct.set_log_folder(None)
    from bench.models import torch_resnet18
    from tests.fixtures.damage import outlier_channel
    from tests.fixtures.digits import digits_data
    from tests.fixtures.trained import load_trained

    rng = np.random.default_rng(0)
    images = [rng.standard_normal((8, 3, 224, 224), dtype=np.float32) for _ in range(4)]
    compare("resnet18", torch_resnet18(), images, args.samples)
    compare("resnet18 outlier channel", resnet18_outlier(torch_resnet18()), images, args.samples)
    x = digits_data()[0]
    digits = [x[i * 32 : (i + 1) * 32] for i in range(5)]
    model = load_trained("pytorch")
    compare("digits", model, digits, args.samples)
    compare("digits outlier channel", outlier_channel("pytorch", model, x[:256])[0], digits, args.samples)


if __name__ == "__main__":
    main()
