"""Issue 23, point 3: an outlier channel shows in TensorBoard.

The per-channel min/max/mean are Scalars with the channel as step (MCT's layout, kept), but
smoothing invents a tail and "Ignore outliers in chart scaling" clips the outlier channel
away. Each quantized layer also gets a picture under Images: channel on x, min to max and
mean per channel, the grid's top as a line, outlier channels in red and named, the layers
with outliers first.
"""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from PIL import Image

from tests.e2e import browser, pages, pictures

pytestmark = pytest.mark.e2e

TAG = "Per-channel ranges/"
ORANGE = (255, 127, 14)  # any clearly orange line: the grid's top


def per_channel_cards(driver, board, run: str) -> list[dict]:
    """The Per-channel ranges cards of ``run``, in page order, once every image is decoded."""
    pages.open_dashboard(driver, board, pages.fragment("images", tags=f"^{TAG}", runs=f"^{re.escape(run)}$"), [run])
    browser.wait_for_images(driver, pages.DASHBOARD_TIMEOUT_S)
    return [c for c in pages.cards(driver, "tf-image-loader") if c["run"] == run]


def picture(driver, run: str, tag: str) -> Image.Image:
    (img,) = pages.card_images(driver, run, tag)
    return Image.open(io.BytesIO(pages.fetch_image(driver, img["src"]))).convert("RGB")


def horizontal_line(image: Image.Image, colour: tuple[int, int, int], share: float = 0.5) -> bool:
    """Whether some row of the picture is ``colour`` (within 40 per channel) over ``share`` of its width
    (a dashed line counts its dashes)."""
    a = pictures.pixels(image).astype(int)
    close = (np.abs(a - np.array(colour)) < 40).all(axis=2)
    return bool((close.sum(axis=1) > share * 0.5 * image.width).any())


@pytest.mark.parametrize("key", ["pytorch_outlier", "keras_outlier"])
def test_each_quantized_layer_has_a_picture_and_the_outlier_layer_comes_first_naming_its_channel(
    board, calls, driver, key
):
    logged = calls[key]
    layer, channel = logged.names["activation"], logged.names["channel"]
    run = logged.name("4_thresholds_selection")
    shown = per_channel_cards(driver, board, run)
    # one picture per layer with per-channel statistics: the layers of MCT's Scalars layout
    scalars = board.json("/data/plugin/scalars/tags")[logged.name("3_after_statistics_collection", "max_per_channel")]
    assert {c["tag"].split("_", 1)[1] for c in shown} == set(scalars)
    first = shown[0]
    assert first["tag"].endswith(f"_{layer}"), [c["tag"] for c in shown]
    assert f"outlier channel(s): {channel}" in first["title"], first["title"]
    assert all("no outlier channel" in c["title"] for c in shown[1:]), [c["title"] for c in shown]

    # the Scalars layout is kept: tag = layer, step = channel; the outlier channel is the largest
    maxima = board.json("/data/plugin/scalars/scalars", run=logged.name("3_after_statistics_collection", "max_per_channel"),
                        tag=layer)  # fmt: skip
    assert max(maxima, key=lambda point: point[2])[1] == int(channel)


def test_the_outlier_is_drawn_red_against_the_grid_line_and_a_healthy_layer_is_not(board, calls, driver):
    damaged, healthy = calls["pytorch_outlier"], calls["pytorch"]
    layer = damaged.names["activation"]
    images = {}
    for logged in (damaged, healthy):
        run = logged.name("4_thresholds_selection")
        (card,) = [c for c in per_channel_cards(driver, board, run) if c["tag"].endswith(f"_{layer}")]
        images[logged is damaged] = picture(driver, run, card["tag"])
    for image in images.values():
        assert horizontal_line(image, ORANGE), "the grid's top is a line across the plot"
    red = {}
    for is_damaged, image in images.items():
        frame = pictures.plot_frame(image)  # the legend's red sample is outside it
        plot = pictures.pixels(image)[frame.top + 1 : frame.bottom, frame.left + 1 : frame.right]
        red[is_damaged] = int(pictures.reddish(plot).sum())
    assert red[True] > 30 and red[False] == 0, red
