"""Issue 23, point 6: the similarity pictures can be read where TensorBoard shows them.

There were 21 images a call, wider than the card and shrunk to about 7 px text; the
summary sorted after ``sample_19``, onto page 2; its red marker always fell on the output
layer, the symptom. Now the summary sorts first, is drawn at the card's width with text of
10 px or more, and marks the worst cause and where the accumulated drop starts.

Issue 32: five calls still made 105 "Cosine similarity" cards. The per-sample plots are
now one card, a step per sample (the 10 with the lowest cosine, as many as TensorBoard
keeps per tag), after the summary: two cards a call.
"""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from PIL import Image

from tests.e2e import browser, pages, pictures

pytestmark = pytest.mark.e2e

SUMMARY = "Cosine similarity/0_summary"
SAMPLES = "Cosine similarity/1_samples"
MIN_GLYPH_PX = 7  # the height of a digit in a 10 px font (DejaVu Sans: 0.73 em)
OUTLIER_CALLS = ("pytorch_outlier", "keras_outlier")


def test_each_summary_is_on_the_first_page_before_its_samples(board, calls, driver):
    """Opened with no filter, the Images dashboard's first page shows every call's summary,
    each before the one card of its per-sample plots, whose steps are the samples with the
    lowest cosine."""
    from model_compression_toolkit.observers.cosine_plots import cosine_matrix, worst_samples

    browser.open_page(driver, f"{board.url}/#images")
    runs = {logged.name("5_quantized_graph") for logged in calls.values()}
    shown = browser.wait_for(
        lambda: (c := [c for c in pages.cards(driver, "tf-image-loader") if c["run"] in runs])
        and {x["run"] for x in c} == runs and c,
        pages.DASHBOARD_TIMEOUT_S, "the similarity pictures of every call",
    )  # fmt: skip
    for logged in calls.values():
        run = logged.name("5_quantized_graph")
        tags = [c["tag"] for c in shown if c["run"] == run]
        assert tags[:2] == [SUMMARY, SAMPLES], (run, tags)
        served = board.json("/data/plugin/images/tags")[run]
        assert sorted(t for t in served if t.startswith("Cosine similarity/")) == [SUMMARY, SAMPLES]
        steps = [image["step"] for image in board.json("/data/plugin/images/images", run=run, tag=SAMPLES)]
        assert len(steps) == 10 and steps == sorted(set(steps)), steps  # TensorBoard kept every step
        if getattr(logged.info, "tuning", None) is None:  # a tuned call's pictures are its first trial's
            matrix = cosine_matrix(logged.info.similarity)
            assert steps == worst_samples(matrix) and len(steps) < matrix.shape[1], steps


def summary_picture(driver, board, run: str) -> tuple[dict, Image.Image]:
    pages.open_dashboard(driver, board, pages.fragment("images", "0_summary", f"^{re.escape(run)}$"), [run])
    browser.wait_for_images(driver, pages.DASHBOARD_TIMEOUT_S)
    (img,) = pages.card_images(driver, run, SUMMARY)
    return img, Image.open(io.BytesIO(pages.fetch_image(driver, img["src"]))).convert("RGB")


def rows(image: Image.Image, n: int) -> tuple[pictures.Frame, list[float]]:
    """The plot's frame and the centre row (pixel) of each of its ``n`` layer rows."""
    frame = pictures.plot_frame(image)
    height = (frame.bottom - frame.top) / n
    return frame, [frame.top + (i + 0.5) * height for i in range(n)]


@pytest.mark.parametrize("key", OUTLIER_CALLS)
def test_the_summary_is_drawn_at_the_card_width_with_text_of_10_px(board, calls, driver, key):
    logged = calls[key]
    img, image = summary_picture(driver, board, logged.name("5_quantized_graph"))
    assert img["natural_width"] == pytest.approx(img["width"], abs=1), img  # shown as drawn, not shrunk
    assert img["natural_width"] >= 300, img  # and as wide as the card
    n = len(logged.info.similarity.layers)
    frame, centres = rows(image, n)
    labels = pictures.text_bands(image, 0, frame.left - 4, frame.top, frame.bottom)
    assert len(labels) == n, labels  # one layer name per row, left of the plot
    heights = [last - first + 1 for first, last in labels]
    assert float(np.median(heights)) >= MIN_GLYPH_PX, heights
    for (first, last), centre in zip(labels, centres):
        assert first <= centre <= last + 1  # each name level with its row


@pytest.mark.parametrize("key", OUTLIER_CALLS)
def test_the_summary_marks_the_worst_cause_and_where_the_drift_starts_not_the_output(board, calls, driver, key):
    logged = calls[key]
    report = logged.info.similarity
    names = [la.name for la in sorted(report.layers, key=lambda la: la.position)]
    cause, start = names.index(report.causes()[0].name), names.index(report.drop_start().name)
    assert cause < len(names) - 1 and start < len(names) - 1  # the output is only where it shows
    _, image = summary_picture(driver, board, logged.name("5_quantized_graph"))
    frame, centres = rows(image, len(names))
    plot = pictures.pixels(image)

    def marked(i: int) -> int:
        """Red pixels right of the plot, level with row ``i``."""
        y = int(round(centres[i]))
        return int(pictures.reddish(plot[y - 4 : y + 5, frame.right + 2 :]).sum())

    assert marked(cause) > 10 and marked(start) > 10, (cause, start, [marked(i) for i in range(len(names))])
    assert marked(len(names) - 1) == 0


def test_time_series_shows_two_cosine_cards_a_call(board, calls, driver):
    """TensorBoard's default dashboard, filtered to the cosine pictures, counts two cards a
    call (it counted 21 a call, 105 for five)."""
    pages.open_dashboard(driver, board, "timeseries", ["Pinned"])
    typed = browser.wait_for(
        lambda: driver.execute_script(pages._WALK + """
            let done = false;
            walkAll(document.documentElement, n => {
              if (n.nodeName === 'INPUT' && (n.placeholder || '').startsWith('Filter tags')) {
                n.value = '^Cosine similarity/'; n.dispatchEvent(new Event('input', {bubbles: true})); done = true;
              }
            });
            return done;"""),
        pages.DASHBOARD_TIMEOUT_S, "Time Series' tag filter",
    )  # fmt: skip
    assert typed
    count = browser.wait_for(  # the count shows once every run's tags are in
        lambda: (m := re.search(r"Tags matching filter (\d+) cards?", browser.deep_text(driver)))
        and int(m[1]) >= 2 * len(calls) and int(m[1]),
        pages.DASHBOARD_TIMEOUT_S, "the count of cards matching the filter",
    )  # fmt: skip
    assert count == 2 * len(calls)
