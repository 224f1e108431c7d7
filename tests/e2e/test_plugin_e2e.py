"""Issue 32: the Quantization dashboard in the real TensorBoard, in headless Chromium.

    two-cause digits CNN (`tests.fixtures.two_causes`) -> PTQ into a log folder
    -> the console's last line: ``tensorboard --logdir <call> and open <url>``
    -> that command (on a free port) -> the url -> the plugin's iframe

On the first screen (no scrolling): the verdict, both causes with their channel, and the
fix. A layer named ``<img src=x onerror=alert(1)>`` shows as text: no element is made of it.
The snippet read off the page, run in a fresh namespace, quantizes the model back to its
float accuracy.
"""

from __future__ import annotations

import shlex

import pytest

from tests.e2e import browser
from tests.e2e.plugin_pages import PAGE_TIMEOUT_S, open_call
from tests.e2e.server import tensorboard
from tests.fixtures.two_causes import HTML_NAME, logged_call, two_cause_model

pytestmark = pytest.mark.e2e
PRINTED_HOST = "http://localhost:6006"


@pytest.fixture(scope="module")
def page(driver, tmp_path_factory):
    """(driver inside the plugin's frame showing the call, its info, names) once the page is drawn."""
    from tests.conftest import FRAMEWORKS

    fw = FRAMEWORKS["pytorch"]
    model, names, config = two_cause_model(fw)
    info, line = logged_call(fw, tmp_path_factory.mktemp("plugin_e2e"), model, config)
    printed, url = line.split("to see this call: ", 1)[1].split(" and open ")
    command = shlex.split(printed)
    assert command[:2] == ["tensorboard", "--logdir"] and url.startswith(
        f"{PRINTED_HOST}/#quantization&run="
    ), line
    with tensorboard(command[2]) as board:
        open_call(driver, url.replace(PRINTED_HOST, board.url))  # the driver is now in the plugin's frame
        try:
            yield driver, fw, model, info, names
        finally:
            driver.switch_to.default_content()


def first_screen(driver, selector: str) -> list[str]:
    """The text of every ``selector`` match whose top is inside the frame's first screen."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])]"
        ".filter((e) => e.getBoundingClientRect().top < window.innerHeight).map((e) => e.textContent);",
        selector,
    )


def test_both_causes_their_channel_and_the_fix_are_on_the_first_screen(page):
    driver, _, _, info, names = page
    assert driver.execute_script("return window.scrollY") == 0
    (verdict,) = first_screen(driver, ".verdict")
    assert "damage the output on their own" in verdict, verdict
    causes = first_screen(driver, ".cause h3")
    assert any(c.startswith(f"{names['activation']} output ") for c in causes), causes
    assert any(c.startswith(f"{names['weights']} weights ") for c in causes), causes
    evidence = " ".join(first_screen(driver, ".cause li"))
    assert f"channel {names['channel']}" in evidence, evidence
    (snippet,) = first_screen(driver, ".fix pre")
    assert snippet == info.similarity.suggested_fix().code()


def test_a_layer_named_with_html_shows_as_text(page):
    driver = page[0]
    assert driver.execute_script("return document.querySelectorAll('img, [onerror]').length") == 0
    titles = driver.execute_script(
        "return [...document.querySelectorAll('svg title')].map((t) => t.textContent)"
    )
    assert f"{HTML_NAME} (ReLU)" in titles, titles
    node = driver.execute_script(
        "return [...document.querySelectorAll('g.node')].find((g) => g.dataset.layer === arguments[0]) || null",
        HTML_NAME,
    )
    node.click()  # its numbers, in a panel that names it as text
    panel = browser.wait_for(lambda: driver.execute_script("return document.querySelector('.node-panel h4')"),
                             PAGE_TIMEOUT_S, "the node's panel")  # fmt: skip
    assert panel.text == f"{HTML_NAME} (ReLU)"
    assert driver.execute_script("return document.querySelectorAll('img, [onerror]').length") == 0


def test_the_snippet_on_the_page_pasted_after_the_call_gives_the_accuracy_back(page):
    driver, fw, model, _, _ = page
    from tests.fixtures.digits import accuracy, representative_dataset

    snippet = driver.execute_script("return document.querySelector('.fix pre').textContent")
    namespace: dict = {}
    exec(compile(snippet, "<the dashboard's snippet>", "exec"), namespace)  # a fresh script's namespace
    x_train, _, x_test, y_test = fw.data()
    fixed, _ = fw.ptq(model, representative_dataset(x_train), core_config=namespace["core_config"])
    float_acc = accuracy(fw.predict(model), x_test, y_test)
    assert accuracy(fw.predict(fixed), x_test, y_test) >= float_acc - 1.0, snippet


def test_clicking_the_cause_shows_its_numbers_and_its_histogram(page):
    driver, _, _, info, names = page
    layer = info.similarity.layer(names["activation"])
    node = driver.execute_script(
        "return [...document.querySelectorAll('g.node')].find((g) => g.dataset.layer === arguments[0])",
        names["activation"],
    )
    node.click()
    panel = browser.wait_for(
        lambda: driver.execute_script("return document.querySelector('.node-panel .node-histogram') && "
                                      "document.querySelector('.node-panel').textContent"),
        PAGE_TIMEOUT_S, "the cause's histogram",
    )  # fmt: skip
    assert "cause: damages the output on its own" in panel, panel
    assert f"rounded to 0: {layer.zero_rounded_percent:.1f} %" in panel, panel
    assert f"{layer.sqnr_db:.1f} dB" in panel, panel  # accumulated


def test_the_list_of_calls_opens_the_call_and_the_url_names_it(page):
    """Back to the list, open the call from it: TensorBoard's URL names the call, and loading
    that URL afresh opens its page again (a reload, or a link shared)."""
    driver, _, _, info, _ = page
    driver.execute_script("document.querySelector('nav button').click()")
    rows = browser.wait_for(
        lambda: driver.execute_script("return document.querySelector('table.calls')?.textContent"),
        PAGE_TIMEOUT_S, "the list of calls",
    )  # fmt: skip
    assert info.log_folder.name in rows and info.model_name in rows, rows
    driver.execute_script("document.querySelector('button[data-run]').click()")
    browser.wait_for(
        lambda: driver.execute_script("return !!document.querySelector('.verdict')"),
        PAGE_TIMEOUT_S,
        "the page",
    )
    driver.switch_to.default_content()
    url = driver.current_url
    assert url.endswith(f"#quantization&run={info.log_folder.name}"), url
    open_call(driver, url)  # afresh: the call's page, the driver back in its frame
    assert driver.execute_script("return document.querySelector('h2').textContent").endswith(
        info.log_folder.name
    )
