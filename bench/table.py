"""Figures -> markdown tables for `make bench` (ours vs Sony MCT 2.6.1).

Imports neither tool, nor torch: the driver and the tests use it as is. A *record* is the
dict one worker process reports for one measurement (see bench/worker.py), completed by
the driver with what it measures after the worker exits (``log_bytes``, ``tb_runs``,
``tb_tags``)::

    records -> aggregate() -> {(model, tool, mode): Figures} -> comparison_rows() -> markdown
"""

from __future__ import annotations

import math
import os
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass
from pathlib import Path

TOOLS = ("mct", "ours")
TOOL_NAMES = {"mct": "MCT 2.6.1", "ours": "ours"}
MODES = ("off", "log", "sim")  # logging off; logging on; logging + similarity analysis
MIB = 1 << 20

# The targets of issue 6, as ours / MCT (ratios) or as differences.
TIME_RATIO_TARGET = 0.25  # PTQ time, logging off and logging on
SIMILARITY_RATIO_TARGET = 0.2  # (logging + similarity) - (logging on)
ACCURACY_DROP_TARGET = 0.2  # quantized accuracy >= MCT's - 0.2 points
MEMORY_RATIO_TARGET = 1.0  # peak resident memory
GROWTH_EXPONENT_TARGET = 1.1  # linear (1.0) plus a tolerance for timing noise


@dataclass
class Figures:
    """Medians over the repetitions of one (model, tool, mode)."""

    n: int = 0
    seconds: float | None = None
    import_seconds: float | None = None
    peak_rss: float | None = None
    log_bytes: float | None = None
    tb_runs: int | None = None
    tb_tags: int | None = None
    float_acc: float | None = None
    quant_acc: float | None = None
    error: str | None = None


def _median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def aggregate(records: Iterable[Mapping]) -> dict[tuple, Figures]:
    """Median figures per ``(model, tool, mode)``; an error in any repetition is kept.

    Records with an ``error`` count for nothing else; TensorBoard counts are taken from
    the first successful repetition (they do not vary between repetitions).
    """
    groups: dict[tuple, list[Mapping]] = {}
    for r in records:
        groups.setdefault((r["model"], r["tool"], r["mode"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        ok = [r for r in rs if not r.get("error")]
        errors = [r["error"] for r in rs if r.get("error")]
        f = Figures(n=len(ok), error=errors[0] if errors else None)
        if ok:
            f.seconds = _median(r.get("seconds") for r in ok)
            f.import_seconds = _median(r.get("import_seconds") for r in ok)
            f.peak_rss = _median(r.get("peak_rss") for r in ok)
            f.log_bytes = _median(r.get("log_bytes") for r in ok)
            f.tb_runs = ok[0].get("tb_runs")
            f.tb_tags = ok[0].get("tb_tags")
            f.float_acc = _median(r.get("float_acc") for r in ok)
            f.quant_acc = _median(r.get("quant_acc") for r in ok)
        out[key] = f
    return out


# ------------------------------------------------------------------ measuring a log folder
def folder_bytes(folder: str | os.PathLike) -> int:
    """Total size of the files under ``folder`` (0 if it does not exist)."""
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def count_tensorboard(folder: str | os.PathLike) -> tuple[int, int]:
    """(runs, tags) that TensorBoard's own EventMultiplexer finds under ``folder``.

    Tags are summed over runs and over every category (scalars, histograms, images,
    tensors, run metadata, ...); a run's graph counts as one tag.
    """
    from tensorboard.backend.event_processing import event_multiplexer

    # Default reservoir sizes: a tag is registered by its first event, sampling cannot hide it.
    mux = event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(str(folder))
    mux.Reload()
    runs = mux.Runs()
    tags = 0
    for categories in runs.values():
        for value in categories.values():
            if isinstance(value, bool):
                tags += int(value)
            elif isinstance(value, Sized):
                tags += len(value)
    return len(runs), tags


# ------------------------------------------------------------------ growth
def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Least-squares slope of log(y) against log(x): the growth exponent (1.0 = linear)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x and y and x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    if sxx == 0:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


# ------------------------------------------------------------------ formatting
def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _mib(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / MIB:.1f}" if value < 100 * MIB else f"{value / MIB:.0f}"


def _ratio(ours: float | None, mct: float | None) -> float | None:
    if ours is None or mct is None or mct <= 0 or ours < 0:
        return None
    return ours / mct


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**MISSED**")


def _short_error(error: str) -> str:
    line = error.strip().splitlines()[-1] if error.strip() else "error"
    line = re.sub(r"\s+", " ", line).replace("|", "/")
    return "error: " + (line[:120] + "..." if len(line) > 120 else line)


@dataclass
class Row:
    model: str
    figure: str
    mct: str
    ours: str
    ratio: str
    target: str
    met: bool | None  # None: no target, or not measurable


def _sim_seconds(f: Mapping[str, Figures], tool: str) -> float | None:
    sim, log = f.get((tool, "sim")), f.get((tool, "log"))
    if sim is None or log is None or sim.seconds is None or log.seconds is None:
        return None
    return sim.seconds - log.seconds


def comparison_rows(figs: Mapping[tuple, Figures], models: Sequence[str]) -> list[Row]:
    """One row per (model, figure): MCT, ours, ours/MCT and the target it is held to."""
    rows: list[Row] = []
    for model in models:
        f = {(t, m): figs[(model, t, m)] for t in TOOLS for m in MODES if (model, t, m) in figs}

        def get(tool, mode, attr, _f=f):
            fig = _f.get((tool, mode))
            return None if fig is None else getattr(fig, attr)

        def cell(tool, mode, value, fmt, _f=f):
            fig = _f.get((tool, mode))
            if fig is not None and fig.error and fig.n == 0:
                return _short_error(fig.error)
            return fmt(value)

        def add_ratio_row(name, mode, attr, fmt, target=None, ratio_fmt=_num, model=model):
            mct_v, ours_v = get("mct", mode, attr), get("ours", mode, attr)
            r = _ratio(ours_v, mct_v)
            met = None if target is None or r is None else r <= target
            rows.append(
                Row(model, name, cell("mct", mode, mct_v, fmt), cell("ours", mode, ours_v, fmt),
                    "-" if r is None else f"{ratio_fmt(r)}x", f"<= {target}x" if target else "", met)
            )  # fmt: skip

        add_ratio_row("PTQ time, logging off (s)", "off", "seconds", _num, TIME_RATIO_TARGET)
        add_ratio_row("PTQ time, logging on (s)", "log", "seconds", _num, TIME_RATIO_TARGET)
        add_ratio_row("PTQ time, logging + similarity (s)", "sim", "seconds", _num)
        mct_s, ours_s = _sim_seconds(f, "mct"), _sim_seconds(f, "ours")
        r = _ratio(ours_s, mct_s)
        rows.append(
            Row(model, "similarity analysis = (logging + similarity) - (logging on) (s)",
                _num(mct_s), _num(ours_s), "-" if r is None else f"{r:.2f}x",
                f"<= {SIMILARITY_RATIO_TARGET}x", None if r is None else r <= SIMILARITY_RATIO_TARGET)
        )  # fmt: skip
        if get("mct", "off", "float_acc") is not None or get("ours", "off", "float_acc") is not None:
            rows.append(
                Row(model, "float accuracy (%)", _num(get("mct", "off", "float_acc")),
                    _num(get("ours", "off", "float_acc")), "", "", None)
            )  # fmt: skip
            mq, oq = get("mct", "off", "quant_acc"), get("ours", "off", "quant_acc")
            diff = None if mq is None or oq is None else oq - mq
            rows.append(
                Row(model, "quantized accuracy (%)", cell("mct", "off", mq, _num), cell("ours", "off", oq, _num),
                    "-" if diff is None else f"{diff:+.2f} pts", f">= MCT - {ACCURACY_DROP_TARGET} pts",
                    None if diff is None else diff >= -ACCURACY_DROP_TARGET - 1e-9)
            )  # fmt: skip
        add_ratio_row("peak RSS, logging off (MiB)", "off", "peak_rss", _mib, MEMORY_RATIO_TARGET)
        add_ratio_row("peak RSS, logging + similarity (MiB)", "sim", "peak_rss", _mib, MEMORY_RATIO_TARGET)
        add_ratio_row("log folder, logging on (MiB)", "log", "log_bytes", _mib)
        add_ratio_row("log folder, logging + similarity (MiB)", "sim", "log_bytes", _mib)
        for mode, label in (("log", "logging on"), ("sim", "logging + similarity")):

            def runs_tags(tool, _mode=mode, _f=f):
                fig = _f.get((tool, _mode))
                if fig is None or fig.tb_runs is None:
                    return "-"
                return f"{fig.tb_runs} / {fig.tb_tags}"

            rows.append(
                Row(
                    model,
                    f"TensorBoard runs / tags, {label}",
                    runs_tags("mct"),
                    runs_tags("ours"),
                    "",
                    "",
                    None,
                )
            )
        add_ratio_row("import time (s), not in PTQ time", "off", "import_seconds", _num)
    return rows


def rows_markdown(rows: Sequence[Row]) -> str:
    lines = [
        "| model | figure | MCT 2.6.1 | ours | ours / MCT | target | |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for r in rows:
        verdict = _verdict(r.met) if r.target else ""
        lines.append(f"| {r.model} | {r.figure} | {r.mct} | {r.ours} | {r.ratio} | {r.target} | {verdict} |")
    return "\n".join(lines)


# ------------------------------------------------------------------ scaling (ours alone)
@dataclass
class Scaling:
    depths: list[int]
    off: list[float | None]
    on: list[float | None]
    log_bytes: list[float | None]

    def exponents(self) -> dict[str, tuple[float | None, float | None]]:
        """Per series: (slope fitted over all depths, slope between the two largest)."""
        out = {}
        for name, ys in (("PTQ time, logging off", self.off), ("PTQ time, logging on", self.on),
                         ("log folder size", self.log_bytes)):  # fmt: skip
            overall = loglog_slope(self.depths, ys)
            last = loglog_slope(self.depths[-2:], ys[-2:]) if len(self.depths) >= 2 else None
            out[name] = (overall, last)
        return out


def scaling_from_figures(figs: Mapping[tuple, Figures], depths: Sequence[int]) -> Scaling:
    def get(depth, mode, attr):
        f = figs.get((f"conv_stack_{depth}", "ours", mode))
        return None if f is None else getattr(f, attr)

    return Scaling(
        list(depths),
        [get(d, "off", "seconds") for d in depths],
        [get(d, "log", "seconds") for d in depths],
        [get(d, "log", "log_bytes") for d in depths],
    )


def scaling_markdown(s: Scaling) -> tuple[str, bool | None]:
    """The scaling table and whether growth is no faster than linear (the local exponent)."""
    lines = [
        "| conv layers | PTQ, logging off (s) | PTQ, logging on (s) | log folder (MiB) |",
        "|---:|---:|---:|---:|",
    ]
    for d, off, on, size in zip(s.depths, s.off, s.on, s.log_bytes):
        lines.append(f"| {d} | {_num(off)} | {_num(on)} | {_mib(size)} |")
    exps = s.exponents()
    cols = list(exps.values())
    lines.append("| growth exponent, fit over all depths | " + " | ".join(_num(c[0]) for c in cols) + " |")
    lines.append(
        f"| growth exponent, {s.depths[-2]} -> {s.depths[-1]} (target <= {GROWTH_EXPONENT_TARGET}) | "
        + " | ".join(_num(c[1]) for c in cols) + " |"
    )  # fmt: skip
    local = [c[1] for c in cols]
    met = None if any(v is None for v in local) else all(v <= GROWTH_EXPONENT_TARGET for v in local)
    return "\n".join(lines), met


# ------------------------------------------------------------------ targets summary
TARGETS = (
    ("PTQ time, logging off (s)", f"PTQ time, logging off <= {TIME_RATIO_TARGET}x MCT's"),
    ("PTQ time, logging on (s)", f"PTQ time, logging on <= {TIME_RATIO_TARGET}x MCT's"),
    ("similarity analysis", f"similarity analysis time <= {SIMILARITY_RATIO_TARGET}x MCT's"),
    ("quantized accuracy (%)", f"quantized accuracy (digits) >= MCT's - {ACCURACY_DROP_TARGET} points"),
    ("peak RSS", "peak resident memory <= MCT's"),
)


def targets_summary(rows: Sequence[Row], growth_met: bool | None) -> list[tuple[str, bool | None, list[str]]]:
    """(target, met over every model, the models where it was missed or not measurable)."""
    out = []
    for prefix, text in TARGETS:
        relevant = [r for r in rows if r.figure.startswith(prefix) and r.target]
        missed = sorted({r.model for r in relevant if r.met is False})
        unknown = sorted({r.model + " (not measured)" for r in relevant if r.met is None})
        measured = any(r.met is not None for r in relevant)
        out.append((text, (not missed) if measured else None, missed + unknown))
    out.append((f"cost grows no faster than linearly (exponent <= {GROWTH_EXPONENT_TARGET})", growth_met, []))
    return out


def targets_markdown(summary) -> str:
    lines = ["| target | result | missed, or not measured, for |", "|---|---|---|"]
    for text, met, where in summary:
        lines.append(f"| {text} | {_verdict(met)} | {', '.join(where) or '-'} |")
    return "\n".join(lines)


# ------------------------------------------------------------------ README section
def replace_section(text: str, heading: str, body: str) -> str:
    """``text`` with the body under ``heading`` (a ``## `` line) replaced by ``body``.

    The body runs to the next ``## `` heading or the end. A missing section is appended.
    """
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.rstrip("\n").rstrip() == heading), None)
    new_body = "\n" + body.strip("\n") + "\n"
    if start is None:
        sep = "" if text.endswith("\n") or not text else "\n"
        return f"{text}{sep}\n{heading}\n{new_body}"
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    tail = "".join(lines[end:])
    return "".join(lines[: start + 1]) + new_body + ("\n" + tail if tail else "")


def update_readme(readme: Path, body: str, heading: str = "## Performance") -> None:
    readme.write_text(replace_section(readme.read_text(encoding="utf-8"), heading, body), encoding="utf-8")


# ------------------------------------------------------------------ exported models (bench/export_bench.py)
EXPORT_BEGIN = "<!-- export-bench:begin -->"
EXPORT_END = "<!-- export-bench:end -->"


def _cosine(value: float | None) -> str:
    return "-" if value is None else f"{value:.5f}"


def _size(value: float | None) -> str:
    """Bytes as MiB, with the decimals a small file needs."""
    if value is None:
        return "-"
    mib = value / MIB
    return f"{mib:.3f}" if mib < 1 else f"{mib:.2f}" if mib < 10 else f"{mib:.1f}"


def _ratio_cell(num: float | None, den: float | None) -> str:
    r = _ratio(num, den)
    return "-" if r is None else f"{r:.2f}x"


def export_markdown(records: Sequence[Mapping]) -> str:
    """One row per exported model: file size and latency (batch 1) float vs int8 with their
    ratios, measured in one run, and how the runtime's outputs compare with our quantized model.

    A record (bench/export_bench.py): ``model``, ``runtime``, ``float_bytes``, ``int8_bytes``,
    ``float_ms``, ``int8_ms``, ``max_steps``, ``cosine``, ``equal_fraction``, ``top1``,
    ``bias_cosine``, ``floor_cosine``; or ``model``, ``runtime`` and ``error``.
    """
    lines = [
        "| model | exported to, run by | file float (MiB) | file int8 (MiB) | int8 / float | latency float (ms) "
        "| latency int8 (ms) | int8 / float | vs our quantized model: max diff (steps) / cosine / same top-1 "
        "| int32 bias alone: cosine | floor: cosine |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in records:
        if r.get("error"):
            lines.append(f"| {r['model']} | {r['runtime']} | {_short_error(r['error'])} |" + " |" * 8)
            continue
        steps = "-" if r.get("max_steps") is None else f"{r['max_steps']:.2f}"
        top1 = "-" if r.get("top1") is None else f"{100 * r['top1']:.0f} %"
        lines.append(
            f"| {r['model']} | {r['runtime']} | {_size(r.get('float_bytes'))} | {_size(r.get('int8_bytes'))} "
            f"| {_ratio_cell(r.get('int8_bytes'), r.get('float_bytes'))} | {_num(r.get('float_ms'))} "
            f"| {_num(r.get('int8_ms'))} | {_ratio_cell(r.get('int8_ms'), r.get('float_ms'))} "
            f"| {steps} / {_cosine(r.get('cosine'))} / {top1} | {_cosine(r.get('bias_cosine'))} "
            f"| {_cosine(r.get('floor_cosine'))} |"
        )
    return "\n".join(lines)


def export_notes(records: Sequence[Mapping]) -> str:
    """The digits models' accuracy through the whole chain: float, our quantized model, the exported file."""
    return "\n".join(
        f"- {r['model']}, top-1 on the 397 test samples: float {r['float_acc']:.2f} %, our quantized model "
        f"{r['quant_acc']:.2f} %, the exported file {r['runtime_acc']:.2f} %."
        for r in records
        if r.get("runtime_acc") is not None and not r.get("error")
    )


def replace_block(text: str, body: str, begin: str = EXPORT_BEGIN, end: str = EXPORT_END) -> str:
    """``text`` with what lies between the ``begin`` and ``end`` markers replaced by ``body``;
    without the markers, the block is appended."""
    block = f"{begin}\n{body.strip()}\n{end}"
    if begin in text and end in text and text.index(begin) < text.index(end):
        return text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    sep = "" if text.endswith("\n") or not text else "\n"
    return f"{text}{sep}\n{block}\n"
