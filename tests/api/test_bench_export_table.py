"""bench/table.py's export table and README block, and how `make bench` puts them in the
report and the README (no tool, no runtime needed)."""

from __future__ import annotations

from types import SimpleNamespace

from bench import compare_mct, table

RECORD = {
    "model": "ResNet-18", "runtime": "ONNX QDQ in onnxruntime 1.32.0", "float_bytes": 46.7 * table.MIB,
    "int8_bytes": 11.9 * table.MIB, "float_ms": 40.0, "int8_ms": 16.0, "max_steps": 1.0, "cosine": 0.99995,
    "top1": 1.0, "bias_cosine": 0.99996, "floor_cosine": 0.99998,
}  # fmt: skip


def test_export_rows_show_sizes_latency_ratios_and_parity():
    digits = {**RECORD, "model": "digits CNN", "float_bytes": 117594, "int8_bytes": 68282, "float_acc": 93.0,
              "quant_acc": 92.9, "runtime_acc": 92.9, "top1": None}  # fmt: skip
    md = table.export_markdown(
        [RECORD, digits, {"model": "X", "runtime": "TFLite int8", "error": "Boom: bad | op"}]
    )
    lines = md.splitlines()
    assert lines[0].count("|") == lines[1].count("|") == 12
    assert (
        "| ResNet-18 | ONNX QDQ in onnxruntime 1.32.0 | 46.7 | 11.9 | 0.25x | 40.00 | 16.00 | 0.40x "
        in lines[2]
    )
    assert "| 1.00 / 0.99995 / 100 % | 0.99996 | 0.99998 |" in lines[2]
    assert "| 0.112 | 0.065 | 0.58x |" in lines[3] and "/ - |" in lines[3]  # small files keep their digits
    assert "error: Boom: bad / op" in lines[4] and lines[4].count("|") == 12
    notes = table.export_notes([RECORD, digits])
    assert (
        notes
        == "- digits CNN, top-1 on the 397 test samples: float 93.00 %, our quantized model 92.90 %, the exported file 92.90 %."
    )


def test_replace_block_inserts_then_replaces_between_markers():
    text = table.replace_block("# T\n\nintro\n", "first")
    assert text.endswith(f"{table.EXPORT_BEGIN}\nfirst\n{table.EXPORT_END}\n") and text.startswith(
        "# T\n\nintro\n"
    )
    again = table.replace_block(text + "tail\n", "second\ntable")
    assert (
        "first" not in again and f"{table.EXPORT_BEGIN}\nsecond\ntable\n{table.EXPORT_END}\ntail\n" in again
    )


def test_make_bench_puts_the_export_table_in_the_report_and_the_readme():
    info = {"cores": 2, "cpu": "cpu", "gpu": "none", "python": "3.11", "commit": "abc", "load": "1.0"}
    args = SimpleNamespace(repeats=1, repeats_for="")
    export_md = "header\n\n" + table.export_markdown([RECORD])
    report = compare_mct.build_report(
        "2026-01-01", info, {}, args, "main", "scaling", "targets", [], {}, [], export_md
    )
    assert "## Exported models (ours alone, `bench/export_bench.py`)" in report and "| ResNet-18 |" in report
    body = compare_mct.readme_body("2026-01-01", info, {}, "targets", "main", "scaling", export_md)
    assert body.index(table.EXPORT_BEGIN) < body.index("| ResNet-18 |") < body.index(table.EXPORT_END)
    # the standalone script rewrites the same block in place
    updated = table.replace_block(body, "new figures")
    assert "| ResNet-18 |" not in updated and "new figures" in updated and "scaling" in updated
