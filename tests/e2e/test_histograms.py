"""Issue 23, point 2: float and quantized histograms can be compared in TensorBoard.

They used to be two tags on two cards, never overlaid; with an outlier channel both looked
like the same spike, and Distributions, with one step, drew nothing. Now a layer's float
and quantized outputs are steps 0 and 1 of one tag on the same bins: Overlay mode draws
both in one card, whose title gives the shares rounded to zero and clipped, and
Distributions draws how quantization moves each percentile.

The title is the summary's display name: the Histograms and Distributions dashboards show
it above the tag (read here from the card as drawn); Time Series shows the tag alone, which
stays the layer's name so a layer keeps one card across calls and tuning trials.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e import browser, pages

pytestmark = pytest.mark.e2e

OUTLIER_CALLS = ("pytorch_outlier", "keras_outlier")


def served_edges(buckets: list) -> list[float]:
    """The bucket edges of one served histogram ([left, right, count] rows)."""
    return [buckets[0][0], *(right for _, right, _ in buckets)]


def one_grid(a: list[float], b: list[float]) -> bool:
    """Whether two steps' buckets are cut from the same edges: the inner edges of each are an
    unbroken run of the edges of both (TensorBoard trims each step's empty end buckets and
    ends the last one at the histogram's max, so only the inner edges are the bins')."""
    edges = sorted(set(a[1:-1]) | set(b[1:-1]))

    def run(inner: list[float]) -> bool:
        start = edges.index(inner[0])
        return edges[start : start + len(inner)] == inner

    return run(a[1:-1]) and run(b[1:-1])


@pytest.mark.parametrize("key", OUTLIER_CALLS)
def test_float_and_quantized_are_two_steps_of_one_card_on_the_same_bins(board, calls, driver, key):
    logged = calls[key]
    layer, run = logged.names["activation"], logged.name("5_quantized_graph")
    served = board.json("/data/plugin/histograms/histograms", run=run, tag=layer)
    assert [step for _, step, _ in served] == [0, 1]
    float_edges, quantized_edges = (served_edges(buckets) for _, _, buckets in served)
    assert one_grid(float_edges, quantized_edges), (float_edges, quantized_edges)

    pages.open_dashboard(driver, board, pages.fragment("histograms", f"^{re.escape(layer)}$", f"^{re.escape(run)}$"), [run])
    pages.histogram_mode(driver, "overlay")
    outlines = browser.wait_for(
        lambda: (d := pages.on_card(driver, "tf-histogram-loader", run, layer, """
            const out = [];
            walkAll(el, n => { if (n.nodeName === 'path' && n.classList.contains('outline')) out.push(n.getAttribute('d')); });
            return out;""")) and len(d) == 2 and d,
        pages.DASHBOARD_TIMEOUT_S, f"both steps of {layer} drawn in one card",
    )  # fmt: skip
    assert outlines[0] != outlines[1]  # quantization moved some values: two different curves


@pytest.mark.parametrize("key", OUTLIER_CALLS)
def test_the_card_title_gives_the_share_rounded_to_zero_and_clipped(board, calls, driver, key):
    logged = calls[key]
    layer, run = logged.names["activation"], logged.name("5_quantized_graph")
    (quantizer,) = [q for q in logged.info.similarity.quantizers if (q.name, q.kind) == (layer, "activation")]
    pages.open_dashboard(driver, board, pages.fragment("histograms", f"^{re.escape(layer)}$", f"^{re.escape(run)}$"), [run])
    heading = browser.wait_for(  # what the card shows above its chart, not a property
        lambda: pages.on_card(driver, "tf-histogram-loader", run, layer, browser.TEXT_JS + """
            const h = el.shadowRoot && el.shadowRoot.querySelector('tf-card-heading');
            if (!h || !h.displayName) return null;
            const box = h.getBoundingClientRect(), card = el.getBoundingClientRect();
            const clipped = [];
            walkAll(h, n => { if (n.clientWidth > 0 && n.scrollWidth > n.clientWidth + 1) clipped.push(n.className); });
            return {text: text(h), inside: box.left >= card.left - 1 && box.right <= card.right + 1, clipped};"""),
        pages.DASHBOARD_TIMEOUT_S, "the card's title",
    )  # fmt: skip
    assert heading["inside"] and heading["clipped"] == [], heading
    title = heading["text"]
    rounded = re.search(r"rounded to 0: ([\d.]+) %", title)
    clipped = re.search(r"clipped: ([\d.]+) %", title)
    assert rounded and clipped, title
    assert abs(float(rounded[1]) - quantizer.zero_rounded_percent) < 0.1, title  # most of its values: the outlier
    assert float(rounded[1]) > 50
    assert abs(float(clipped[1]) - quantizer.clipped_percent) < 0.01, title


@pytest.mark.parametrize("key", OUTLIER_CALLS)
def test_distributions_draw_how_quantization_moves_the_percentiles(board, calls, driver, key):
    logged = calls[key]
    layer, run = logged.names["activation"], logged.name("5_quantized_graph")
    pages.open_dashboard(driver, board, pages.fragment("distributions", f"^{re.escape(layer)}$", f"^{re.escape(run)}$"), [run])
    widths = browser.wait_for(
        lambda: pages.on_card(driver, "tf-distribution-loader", run, layer, """
            const out = [];
            walkAll(el, n => { if (n.nodeName === 'path' && n.classList.contains('area')) out.push(n.getBBox().width); });
            return out.length ? out : null;"""),
        pages.DASHBOARD_TIMEOUT_S, f"the distribution of {layer}",
    )  # fmt: skip
    assert max(widths) > 50, widths  # one step draws bands of no width: nothing to see
