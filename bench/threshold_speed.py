"""Activation threshold search: time per activation, the closed form now against the former one.

    OMP_NUM_THREADS=1 .venv/bin/python bench/threshold_speed.py                  # synthetic histograms
    OMP_NUM_THREADS=1 .venv/bin/python bench/threshold_speed.py --source ppocr   # PP-OCRv4 rec's own

Each case is one ``fill_activation_config`` call (the whole search: symmetric, uniform
and the choice between them), run with the histogram error of `calibration.hist_error`
(``after``) and with the former closed form (``before``: the verbatim copy kept by
``tests/core/test_threshold_speedup_equivalence.py``, put in place of ``thresholds._judge``),
in turn, ``--repeats`` times each; the median per case is kept and the ratio is taken
within this one process. Every case must choose the same grid both ways (the script says
so, or fails).

Sources: ``synthetic`` (default) builds 2048-bin histograms of 200 000 values like a
network's (ReLU, batch norm after a ReLU, hard-swish, Gaussian, heavy-tailed, bimodal,
a few outliers); ``ppocr`` captures the 71 activations' statistics and configs of one PTQ
call on PP-OCRv4 rec (16 calibration lines, as `bench/analysis_speed.py`). Each case
runs at 8 bits (the default) and at 16 bits (the analysis's "every activation at 16 bits").
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from model_compression_toolkit.core.calibration import thresholds  # noqa: E402
from model_compression_toolkit.core.calibration.statistics import NodeStatistics, StatisticsCollector  # noqa: E402
from model_compression_toolkit.core.config import QuantizationErrorMethod, QuantizationMethod  # noqa: E402
from model_compression_toolkit.core.quant_config import ActivationQuantConfig  # noqa: E402
from tests.core.test_threshold_speedup_equivalence import reference_histogram_error  # noqa: E402

Case = tuple[str, ActivationQuantConfig, NodeStatistics, float]  # name, config before the search, stats, p


def synthetic(values: int = 200_000) -> list[Case]:
    rng = np.random.default_rng(0)
    g = rng.standard_normal(values)
    outliers = g.copy()
    outliers[:20] *= 40.0
    xs = {
        "relu": np.maximum(g, 0) * 2,
        "relu -> bn (shift)": np.maximum(g, 0) * 2 - 0.3,
        "hard-swish": 3 * g * np.clip(3 * g + 3, 0, 6) / 6,
        "gaussian": g,
        "student-t (3)": rng.standard_t(3, values),
        "bimodal": np.concatenate([g[: values // 2] - 3, g[values // 2 :] + 1]),
        "outliers": outliers,
    }
    cases = []
    for name, x in xs.items():
        collector = StatisticsCollector(2048, None)
        collector.update(x.astype(np.float32))
        cfg = ActivationQuantConfig(
            8, QuantizationMethod.SYMMETRIC, QuantizationErrorMethod.MSE, choose_grid=True
        )
        cases.append((name, cfg, collector.result(), 2.0))
    return cases


def ppocr(lines: int = 16) -> list[Case]:
    """The (config, statistics) of every activation search of one PTQ call on PP-OCRv4 rec."""
    import model_compression_toolkit as mct
    from bench.analysis_speed import calibration, load
    from model_compression_toolkit.pipeline import session

    model, batches = load(), calibration(lines)
    captured: list[Case] = []
    original = session.fill_activation_config

    def capture(cfg, stats, l_p_value=2.0):
        captured.append((f"#{len(captured)}", copy.deepcopy(cfg), stats, l_p_value))
        return original(cfg, stats, l_p_value)

    session.fill_activation_config = capture
    try:
        mct.set_log_folder(None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mct.ptq.pytorch_post_training_quantization(model, lambda: iter([[b] for b in batches]))
    finally:
        session.fill_activation_config = original
    return captured


def _reference_judge(p: float):
    def errors(bins, grid, tolerance=None):  # every candidate evaluated
        return reference_histogram_error(bins[0], bins[1], bins[2], grid, p)

    return errors


def run(case: Case, n_bits: int, before: bool) -> tuple[float, tuple]:
    _, cfg0, stats, p = case
    cfg = copy.deepcopy(cfg0)
    cfg.n_bits = n_bits
    judge = thresholds._judge
    if before:
        thresholds._judge = _reference_judge
    try:
        start = time.perf_counter()
        thresholds.fill_activation_config(cfg, stats, p)
        spent = time.perf_counter() - start
    finally:
        thresholds._judge = judge
    return spent, (cfg.method, cfg.signed, cfg.threshold, cfg.range_min, cfg.range_max)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", choices=["synthetic", "ppocr"], default="synthetic")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--verbose", action="store_true", help="one line per case")
    args = parser.parse_args()
    cases = synthetic() if args.source == "synthetic" else ppocr()
    print(
        f"{len(cases)} activation searches ({args.source}), median of {args.repeats} each, before / after in turn"
    )
    for n_bits in (8, 16):
        totals = {True: 0.0, False: 0.0}
        for case in cases:
            times: dict[bool, list[float]] = {True: [], False: []}
            chosen = {}
            for _ in range(args.repeats):
                for before in (True, False):
                    spent, chosen[before] = run(case, n_bits, before)
                    times[before].append(spent)
            if chosen[True] != chosen[False]:
                sys.exit(f"{case[0]} at {n_bits} bits: before chose {chosen[True]}, after {chosen[False]}")
            med = {b: statistics.median(t) for b, t in times.items()}
            totals[True] += med[True]
            totals[False] += med[False]
            if args.verbose:
                name, method = case[0], chosen[False][0].name.lower()
                print(
                    f"  {n_bits:2d} bits {name:20s} {method:9s} before {med[True] * 1e3:7.1f} ms  "
                    f"after {med[False] * 1e3:6.1f} ms  {med[True] / med[False]:5.1f}x"
                )
        n = len(cases)
        print(
            f"{n_bits:2d} bits: before {totals[True] / n * 1e3:6.1f} ms/activation ({totals[True]:.2f} s), "
            f"after {totals[False] / n * 1e3:5.1f} ms/activation ({totals[False]:.2f} s): "
            f"{totals[True] / totals[False]:.1f}x faster; the same grid chosen in all {n}"
        )


if __name__ == "__main__":
    main()
