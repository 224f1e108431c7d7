"""Headless Debian Chromium driven by Selenium, and reading TensorBoard's shadow DOM.

TensorBoard's dashboards are Polymer elements: their text lives inside shadow roots, which
`document.body.innerText` does not reach. The scripts here walk every shadow root.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
INSTALL_HINT = "install Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
WINDOW = (1400, 1000)
PAGE_TIMEOUT_S = 30.0

_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
    "--disable-dev-shm-usage", f"--window-size={WINDOW[0]},{WINDOW[1]}",
    # Nothing but the local TensorBoard resolves: a page asking for anything else fails at once.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]  # fmt: skip

# `find(root, selector)`: the first match in the document or in any shadow root below it.
_FIND = """
function find(root, selector) {
  const hit = root.querySelector(selector);
  if (hit) return hit;
  for (const el of root.querySelectorAll('*')) {
    if (el.shadowRoot) { const h = find(el.shadowRoot, selector); if (h) return h; }
  }
  return null;
}
"""
# text(root): the text shown under root, shadow roots included, styles left out
TEXT_JS = """
function text(root) {
  const out = [];
  (function walk(n) {
    if (n.nodeType === Node.TEXT_NODE) { out.push(n.textContent); return; }
    if (n.nodeName === 'STYLE' || n.nodeName === 'SCRIPT') return;
    if (n.shadowRoot) walk(n.shadowRoot);
    for (const c of n.childNodes) walk(c);
  })(root);
  return out.join(' ').replace(/\\s+/g, ' ');
}
"""
_IMAGES = """
function images(root) {
  const out = [];
  (function walk(n) {
    if (n.nodeName === 'IMG') out.push(n);
    if (n.shadowRoot) walk(n.shadowRoot);
    for (const c of n.children || []) walk(c);
  })(root);
  return out;
}
"""

T = TypeVar("T")


def missing_binaries() -> str | None:
    """Why the browser tests cannot run here, or None when Chromium and its driver are installed."""
    absent = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    return f"{' and '.join(absent)} not found: {INSTALL_HINT}" if absent else None


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium WebDriver with a fresh profile; quit and its profile removed at the end."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="chromium_profile_") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for flag in [*_FLAGS, f"--user-data-dir={profile}"]:
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
        try:
            driver.set_page_load_timeout(PAGE_TIMEOUT_S)
            driver.set_script_timeout(PAGE_TIMEOUT_S)
            driver.set_window_size(*WINDOW)
            yield driver
        finally:
            driver.quit()


def wait_for(probe: Callable[[], T | None], timeout_s: float, what: str, interval_s: float = 0.5) -> T:
    """The first truthy `probe()` within `timeout_s`; TimeoutError naming `what` otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s:.0f} s for {what}")
        time.sleep(interval_s)


def open_page(driver, url: str) -> None:
    """Load `url` afresh (a hash change alone would keep the previous dashboard in the DOM)."""
    driver.get("about:blank")
    driver.get(url)


def deep_text(driver, selector: str | None = None) -> str:
    """The text of the page (or of the first `selector` match), shadow roots included."""
    return driver.execute_script(
        _FIND + TEXT_JS + "const root = arguments[0] ? find(document, arguments[0]) : document.documentElement;"
        "return root ? text(root) : '';",
        selector,
    )


def call_on(driver, selector: str, body: str, *args: Any) -> Any:
    """Run `body` with `el` bound to the first `selector` match (shadow roots included)."""
    return driver.execute_script(
        _FIND + f"const el = find(document, {selector!r}); if (!el) return null;\n{body}", *args
    )


def wait_for_text(driver, expected: list[str], timeout_s: float, selector: str | None = None) -> str:
    """The page text once every string of `expected` is in it."""

    def probe() -> str | None:
        text = deep_text(driver, selector)
        return text if all(s in text for s in expected) else None

    try:
        return wait_for(probe, timeout_s, f"{expected} on {driver.current_url}")
    except TimeoutError as error:
        text = deep_text(driver, selector)
        missing = [s for s in expected if s not in text]
        raise TimeoutError(f"{error}; missing {missing}; the page says: {text[:2000]}") from None


def wait_for_images(driver, timeout_s: float) -> int:
    """The number of <img> on the page, once every one of them is decoded."""
    script = _IMAGES + (
        "const all = images(document.documentElement);"
        "return all.every(i => i.complete && i.naturalWidth > 0) ? all.length + 1 : 0;"
    )
    return wait_for(lambda: driver.execute_script(script), timeout_s, "images to load") - 1


def foreign_requests(driver, base_url: str) -> list[str]:
    """Resources the page fetched from anywhere but `base_url` (and data:/blob: URLs)."""
    urls = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name);")
    return [u for u in urls if not u.startswith((base_url, "data:", "blob:"))]
