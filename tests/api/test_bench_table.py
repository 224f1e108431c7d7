"""bench/table.py: medians, ratios, verdicts, growth exponents, the README section, and
counting a real log with TensorBoard's loader. No MCT needed."""

from __future__ import annotations

import numpy as np
import pytest

from bench import table


def _rec(model, tool, mode, seconds, rep=0, **extra):
    base = {"model": model, "tool": tool, "mode": mode, "rep": rep, "seconds": seconds,
            "import_seconds": 1.0, "peak_rss": 500 * table.MIB, "log_bytes": 2 * table.MIB,
            "tb_runs": 5, "tb_tags": 40}  # fmt: skip
    base.update(extra)
    return base


def _records():
    recs = []
    for rep, jitter in enumerate((0.0, 0.1, -0.1)):
        recs += [
            _rec("digits", "mct", "off", 0.5 + jitter, rep, float_acc=90.0, quant_acc=90.2),
            _rec("digits", "mct", "log", 1.0 + jitter, rep),
            _rec("digits", "mct", "sim", 2.0 + jitter, rep),
            _rec(
                "digits",
                "ours",
                "off",
                0.1 + jitter / 10,
                rep,
                float_acc=90.0,
                quant_acc=89.9,
                peak_rss=600 * table.MIB,
            ),
            _rec("digits", "ours", "log", 0.2 + jitter / 10, rep),
            _rec("digits", "ours", "sim", 0.3 + jitter / 10, rep),
        ]
    recs.append(
        {
            "model": "resnet18",
            "tool": "mct",
            "mode": "off",
            "rep": 0,
            "error": "Traceback\nValueError: boom | x",
        }
    )
    recs.append(_rec("resnet18", "ours", "off", 3.0))
    return recs


def test_aggregate_takes_medians_and_keeps_errors():
    figs = table.aggregate(_records())
    assert figs[("digits", "mct", "off")].seconds == pytest.approx(0.5)
    assert figs[("digits", "ours", "log")].seconds == pytest.approx(0.2)
    assert figs[("digits", "ours", "off")].n == 3
    failed = figs[("resnet18", "mct", "off")]
    assert failed.n == 0 and "boom" in failed.error and failed.seconds is None


def test_rows_ratios_and_verdicts():
    rows = {
        (r.model, r.figure): r
        for r in table.comparison_rows(table.aggregate(_records()), ["digits", "resnet18"])
    }
    off = rows[("digits", "PTQ time, logging off (s)")]
    assert (off.mct, off.ours, off.ratio, off.met) == ("0.50", "0.10", "0.20x", True)
    sim = rows[("digits", "similarity analysis = (logging + similarity) - (logging on) (s)")]
    assert (sim.mct, sim.ours, sim.met) == ("1.00", "0.10", True)
    acc = rows[("digits", "quantized accuracy (%)")]
    assert acc.ratio == "-0.30 pts" and acc.met is False  # 89.9 < 90.2 - 0.2
    mem = rows[("digits", "peak RSS, logging off (MiB)")]
    assert mem.ratio == "1.20x" and mem.met is False
    assert rows[("digits", "TensorBoard runs / tags, logging on")].mct == "5 / 40"
    failed = rows[("resnet18", "PTQ time, logging off (s)")]
    assert failed.mct.startswith("error: ValueError: boom") and "|" not in failed.mct and failed.met is None
    assert ("resnet18", "quantized accuracy (%)") not in rows  # accuracy only where it was measured

    md = table.rows_markdown(list(rows.values()))
    assert md.count("\n") == len(rows) + 1 and "**MISSED**" in md and "**met**" in md
    summary = dict((t, (met, where)) for t, met, where in table.targets_summary(list(rows.values()), True))
    assert summary[f"PTQ time, logging off <= {table.TIME_RATIO_TARGET}x MCT's"] == (
        True,
        ["resnet18 (not measured)"],
    )
    acc_target = next(v for k, v in summary.items() if k.startswith("quantized accuracy"))
    assert acc_target == (False, ["digits"])


def test_growth_exponent():
    depths = [20, 50, 100, 200]
    assert table.loglog_slope(depths, [0.01 * d for d in depths]) == pytest.approx(1.0)
    assert table.loglog_slope(depths, [0.001 * d * d for d in depths]) == pytest.approx(2.0)
    assert table.loglog_slope([1], [1]) is None
    s = table.Scaling(
        depths, [0.5 + 0.01 * d for d in depths], [0.001 * d * d for d in depths], [1e4 * d for d in depths]
    )
    md, met = table.scaling_markdown(s)
    assert met is False  # logging-on time grows quadratically
    assert "| 200 |" in md and "100 -> 200" in md
    s.on = [0.02 * d for d in depths]
    assert table.scaling_markdown(s)[1] is True


def test_replace_section_keeps_the_rest():
    text = "# T\n\nintro\n\n## Performance\n\nold\ntable\n\n## Next\n\nkept\n"
    out = table.replace_section(text, "## Performance", "new body")
    assert out == "# T\n\nintro\n\n## Performance\n\nnew body\n\n## Next\n\nkept\n"
    assert table.replace_section(out, "## Performance", "new body") == out  # idempotent
    last = table.replace_section("# T\n\n## Performance\n\nold\n", "## Performance", "x")
    assert last == "# T\n\n## Performance\n\nx\n"
    assert table.replace_section("# T\n", "## Performance", "x").endswith("## Performance\n\nx\n")


def test_counts_a_real_log_with_tensorboard(tmp_path):
    torch = pytest.importorskip("torch")
    import model_compression_toolkit as mct
    from bench.models import torch_conv_stack

    x = np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)
    mct.set_log_folder(tmp_path)
    try:
        config = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))
        mct.ptq.pytorch_post_training_quantization(torch_conv_stack(2, width=4), lambda: iter([[x]]), config)
    finally:
        mct.set_log_folder(None)
    runs, tags = table.count_tensorboard(tmp_path)
    assert runs >= 5 and tags > runs  # one run per stage, each with a graph and more
    assert table.folder_bytes(tmp_path) > 0
    assert table.folder_bytes(tmp_path / "missing") == 0
    del torch
