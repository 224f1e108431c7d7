"""The real zoo table: pretrained models whose weights ship inside PyPI wheels, each
measured on its task (tests/zoo/real/cases.py) float, 8-bit, and 8-bit with the similarity
report's suggested fix, with the report's first causes and the exported file's parity.

    .venv/bin/python bench/real_zoo.py [--only NAME ...] [--out bench/results/real_zoo.md]

For each model: the float metric; PTQ with a log folder (similarity analysis on; its
seconds are the PTQ column) and the 8-bit metric; the first 3 causes
(``info.similarity.causes()``); PTQ again with the suggested fix
(``fix.apply(CoreConfig())``: layers kept float, or more bits where the loss is spread) and its metric; the ONNX (PyTorch) or .keras (Keras) export's parity with the quantized model.
A step that fails writes its error into the row and the run goes on.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

COLUMNS = ["model", "fw", "layers", "float", "8-bit", "first causes (output SQNR alone)", "with fix", "export parity",
           "PTQ s", "errors"]  # fmt: skip


def _fmt(result: dict | None, primary: str) -> str:
    """The primary metric in percent, then the others."""
    if result is None:
        return "-"
    parts = []
    for key, value in result.items():
        if value is None or key == "count":
            continue
        if key == "landmark_px":
            parts.append(f"landmarks {value:.2f} px")
        elif key == "cents":
            parts.append(f"median {value:.1f} cents")
        elif key == primary:
            parts.insert(0, f"**{100 * value:.1f} %**")
        else:
            parts.append(f"{key} {100 * value:.1f} %")
    return ", ".join(parts)


def _error(step: str, e: BaseException) -> str:
    line = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if len(line) > 300:  # onnxruntime's messages end with what went wrong
        line = f"{line[:140]} ... {line[-150:]}"
    return f"{step}: {type(e).__name__}: {line}"


def _describe(fix) -> str:
    """What the suggested fix changes: layers kept float, more bits, equalization, rounding."""
    parts = []
    if fix.activations or fix.weights:
        parts.append(f"{len(fix.activations)} act + {len(fix.weights)} w float")
    for kind in ("activation", "weights"):
        bits = getattr(fix, f"{kind}_n_bits", None)
        if bits:
            parts.append(f"all {kind} {bits} bits")
    layer_bits = {**getattr(fix, "activation_bits", {}), **getattr(fix, "weight_bits", {})}
    if layer_bits:
        parts.append(f"{len(layer_bits)} layers more bits")
    if getattr(fix, "equalize", False):
        parts.append("channels equalized")
    if getattr(fix, "compensated_rounding", False):
        parts.append("kernels rounded with compensation")
    return ", ".join(parts) or "fix"


def measure(name: str) -> dict:
    """One row; every step's failure is recorded in ``errors``."""
    import model_compression_toolkit as mct
    from tests.zoo.real.cases import ALL_CASES
    from tests.zoo.real.wheels import missing

    case = ALL_CASES[name]
    row: dict = {"model": name, "fw": case.framework, "errors": [], "primary": case.primary}
    if missing(case.weights):
        row["errors"].append(f"wheel not installed: {', '.join(missing(case.weights))}")
        return row
    ptq = {
        "pytorch": mct.ptq.pytorch_post_training_quantization,
        "keras": mct.ptq.keras_post_training_quantization,
    }[case.framework]
    try:
        model, batches = case.make(), case.calibration()
        row["float"] = case.evaluate(model)
    except Exception as e:
        row["errors"].append(_error("load", e))
        return row
    with tempfile.TemporaryDirectory() as folder:
        mct.set_log_folder(folder)
        start = time.perf_counter()
        try:
            q_model, info = ptq(model, lambda: iter(batches))
        except Exception as e:
            row["errors"].append(_error("PTQ", e))
            return row
        finally:
            mct.set_log_folder(None)
        row["ptq_s"] = time.perf_counter() - start
        row["layers"] = len(info.layers)
        try:
            row["8-bit"] = case.evaluate(q_model)
        except Exception as e:
            row["errors"].append(_error("8-bit metric", e))
        report = info.similarity
        fix = None
        if report is None:
            row["errors"].append("no similarity report")
        else:
            row["causes"] = [f"{q.name} ({q.kind[0]}) {q.output_sqnr_db:.1f} dB" for q in report.causes()[:3]]
            row["cause_count"] = len(report.causes())
            fix = report.suggested_fix()
        if fix:
            row["fix"] = _describe(fix) + (
                "" if fix.restores else "; the report says no fix it tried restores"
            )
            try:
                fixed, _ = ptq(model, lambda: iter(batches), core_config=fix.apply(mct.core.CoreConfig()))
                row["fixed"] = case.evaluate(fixed)
            except Exception as e:
                row["errors"].append(_error("fix", e))
        try:
            if case.framework == "pytorch":
                result = mct.exporter.pytorch_export_model(
                    q_model, Path(folder) / "m.onnx", lambda: iter(batches)
                )
            else:
                result = mct.exporter.keras_export_model(q_model, Path(folder) / "m.keras",
                                                         repr_dataset=lambda: iter(batches))  # fmt: skip
            # steps of an output's grid; an output handed on unrounded has none
            steps = [p.max_steps for p in result.parity if p.max_steps is not None]
            cosine = min((p.cosine for p in result.parity if p.cosine is not None), default=float("nan"))
            ok = "ok" if result.parity_ok else "FAILED"
            worst = f"max {max(steps):.2f} steps" if steps else "outputs unrounded"
            row["export"] = f"{ok}, {worst}, cos {cosine:.4f}"
        except Exception as e:
            row["errors"].append(_error("export", e))
    return row


def markdown(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        primary = r.get("primary", "")
        causes = "; ".join(r.get("causes", [])) or ("none" if "cause_count" in r else "-")
        if r.get("cause_count", 0) > 3:
            causes += f" (+{r['cause_count'] - 3})"
        fixed = "-" if "fix" not in r else f"{_fmt(r.get('fixed'), primary)} ({r['fix']})"
        cells = [
            r["model"], r["fw"], str(r.get("layers", "-")), _fmt(r.get("float"), primary),
            _fmt(r.get("8-bit"), primary), causes, fixed, r.get("export", "-"),
            f"{r['ptq_s']:.1f}" if "ptq_s" in r else "-", "<br>".join(r["errors"]).replace("|", "\\|"),
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    from tests.zoo.real.cases import ALL_CASES as CASES  # the bench-only cases too

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=list(CASES), help="these models only")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "real_zoo.md")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    rows = []
    for name in args.only or list(CASES):
        start = time.perf_counter()
        try:
            row = measure(name)
        except Exception as e:  # a bug of this script: still a row
            traceback.print_exc()
            row = {"model": name, "fw": "?", "errors": [_error("bench", e)]}
        print(f"{name}: {time.perf_counter() - start:.0f} s {row}", file=sys.stderr, flush=True)
        rows.append(row)
    import torch

    header = (
        f"# Real zoo ({time.strftime('%Y-%m-%d')})\n\n"
        f"`{' '.join(['.venv/bin/python', 'bench/real_zoo.py', *sys.argv[1:]])}` on {os.cpu_count()} CPUs "
        f"({platform.machine()}), torch {torch.__version__}, PTQ seconds with the similarity analysis on.\n"
        "Metrics: tests/zoo/real/cases.py (primary in bold). Causes: (a) activation, (w) weights.\n\n"
    )
    text = header + markdown(rows) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
