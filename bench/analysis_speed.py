"""PTQ with the default analysis against one float pass, on PP-OCRv4 rec (626 layers).

    .venv/bin/python bench/analysis_speed.py                 # the zoo case's 16 lines, then 128
    .venv/bin/python bench/analysis_speed.py --lines 16 64 --repeats 3 --profile 25
    PSORT=tottime .venv/bin/python bench/analysis_speed.py --lines 16 --repeats 0 --profile 40
    .venv/bin/python bench/analysis_speed.py --lines 16 --qc weights_compensated_rounding=true

In one process, for each calibration size, the functions take turns (so that a machine
loaded by other work slows them alike) and the median of ``--repeats`` runs is kept:

- ``float``: one float pass of the model over the calibration data (``torch.no_grad``);
- ``off``: PTQ with no log folder (no analysis);
- ``analysis``: PTQ with a log folder and the default `DebugConfig` (the similarity
  analysis: comparison, per-quantizer impacts, suggested fix; TensorBoard files written).

The ratios to the float pass are what issue 30 sets its target on (the analysis call
under 10 float passes). The last analysis call of each size is timed phase by phase (the
functions of `PHASES` wrapped with timers: inclusive seconds, and the model runs, model
builds, activation threshold searches and graph copies each phase makes, which do not
depend on the machine's load), and ``--profile N`` runs it once more under cProfile and
prints the top ``N`` functions by cumulative time (``PSORT=tottime``: by their own time).
``--qc NAME=VALUE`` (repeatable) changes a ``QuantizationConfig`` field of every PTQ call
(values as in bench/peers.py): a candidate default measured on this bar.

The model is the zoo's (`tests.zoo.real.cases`): the ONNX file of the rapidocr-onnxruntime
wheel converted with onnx2torch; the lines are rendered by `tests.zoo.real.data` (seed 10,
as the zoo case's calibration).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import model_compression_toolkit as mct  # noqa: E402

BATCH = 8  # the zoo case's batch size
QC: dict[str, object] = {}  # QuantizationConfig fields changed by --qc

# phase -> where the function is looked up when called (module or class, attribute)
PHASES = [
    ("read the model (trace, propagate, self-check)", "model_compression_toolkit.pytorch.reader", "read"),
    ("  propagate shapes", "model_compression_toolkit.pytorch.reader", "propagate"),
    ("  self-check", "model_compression_toolkit.pytorch.reader", "check_read"),
    ("statistics pass (+ float reference)", "model_compression_toolkit.pipeline.session:Session", "_collect"),
    ("threshold selection", "model_compression_toolkit.pipeline.session:Session", "select_thresholds"),
    ("build the quantized model", "model_compression_toolkit.pipeline.session:Session", "build"),
    ("analysis, all", "model_compression_toolkit.pipeline.session", "analyze"),
    ("  per-quantizer impacts", "model_compression_toolkit.core.similarity.analysis", "measure_impacts"),
    ("  suggested fix (its trials)", "model_compression_toolkit.core.similarity.analysis", "suggest_fix"),
    (
        "log writing (observer)",
        "model_compression_toolkit.observers.tensorboard:TensorBoardObserver",
        "stage_finished",
    ),
]
FORWARD = ("model_compression_toolkit.pytorch.backend:PytorchBackend", "forward")
# counted in the innermost phase, as the model runs are: the work that does not depend on
# the machine's load (model builds, activation threshold searches, graph copies)
COUNTED = [
    ("builds", "model_compression_toolkit.pytorch.backend:PytorchBackend", "build"),
    ("searches", "model_compression_toolkit.core.calibration.thresholds", "fill_activation_config"),
    ("copies", "model_compression_toolkit.core.graph:Graph", "copy"),
]


class Phases:
    """Wall time of each phase of `PHASES` (inclusive) and of the model runs inside each
    (innermost phase), measured by wrapping the functions for the length of a ``with``."""

    def __init__(self) -> None:
        self.seconds = {label: 0.0 for label, _, _ in PHASES}
        self.runs = {label: [0, 0, 0.0] for label, _, _ in [("(outside)", "", ""), *PHASES]}
        self.counts = {label: dict.fromkeys([c for c, _, _ in COUNTED], 0) for label in self.runs}
        self._stack: list[str] = []
        self._saved: list = []

    @staticmethod
    def _owner(path: str):
        import importlib

        module, _, cls = path.partition(":")
        owner = importlib.import_module(module)
        return getattr(owner, cls) if cls else owner

    def _wrap(self, owner, attr: str, label: str | None) -> None:
        original = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
        phases = self

        def timed(*args, **kwargs):
            start = time.perf_counter()
            if label is not None:
                phases._stack.append(label)
            try:
                return original(*args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                if label is not None:
                    phases._stack.pop()
                    phases.seconds[label] += spent
                else:  # a model run: counted in the innermost phase
                    runs = phases.runs[phases._stack[-1] if phases._stack else "(outside)"]
                    runs[0] += 1
                    runs[1] += len(args[2][0]) if len(args) > 2 and len(args[2]) else 0
                    runs[2] += spent

        self._saved.append((owner, attr, original))
        setattr(owner, attr, timed)

    def _count(self, owner, attr: str, counter: str) -> None:
        """Count the calls of ``owner.attr`` in the innermost phase, wherever it was
        imported by name (``from thresholds import fill_activation_config``)."""
        original = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
        phases = self

        def counted(*args, **kwargs):
            phases.counts[phases._stack[-1] if phases._stack else "(outside)"][counter] += 1
            return original(*args, **kwargs)

        holders = [owner]
        if not isinstance(owner, type):
            holders += [
                m
                for name, m in list(sys.modules.items())
                if name.startswith("model_compression_toolkit")
                and m is not owner
                and getattr(m, attr, None) is original
            ]
        for holder in holders:
            self._saved.append((holder, attr, original))
            setattr(holder, attr, counted)

    def __enter__(self) -> Phases:
        for label, path, attr in PHASES:
            self._wrap(self._owner(path), attr, label)
        self._wrap(self._owner(FORWARD[0]), FORWARD[1], None)
        for counter, path, attr in COUNTED:
            self._count(self._owner(path), attr, counter)
        return self

    def __exit__(self, *exc) -> None:
        for owner, attr, original in reversed(self._saved):
            setattr(owner, attr, original)
        self._saved.clear()

    def table(self, float_pass: float) -> str:
        names = [c for c, _, _ in COUNTED]
        rows = [
            f"    {'phase':<48} {'s':>7} {'x float':>8} {'runs':>5} {'samples':>8} {'run s':>7}"
            + "".join(f" {c:>8}" for c in names)
        ]
        for label in ["(outside)", *self.seconds]:
            seconds = self.seconds.get(label, 0.0)
            n, samples, run_s = self.runs[label]
            rows.append(
                f"    {label:<48} {seconds:7.2f} {seconds / float_pass:8.1f} {n:5d} {samples:8d} {run_s:7.2f}"
                + "".join(f" {self.counts[label][c]:8d}" for c in names)
            )
        return "\n".join(rows)


def load():
    """The zoo's PP-OCRv4 rec as a torch model (skips with a message when its wheel is missing)."""
    from tests.zoo.real.wheels import missing

    lacking = missing("ppocr_rec")
    if lacking:
        sys.exit(f"wheel not installed: {', '.join(lacking)} (make install)")
    from tests.zoo.real.onnx_models import to_torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_torch("ppocr_rec", (1, 3, 48, 320))


def calibration(lines: int) -> list[np.ndarray]:
    """``lines`` rendered text lines (seed 10, as the zoo case), in batches of `BATCH`."""
    from tests.zoo.real import data

    x = data.text_lines(lines, seed=10)[0]
    return [x[i : i + BATCH] for i in range(0, len(x), BATCH)]


def calls(model, batches: list[np.ndarray]) -> dict:
    """The three timed functions on ``batches``."""
    import torch

    def float_pass():
        with torch.no_grad():
            for b in batches:
                model(torch.from_numpy(b))

    gen = lambda: iter([[b] for b in batches])  # noqa: E731
    qc = mct.core.QuantizationConfig(**QC)

    def ptq(model, gen):
        return mct.ptq.pytorch_post_training_quantization(
            model, gen, core_config=mct.core.CoreConfig(quantization_config=qc)
        )

    def off():
        mct.set_log_folder(None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ptq(model, gen)

    def analysis():
        with tempfile.TemporaryDirectory() as tmp:
            mct.set_log_folder(tmp)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    _, info = ptq(model, gen)
            finally:
                mct.set_log_folder(None)
        causes = [] if info.similarity is None else [e for e in info.similarity.quantizers if e.cause]
        analysis.causes = [f"{e.name} {e.kind}" for e in causes]

    analysis.causes = []
    return {"float": float_pass, "off": off, "analysis": analysis}


def interleaved(fns: dict, repeats: int) -> tuple[dict[str, float], Phases]:
    """Median seconds of each function, the functions taking turns; and the phases of the
    last ``analysis`` call (timed with its phases: the wrappers cost microseconds)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    phases = Phases()
    for _ in range(repeats):
        for name, fn in fns.items():
            if name == "analysis":
                phases = Phases()
            with phases if name == "analysis" else contextlib.nullcontext():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}, phases


def load_average() -> str:
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} cores"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[16, 128], help="calibration sizes")
    parser.add_argument("--repeats", type=int, default=3, help="0: no timing (only --profile)")
    parser.add_argument("--profile", type=int, default=0, help="profile the analysis call; print N functions")
    parser.add_argument(
        "--qc",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a QuantizationConfig field (bench/peers.py's values)",
    )
    args = parser.parse_args()
    from bench.peers import config_value

    for item in args.qc:
        name, _, text = item.partition("=")
        QC[name] = config_value(name, text)
    import torch

    torch.manual_seed(0)
    model = load()
    print(
        f"PP-OCRv4 rec, torch {torch.__version__}, {torch.get_num_threads()} threads; load {load_average()}"
    )
    for lines in args.lines:
        fns = calls(model, calibration(lines))
        fns["float"]()  # warm-up
        print(f"\n{lines} calibration lines, median of {args.repeats}; load {load_average()}")
        if args.repeats:
            t, timed = interleaved(fns, args.repeats)
            f = t["float"]
            print(f"  float pass over the data:      {f:7.2f} s")
            print(f"  PTQ, logging off:              {t['off']:7.2f} s  {t['off'] / f:6.1f}x the float pass")
            print(
                f"  PTQ, default analysis (logs):  {t['analysis']:7.2f} s  {t['analysis'] / f:6.1f}x (target < 10x)"
            )
            print(f"  causes: {', '.join(fns['analysis'].causes) or 'none'}; load now {load_average()}")
            print("  phases of the last analysis call (x float: over the median float pass):")
            print(timed.table(f))
            print(
                "  (runs: model runs inside the phase and not inside a phase below it; samples: their samples;"
                " builds, searches, copies: models built, activation threshold searches, graph copies, likewise)"
            )
        if args.profile:
            profile = cProfile.Profile()
            profile.runcall(fns["analysis"])
            print(f"  cProfile of one analysis call, top {args.profile} by cumulative time:")
            pstats.Stats(profile).sort_stats(os.environ.get("PSORT", "cumulative")).print_stats(args.profile)


if __name__ == "__main__":
    main()
