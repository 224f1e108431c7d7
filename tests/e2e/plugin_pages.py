"""The Quantization dashboard in the browser: its frame, its boxes, and the docs' pictures of it.

open_call(driver, url)        TensorBoard at ``url`` (``#quantization&run=<call>``) -> the
                              driver inside the plugin's frame, once the page is drawn
dashboard / dashboard_calls   the docs' screenshots (`tests.e2e.screenshots.SHOTS`)
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from tests.e2e import browser

PAGE_TIMEOUT_S = 90.0

# the plugin's iframe (TensorBoard puts it in a shadow root), once its page has begun to draw
_FRAME = """
const out = [];
(function walk(n) {
  if (n.nodeName === 'IFRAME') out.push(n);
  if (n.shadowRoot) walk(n.shadowRoot);
  for (const c of n.children || []) walk(c);
})(document.documentElement);
return out.find((f) => f.contentDocument && f.contentDocument.querySelector('#quantization')) || null;
"""


def open_call(driver, url: str, ready: str = ".verdict") -> Any:
    """Load ``url`` afresh and switch into the plugin's frame once ``ready`` is in it; returns
    the frame element (``driver.switch_to.default_content()`` leaves it)."""
    browser.open_page(driver, url)
    frame = browser.wait_for(lambda: driver.execute_script(_FRAME), PAGE_TIMEOUT_S, "the plugin's frame")
    driver.switch_to.frame(frame)
    browser.wait_for(lambda: driver.execute_script("return !!document.querySelector(arguments[0])", ready),
                     PAGE_TIMEOUT_S, f"{ready} in the plugin's page")  # fmt: skip
    return frame


def boxes(driver, frame, selectors: list[str]) -> list[dict]:
    """The window's boxes of the first match of each selector in the plugin's frame (the driver
    inside it), for cropping a screenshot of the whole window."""
    inner = driver.execute_script(
        "return arguments[0].map((s) => { const r = document.querySelector(s).getBoundingClientRect();"
        " return {x: r.x, y: r.y, width: r.width, height: r.height}; });",
        selectors,
    )
    driver.switch_to.default_content()
    origin = driver.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return {x: r.x, y: r.y};", frame
    )
    driver.switch_to.frame(frame)
    return [{**b, "x": b["x"] + origin["x"], "y": b["y"] + origin["y"]} for b in inner]


def _shot(driver, board, fragment: str, ready: str, selectors: list[str]) -> Any:
    from tests.e2e.screenshots import snap

    frame = open_call(driver, f"{board.url}/#{fragment}", ready)
    try:
        found = boxes(driver, frame, selectors)
    finally:
        driver.switch_to.default_content()
    return snap(driver, found)


def dashboard(driver, board, logs) -> Any:
    """The Quantization tab on the outlier call: the verdict, the cause with its channel, the fix."""
    run = logs["pytorch_outlier"].run.relative_to(logs["pytorch_outlier"].log_folder).as_posix()
    return _shot(driver, board, f"quantization&run={quote(run, safe='')}", ".verdict",
                 [".verdict", ".cause", ".fix"])  # fmt: skip


def dashboard_calls(driver, board, logs) -> Any:
    """The Quantization tab's landing page: the calls in the log folder, newest first (the first three)."""
    return _shot(
        driver,
        board,
        "quantization",
        "table.calls",
        ["table.calls thead", "table.calls tbody tr:nth-child(3)"],
    )
