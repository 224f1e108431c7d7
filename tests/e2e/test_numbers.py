"""Issue 23, point 7: every report of a call tells the same counts and sizes.

``mct.log`` said "4 layers kept in float" where the Text summary said 1, ``info.float_layers``
listed fused convs whose weights are 8-bit, and the float weights were 56.2 KiB in the log
and 56.4 KiB in the tuning table. Each count and size now has one definition
(`core.info`); this compares them across ``mct.log``, the Text summary TensorBoard shows,
the JSON report and ``info``.
"""

from __future__ import annotations

import json
import re

import pytest

from model_compression_toolkit.core.numbers import format_bytes
from tests.e2e import browser, pages
from tests.e2e.logs import CALLS

pytestmark = pytest.mark.e2e

LOG_LINE = re.compile(
    r"weights (?P<before>[\d.]+ \w+) -> (?P<after>[\d.]+ \w+), (?P<quantized>\d+) layers quantized, "
    r"(?P<kept>\d+) kept in float"
)


def text_summary(driver, board, run: str) -> dict[str, str]:
    """The totals table of the stage's Text summary as the page shows it: row name -> value."""
    pages.open_dashboard(driver, board, pages.fragment("text", tags="^summary$", runs=f"^{re.escape(run)}$"), [run])
    rows = browser.wait_for(
        lambda: pages.card_rows(driver, "tf-text-loader", run, "summary"),
        pages.DASHBOARD_TIMEOUT_S, f"the summary of {run}",
    )  # fmt: skip
    return {r[0]: r[1] for r in rows if len(r) == 2}


@pytest.mark.parametrize("key", CALLS)
def test_counts_and_sizes_agree_in_the_log_the_text_summary_the_json_report_and_info(board, calls, driver, key):
    logged = calls[key]
    info = logged.info
    log = LOG_LINE.search((logged.run / "mct.log").read_text())
    assert log, "mct.log names no counts"
    table = text_summary(driver, board, logged.name("5_quantized_graph"))
    as_json = json.loads(json.dumps(info.to_dict()))
    report = json.loads((logged.run / "similarity_report.json").read_text())["suggested_fix"]

    quantized = {info.counts.quantized, int(log["quantized"]), int(table["quantized layers (a quantizer of their own)"]),
                 as_json["counts"]["quantized"]}  # fmt: skip
    kept = {len(info.float_layers), info.counts.kept_float, int(log["kept"]), int(table["layers kept in float"]),
            len(as_json["float_layers"]), as_json["counts"]["kept_float"]}  # fmt: skip
    assert len(quantized) == 1 and len(kept) == 1, (quantized, kept)
    weights = {format_bytes(info.memory.weights_quantized_bytes), log["after"], table["weights memory"],
               format_bytes(as_json["memory"]["weights_quantized_bytes"]), format_bytes(report["weights_bytes_before"])}  # fmt: skip
    assert len(weights) == 1, weights
    assert log["before"] == format_bytes(info.memory.weights_float_bytes)
    assert report["activation_bytes_before"] == info.memory.activation_quantized_bytes
    # a layer kept in float has no quantized weight: a conv fused with its ReLU is not one
    assert all(not info.layers[name].weights for name in info.float_layers), info.float_layers


def test_the_fix_costs_what_the_report_said_it_would(calls):
    """The outlier call's report prices its suggested fix; the call that applies it has that size."""
    report = json.loads((calls["pytorch_outlier"].run / "similarity_report.json").read_text())["suggested_fix"]
    fixed = calls["pytorch_fixed"].info.memory
    assert report["weights_bytes_after"] == fixed.weights_quantized_bytes
    assert report["activation_bytes_after"] == fixed.activation_quantized_bytes


@pytest.mark.parametrize("key", ["pytorch_outlier", "keras_outlier"])
def test_the_causes_card_prices_the_fix_in_the_sizes_of_the_json_report(board, calls, driver, key):
    """The Text dashboard's similarity/causes shows the fix's code once, then what it costs:
    the weights before and after as the JSON report gives them."""
    logged = calls[key]
    run = logged.name("5_quantized_graph")
    fix = json.loads((logged.run / "similarity_report.json").read_text())["suggested_fix"]
    pages.open_dashboard(driver, board, pages.fragment("text", "^similarity/causes$", f"^{re.escape(run)}$"), [run])
    first_line = fix["code"].splitlines()[0]

    def rendered() -> str | None:  # the card's title shows before its Markdown body
        text = pages.card_text(driver, "tf-text-loader", run, "similarity/causes")
        return text if text and first_line in text else None

    text = browser.wait_for(rendered, pages.DASHBOARD_TIMEOUT_S, "the causes card's fix")
    assert text.count(first_line) == 1, text
    before, after = (format_bytes(fix[f"weights_bytes_{when}"]) for when in ("before", "after"))
    assert f"({before.removesuffix(' KiB')} -> {after})" in text, (before, after, text)
