"""Issue 23, point 4: the error colours say what they mean.

"Color by device" painted high error pale green and low error blue-grey, the Keras legend
read "low:0 / medium:0", and the cosine summary coloured the classifier (cosine 0.60) as
fine because its class came from local error. Now high error is the warmest colour and
low the coolest on every graph coloured by error, the legend is in words and says which
error it means, and the summary colours by the accumulated error.
"""

from __future__ import annotations

import io
import re

import pytest
from PIL import Image

from tests.e2e import browser, pages, pictures
from tests.fixtures.tb import layer_name

pytestmark = pytest.mark.e2e

ALL_CALLS = ("pytorch", "keras", "pytorch_outlier", "pytorch_fixed", "keras_outlier")
OUTLIER_CALLS = ("pytorch_outlier", "keras_outlier")


def open_graph(driver, board, run: str, tag: str = "Default") -> None:
    browser.open_page(driver, f"{board.url}/#graphs")
    pages.select_graph(driver, run, tag)


def on_screen(driver) -> dict[str, tuple[int, int, int]]:
    """Layer -> the colour drawn at the middle of its node, as the screen shows it."""
    shapes = {layer_name(node): box for node, box in pages.node_shapes(driver).items()}
    screen = pages.screenshot(driver)
    return {
        layer: screen.getpixel((int(box["x"] + box["width"] / 2), int(box["y"] + box["height"] / 2)))
        for layer, box in shapes.items()
    }


@pytest.mark.parametrize("key", ALL_CALLS)
def test_high_error_is_warm_low_error_cool_and_the_legend_is_in_words(board, calls, driver, key):
    open_graph(driver, board, calls[key].name("5_quantized_graph"))
    colours = pages.device_colours(driver)
    (high,) = [pictures.rgb(c) for d, c in colours.items() if re.search(r"\bhigh\b", d)]
    (low,) = [pictures.rgb(c) for d, c in colours.items() if re.search(r"\blow\b", d)]
    assert pictures.warm(high) and pictures.cool(low), (high, low)  # salmon and blue-grey, not pale green
    entries = pages.legend(driver)
    for entry in entries:
        label = entry.rsplit(":", 1)[0]  # TensorBoard shows the device index after a colon
        assert re.fullmatch(r"[a-z][A-Za-z ,≥<.\d-]*", label) and len(label.split()) >= 3, entry  # not error_high
    judged = [e for e in entries if e.split()[0] in ("low", "medium", "high")]
    assert len(judged) == 3 and all("own error" in e for e in judged), entries  # which error: the layer's own


@pytest.mark.parametrize("key", OUTLIER_CALLS)
def test_on_screen_the_cause_is_drawn_warm_and_a_healthy_layer_cool(board, calls, driver, key):
    logged = calls[key]
    report = logged.info.similarity
    cause = report.causes()[0].name
    healthy = [la.name for la in report.layers if la.damage_class == "low" and la.role is None
               and logged.info.layers[la.name].activation]  # fmt: skip
    open_graph(driver, board, logged.name("5_quantized_graph"))
    colour = on_screen(driver)
    assert pictures.warm(colour[cause]), (cause, colour[cause])
    assert healthy and all(pictures.cool(colour[name]) for name in healthy), {n: colour[n] for n in healthy}


@pytest.mark.parametrize("key", OUTLIER_CALLS)
def test_the_resources_tag_keeps_the_run_graphs_palette(board, calls, driver, key):
    """Under ``Resources`` TensorBoard met the devices in another order and gave them other
    colours: the cause turned pale cyan, "no quantizer" peach. Now every class, and every
    node, has the colour it has in the run graph; the cause stays warm."""
    logged = calls[key]
    cause = logged.info.similarity.causes()[0].name
    run = logged.name("5_quantized_graph")
    seen = {}
    for tag in ("Default", "Resources"):
        open_graph(driver, board, run, tag)
        seen[tag] = pages.device_colours(driver), on_screen(driver)
    (default, default_nodes), (resources, resources_nodes) = seen["Default"], seen["Resources"]
    assert resources == default
    assert pictures.warm(resources_nodes[cause]), (cause, resources_nodes[cause])
    layers = {la.name for la in logged.info.similarity.layers} & set(default_nodes)
    assert layers and {n: resources_nodes[n] for n in layers} == {n: default_nodes[n] for n in layers}


@pytest.mark.parametrize("key", OUTLIER_CALLS)
def test_the_summary_colours_the_damaged_classifier_by_its_accumulated_error(board, calls, driver, key):
    """The classifier's own quantizers do little, but everything before it reaches it: its
    dot is red (accumulated error high); the input's is blue."""
    logged = calls[key]
    layers = sorted(logged.info.similarity.layers, key=lambda la: la.position)
    assert layers[-1].accumulated_class == "high" and layers[0].accumulated_class == "low"
    run, tag = logged.name("5_quantized_graph"), "Cosine similarity/0_summary"
    pages.open_dashboard(driver, board, pages.fragment("images", "0_summary", f"^{re.escape(run)}$"), [run])
    browser.wait_for_images(driver, pages.DASHBOARD_TIMEOUT_S)
    (img,) = pages.card_images(driver, run, tag)
    image = Image.open(io.BytesIO(pages.fetch_image(driver, img["src"]))).convert("RGB")
    frame = pictures.plot_frame(image)
    row = (frame.bottom - frame.top) / len(layers)
    plot = pictures.pixels(image)

    def inside(i: int):
        top = int(frame.top + i * row + 2)
        return plot[top : int(top + row - 4), frame.left + 2 : frame.right - 1]

    assert pictures.reddish(inside(len(layers) - 1)).sum() > 10
    assert pictures.bluish(inside(0)).sum() > 10 and pictures.reddish(inside(0)).sum() == 0
