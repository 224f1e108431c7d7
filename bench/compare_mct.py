"""`make bench`: our PTQ and Sony MCT 2.6.1 side by side, one process per measurement.

    bash bench/run.sh                       # builds .venv-bench, then runs this with its python
    .venv-bench/bin/python bench/compare_mct.py --repeats 3 --models digits,resnet18,mobilenet_v2

Prepares identical inputs once (the digits CNN trained and saved, representative batches
saved as .npy), then runs bench/worker.py for every (repetition, model, mode, tool),
alternating MCT and ours, and ours alone on `torch_conv_stack(depth)` for the scaling
table. Writes bench/results/<date>.md, prints it, and rewrites README.md's
``## Performance`` section. Imports neither tool itself (both are ``model_compression_toolkit``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # bench.table, tests.fixtures.digits; this process never imports a tool

from bench import table  # noqa: E402

WORKER = REPO / "bench" / "worker.py"
MODEL_NAMES = {"digits": "digits CNN", "resnet18": "ResNet-18", "mobilenet_v2": "MobileNetV2"}


# ------------------------------------------------------------------ inputs
def prepare_data(folder: Path) -> None:
    """The files every worker loads: the same weights and batches for both tools."""
    import numpy as np
    import torch

    from tests.fixtures.digits import digits_data, torch_digits_cnn, train_torch

    x_train, y_train, x_test, y_test = digits_data()
    model = train_torch(torch_digits_cnn(), x_train, y_train)
    torch.save(model.state_dict(), folder / "digits_weights.pt")
    np.save(folder / "digits_rep.npy", x_train[: 5 * 32])  # 5 batches of 32 x 1x32x32
    np.save(folder / "digits_test_x.npy", x_test)  # the 397 test samples
    np.save(folder / "digits_test_y.npy", y_test)
    rng = np.random.default_rng(0)
    np.save(folder / "imagenet_rep.npy", rng.standard_normal((4 * 8, 3, 224, 224), dtype=np.float32))
    np.save(folder / "small_rep.npy", rng.standard_normal((2 * 4, 3, 32, 32), dtype=np.float32))


# ------------------------------------------------------------------ one measurement
def run_worker(tool: str, model: str, mode: str, rep: int, data: Path, scratch: Path, timeout: float,
               profile: Path | None = None) -> dict:  # fmt: skip
    """Run one worker; add what is measured from outside (log size, TensorBoard counts)."""
    job = scratch / f"{model}-{tool}-{mode}-{rep}"
    job.mkdir(parents=True)
    # MCT also writes a sibling folder <log folder>_MCTQ: measure the whole job folder.
    log_dir, out = job / "logs", job / "record.json"
    cmd = [sys.executable, str(WORKER), "--tool", tool, "--model", model, "--mode", mode,
           "--data", str(data), "--out", str(out), "--rep", str(rep)]  # fmt: skip
    if mode != "off":
        cmd += ["--log-dir", str(log_dir)]
    if profile is not None:
        cmd += ["--profile", str(profile)]
    env = dict(os.environ, PYTHONHASHSEED="0", TF_CPP_MIN_LOG_LEVEL="2")
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True, timeout=timeout)
        failure = (
            None if out.exists() else f"worker exited with code {proc.returncode}: {proc.stderr[-1500:]}"
        )
    except subprocess.TimeoutExpired:
        failure = f"worker timed out after {timeout:.0f} s"
    if failure is None:
        record = json.loads(out.read_text(encoding="utf-8"))
    else:
        record = {"tool": tool, "model": model, "mode": mode, "rep": rep, "error": failure}
    record["wall_seconds"] = time.perf_counter() - start
    if mode != "off" and not record.get("error"):
        out.unlink()
        record["log_bytes"] = table.folder_bytes(job)
        try:
            record["tb_runs"], record["tb_tags"] = table.count_tensorboard(job)
        except Exception as exc:  # noqa: BLE001  (a log TensorBoard cannot read is a finding, not a crash)
            record["tb_error"] = f"{type(exc).__name__}: {exc}"
    shutil.rmtree(job, ignore_errors=True)
    return record


def describe(record: dict) -> str:
    if record.get("error"):
        return "ERROR " + record["error"].strip().splitlines()[-1][:150]
    parts = [f"{record['seconds']:.2f} s", f"peak {record['peak_rss'] / table.MIB:.0f} MiB"]
    if "log_bytes" in record:
        parts.append(
            f"log {record['log_bytes'] / table.MIB:.1f} MiB, {record.get('tb_runs')} runs / {record.get('tb_tags')} tags"
        )
    if "quant_acc" in record:
        parts.append(f"acc {record['float_acc']:.2f} -> {record['quant_acc']:.2f} %")
    return ", ".join(parts)


# ------------------------------------------------------------------ exported models (ours alone)
EXPORT_BENCH = REPO / "bench" / "export_bench.py"
OUR_PYTHON = REPO / ".venv" / "bin" / "python"  # torch, TensorFlow and onnxruntime: not in .venv-bench


def run_export_bench(scratch: Path, timeout: float) -> str:
    """bench/export_bench.py's table, run with this repository's .venv (our package, TensorFlow
    and onnxruntime, which .venv-bench must not hold)."""
    if not OUR_PYTHON.exists():
        return "(not measured: bench/export_bench.py needs the project's .venv; run `make install` first)"
    out = scratch / "export.md"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    try:
        proc = subprocess.run([str(OUR_PYTHON), str(EXPORT_BENCH), "--markdown-out", str(out)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"(not measured: bench/export_bench.py timed out after {timeout:.0f} s)"
    if not out.exists():
        return f"(not measured: bench/export_bench.py exited with code {proc.returncode}: {proc.stderr[-500:]})"
    return out.read_text(encoding="utf-8")


# ------------------------------------------------------------------ the machine
def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    except Exception:  # noqa: BLE001
        gpu = "unknown"
    try:
        commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True,
                                text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "gpu": gpu,
        "python": platform.python_version(),
        "commit": commit,
    }


def versions(records: list[dict]) -> dict:
    out = {}
    for r in records:
        if "tool_version" in r:
            out.setdefault(r["tool"], r["tool_version"])
            out.setdefault("torch", r.get("torch_version"))
    try:
        from importlib.metadata import version

        out["torchvision"] = version("torchvision")
    except Exception:  # noqa: BLE001
        out["torchvision"] = "?"
    return out


# ------------------------------------------------------------------ report
def per_rep_table(records: list[dict]) -> str:
    lines = ["| model | mode | tool | PTQ seconds per repetition |", "|---|---|---|---|"]
    groups: dict[tuple, list[str]] = {}
    for r in records:
        cell = "error" if r.get("error") else f"{r['seconds']:.2f}"
        groups.setdefault((r["model"], r["mode"], r["tool"]), []).append(cell)
    for (model, mode, tool), cells in groups.items():
        lines.append(f"| {model} | {mode} | {table.TOOL_NAMES[tool]} | {', '.join(cells)} |")
    return "\n".join(lines)


def build_report(date: str, info: dict, vers: dict, args, main_md: str, scaling_md: str, targets_md: str,
                 errors: list[str], profiles: dict[str, str], records: list[dict], export_md: str = "") -> str:  # fmt: skip
    head = [
        f"# `make bench`: ours vs Sony MCT 2.6.1, {date}",
        "",
        f"Machine: {info['cores']} cores ({info['cpu']}), GPU: {info['gpu']}, Python {info['python']}; "
        f"1-minute load average {info.get('load', '?')}.  ",
        f"Versions: torch {vers.get('torch')}, torchvision {vers.get('torchvision')}, "
        f"MCT {vers.get('mct', '?')}, ours {vers.get('ours', '?')} (commit {info['commit']}).  ",
        f"Each figure is the median of {args.repeats} repetitions ({args.repeats_for or 'all models'}), "
        "each in a fresh process, MCT and ours alternating. Only the PTQ call is timed. How each tool is configured and what each figure "
        "means: [bench/README.md](../README.md).",
        "",
        "## Targets",
        "",
        targets_md,
        "",
        "## Ours vs MCT",
        "",
        main_md,
        "",
        "## Scaling (ours alone, `bench.models.torch_conv_stack(depth)`, 2 batches of 4x3x32x32)",
        "",
        scaling_md,
        "",
    ]
    if export_md:
        head += ["## Exported models (ours alone, `bench/export_bench.py`)", "", export_md.strip(), ""]
    if errors:
        head += ["## Errors", "", *[f"- {e}" for e in errors], ""]
    for title, text in profiles.items():
        head += [f"## Profile: {title}", "", "```", text.strip(), "```", ""]
    head += ["<details><summary>Every repetition</summary>", "", per_rep_table(records), "", "</details>", ""]
    return "\n".join(head)


def readme_body(date: str, info: dict, vers: dict, targets_md: str, main_md: str, scaling_md: str,
                export_md: str = "") -> str:  # fmt: skip
    export = ["", "Deploying: exported file size and latency, float vs int8, and parity with our quantized "
              "model (`bench/export_bench.py`, see [bench/README.md](bench/README.md)):", "",
              table.replace_block("", export_md).strip()] if export_md else []  # fmt: skip
    return "\n".join([
        f"Measured by `make bench` on {date}: {info['cores']} cores ({info['cpu']}), no GPU, "
            f"1-minute load average {info.get('load', '?')}; "
        f"torch {vers.get('torch')}, Sony MCT {vers.get('mct', '?')} as the reference, in separate "
        "processes on the same models and data (medians). How to run it, what each figure means "
        f"and the caveats: [bench/README.md](bench/README.md); full report: "
        f"[bench/results/{date}.md](bench/results/{date}.md).",
        "",
        targets_md,
        "",
        main_md,
        "",
        "Scaling of ours with depth (`torch_conv_stack`):",
        "",
        scaling_md,
        *export,
    ])  # fmt: skip


# ------------------------------------------------------------------ main
def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default="digits,resnet18,mobilenet_v2")
    parser.add_argument(
        "--repeats-for", default="mobilenet_v2=1,conv_stack=1",
        help="fewer repetitions for the slow cases, to keep a run near 30 min ('' for none)",
    )  # fmt: skip
    parser.add_argument(
        "--depths", default="20,50,100,200", help="conv_stack depths for the scaling table ('' skips it)"
    )
    parser.add_argument("--timeout", type=float, default=1200, help="seconds allowed per worker")
    parser.add_argument("--results", default=str(REPO / "bench" / "results"))
    parser.add_argument(
        "--records", help="JSON lines file each record is appended to as it is measured "
        "(default: a new file in the temp folder, printed at the start)",
    )  # fmt: skip
    parser.add_argument(
        "--report-from", help="measure nothing: build the report from a --records file of an earlier run"
    )
    parser.add_argument(
        "--no-readme", action="store_true", help="do not rewrite README.md's Performance section"
    )
    parser.add_argument(
        "--no-profile", action="store_true", help="do not profile ours where a time target is missed"
    )
    parser.add_argument(
        "--no-export", action="store_true", help="do not run bench/export_bench.py (file sizes, latency, parity)"
    )
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    depths = [int(d) for d in args.depths.split(",") if d]
    info = machine()
    load_before = os.getloadavg()
    started = time.perf_counter()

    scratch = Path(tempfile.mkdtemp(prefix="mct-bench-"))
    data = scratch / "data"
    data.mkdir()
    try:
        if args.report_from:
            lines = Path(args.report_from).read_text(encoding="utf-8").splitlines()
            entries = [json.loads(line) for line in lines if line.strip()]
            records = [e for e in entries if "profile" not in e]
            profiles = {e["profile"]: e["text"] for e in entries if "profile" in e}
            date = (
                entries[0].get("date", dt.date.today().isoformat())
                if entries
                else dt.date.today().isoformat()
            )
            load_before = tuple(entries[0].get("load", load_before)) if entries else load_before
        else:
            date = dt.date.today().isoformat()
            log_path = Path(args.records or tempfile.mkstemp(prefix=f"mct-bench-{date}-", suffix=".jsonl")[1])
            print(f"bench: records go to {log_path} (rebuild the report with --report-from)", flush=True)
            log_path.write_text(
                json.dumps({"profile": "", "text": "", "date": date, "load": load_before}) + "\n"
            )

            def keep(entry: dict) -> None:
                with log_path.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(entry) + "\n")

            print(f"bench: preparing data and training the digits CNN in {data}", flush=True)
            prepare_data(data)
            records = []
            jobs = plan_jobs(args, models, depths)
            for n, (tool, model, mode, rep) in enumerate(jobs, 1):
                record = run_worker(tool, model, mode, rep, data, scratch, args.timeout)
                records.append(record)
                keep(record)
                elapsed = time.perf_counter() - started
                print(
                    f"[{n}/{len(jobs)} {elapsed / 60:.1f} min] {model} {mode} {tool}: {describe(record)}",
                    flush=True,
                )
            profiles = {}

        figs = table.aggregate(records)
        rows = table.comparison_rows(figs, models)
        for r in rows:
            r.model = MODEL_NAMES.get(r.model, r.model)
        main_md = table.rows_markdown(rows)
        scaling_md, growth_met = (
            table.scaling_markdown(table.scaling_from_figures(figs, depths))
            if len(depths) >= 2
            else ("(skipped)", None)
        )
        summary = table.targets_summary(rows, growth_met)
        targets_md = table.targets_markdown(summary)
        errors = sorted({f"{r['model']} / {r['tool']} / {r['mode']}: {r['error'].strip().splitlines()[-1]}"
                         for r in records if r.get("error")})  # fmt: skip

        if not args.no_profile and not args.report_from:
            profiles = profile_misses(rows, models, data, scratch, args.timeout)
            if growth_met is False:
                profiles.update(profile_one(f"conv_stack_{depths[-1]}", "log", data, scratch, args.timeout))
            for title, text in profiles.items():
                keep({"profile": title, "text": text})
        profiles = {k: v for k, v in profiles.items() if k}
        export_md = ""
        if not args.no_export and not args.report_from:
            print("bench: exported models (bench/export_bench.py, with .venv)", flush=True)
            export_md = run_export_bench(scratch, 3 * args.timeout)
        vers = versions(records)
        info["load"] = f"{load_before[0]:.1f} at the start" + (
            "" if args.report_from else f", {os.getloadavg()[0]:.1f} at the end"
        )
        report = build_report(
            date, info, vers, args, main_md, scaling_md, targets_md, errors, profiles, records, export_md
        )
        results = Path(args.results)
        results.mkdir(parents=True, exist_ok=True)
        path = results / f"{date}.md"
        path.write_text(report, encoding="utf-8")
        print(report)
        if not args.no_readme:
            table.update_readme(
                REPO / "README.md", readme_body(date, info, vers, targets_md, main_md, scaling_md, export_md)
            )
        print(f"bench: wrote {path}{'' if args.no_readme else ' and README.md ## Performance'} "
              f"in {(time.perf_counter() - started) / 60:.1f} min")  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def plan_jobs(args, models: list[str], depths: list[int]) -> list[tuple[str, str, str, int]]:
    """(tool, model, mode, repetition) in run order: repetitions outermost, tools alternating."""
    overrides = {k: int(v) for k, v in (kv.split("=") for kv in args.repeats_for.split(",") if kv)}
    jobs = []
    for rep in range(args.repeats):
        for model in models:
            if rep >= overrides.get(model, args.repeats):
                continue
            for i, mode in enumerate(table.MODES):
                tools = table.TOOLS if (rep + i) % 2 == 0 else table.TOOLS[::-1]  # who goes first alternates
                jobs += [(tool, model, mode, rep) for tool in tools]
        if rep < overrides.get("conv_stack", args.repeats):
            for depth in depths:
                jobs += [("ours", f"conv_stack_{depth}", mode, rep) for mode in ("off", "log")]
    return jobs


def profile_misses(rows, models, data: Path, scratch: Path, timeout: float) -> dict[str, str]:
    """cProfile of our worker where ours misses a time target: one profile per kind of miss.

    A PTQ-time miss (logging off or on) is profiled with logging on, a similarity miss with
    logging + similarity, each on the model where ours / MCT is worst.
    """
    names = {v: k for k, v in MODEL_NAMES.items()}
    worst: dict[str, tuple[float, str]] = {}  # mode -> (ratio, model label)
    for r in rows:
        if r.met is not False or names.get(r.model, r.model) not in models:
            continue
        mode = (
            "sim" if r.figure.startswith("similarity") else "log" if r.figure.startswith("PTQ time") else None
        )
        try:
            ratio = float(r.ratio.rstrip("x"))
        except ValueError:
            continue
        if mode and ratio > worst.get(mode, (-1.0, ""))[0]:
            worst[mode] = (ratio, r.model)
    out: dict[str, str] = {}
    for mode, (_ratio, label) in sorted(worst.items()):
        out.update(profile_one(names.get(label, label), mode, data, scratch, timeout, label))
    return out


def profile_one(
    model: str, mode: str, data: Path, scratch: Path, timeout: float, label: str = ""
) -> dict[str, str]:
    prof = scratch / f"profile-{model}-{mode}.txt"
    record = run_worker("ours", model, mode, 99, data, scratch, timeout, profile=prof)
    what = "logging + similarity" if mode == "sim" else "logging on"
    title = (
        f"ours, {label or model}, {what} (cProfile; {record.get('seconds') or 0:.2f} s under the profiler)"
    )
    print(f"bench: profiled {title}", flush=True)
    return {
        title: prof.read_text(encoding="utf-8")
        if prof.exists()
        else f"profiling failed: {record.get('error')}"
    }


if __name__ == "__main__":
    main()
