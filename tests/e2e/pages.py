"""Driving TensorBoard's dashboards in the browser and reading what they show.

    open_dashboard(driver, board, "images&tagFilter=0_summary", [run])   # a fresh page, waited for
    cards(driver, "tf-image-loader")      # every card of a kind: run, tag, title, box
    on_card(driver, loader, run, tag, js) # run JavaScript on one card (shadow roots included)
    select_graph / select_node / node_attributes / node_shapes     # the Graphs dashboard

Used by the end-to-end tests and by the docs screenshots (`tests.e2e.screenshots`).
"""

from __future__ import annotations

import io
from typing import Any
from urllib.parse import quote

from tests.e2e import browser
from tests.e2e.server import TensorBoard

DASHBOARD_TIMEOUT_S = 90.0

# `walk(n)`: every element below ``n``, shadow roots included, in document order.
_WALK = """
function walkAll(root, visit) {
  (function walk(n) {
    visit(n);
    if (n.shadowRoot) walk(n.shadowRoot);
    for (const c of n.children || []) walk(c);
  })(root);
}
"""


def fragment(dashboard: str, tags: str | None = None, runs: str | None = None, **settings: Any) -> str:
    """A dashboard's URL fragment: its tag filter and run filter (regular expressions), and
    other settings TensorBoard keeps in the URL (``_smoothingWeight=0``)."""
    params = {"tagFilter": tags, "regexInput": runs, **settings}
    return "&".join([dashboard, *(f"{k}={quote(str(v), safe='')}" for k, v in params.items() if v is not None)])


def open_dashboard(driver, board: TensorBoard, fragment: str, expected: list[str]) -> str:
    """Load ``#fragment`` afresh and wait until every string of ``expected`` is on the page."""
    browser.open_page(driver, f"{board.url}/#{fragment}")
    return browser.wait_for_text(driver, expected, DASHBOARD_TIMEOUT_S)


def screenshot(driver):
    """The window as a PIL RGB image (one pixel per CSS pixel: the window's scale is 1)."""
    from PIL import Image

    return Image.open(io.BytesIO(driver.get_screenshot_as_png())).convert("RGB")


# ------------------------------------------------------------------------ cards
def cards(driver, loader: str) -> list[dict]:
    """Every card of kind ``loader`` on the page, in page order: run, tag, title and box."""
    script = _WALK + """
    const out = [];
    walkAll(document.documentElement, n => {
      if (n.nodeName === LOADER) {
        const r = n.getBoundingClientRect();
        const h = n.shadowRoot && n.shadowRoot.querySelector('tf-card-heading');
        out.push({run: n.run, tag: n.tag, title: h ? h.displayName || '' : '',
                  x: r.x, y: r.y, width: r.width, height: r.height});
      }
    });
    return out;
    """.replace("LOADER", repr(loader.upper()))
    return driver.execute_script(script)


def on_card(driver, loader: str, run: str, tag: str, body: str) -> Any:
    """Run ``body`` with ``el`` bound to the card of (run, tag) (shadow roots included); None if absent."""
    script = f"""
    const RUN = arguments[0], TAG = arguments[1];
    let el = null;
    (function walk(n) {{
      if (!el && n.nodeName === {loader.upper()!r} && n.run === RUN && n.tag === TAG) el = n;
      if (n.shadowRoot) walk(n.shadowRoot);
      for (const c of n.children || []) walk(c);
    }})(document.documentElement);
    if (!el) return null;
    {_WALK}
    {body}
    """
    return driver.execute_script(script, run, tag)


def card_text(driver, loader: str, run: str, tag: str) -> str | None:
    """The text a card shows (shadow roots included, styles left out), or None if absent."""
    return on_card(driver, loader, run, tag, browser.TEXT_JS + "return text(el);")


def card_rows(driver, loader: str, run: str, tag: str) -> list[list[str]]:
    """The table rows a (text) card shows, each a list of its cells' text."""
    return on_card(driver, loader, run, tag, """
    const rows = [];
    walkAll(el, n => {
      if (n.nodeName === 'TR') rows.push(Array.from(n.children).map(c => c.textContent.trim()));
    });
    return rows;
    """) or []  # fmt: skip


def card_images(driver, run: str, tag: str) -> list[dict]:
    """The <img> of an image card: natural and rendered size, whether decoded."""
    return on_card(driver, "tf-image-loader", run, tag, """
    const out = [];
    walkAll(el, n => {
      if (n.nodeName === 'IMG') {
        const r = n.getBoundingClientRect();
        out.push({complete: n.complete, natural_width: n.naturalWidth, natural_height: n.naturalHeight,
                  width: r.width, height: r.height, x: r.x, y: r.y, src: n.src});
      }
    });
    return out;
    """) or []  # fmt: skip


def fetch_image(driver, src: str) -> bytes:
    """The bytes the page got for an image URL (fetched again by the page itself)."""
    import base64

    data = driver.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        fetch(arguments[0]).then(r => r.arrayBuffer()).then(b => {
          let s = ''; const a = new Uint8Array(b);
          for (let i = 0; i < a.length; i++) s += String.fromCharCode(a[i]);
          done(btoa(s));
        }, e => done(null));
        """,
        src,
    )
    if data is None:
        raise RuntimeError(f"the page could not fetch {src}")
    return base64.b64decode(data)


# What each dashboard draws when a card holds data: (its card element, a test of an element in it).
DRAWN = {
    "scalars": ("TF-SCALAR-CARD", "n.nodeName === 'path' && n.closest('.render-area') "
                "&& getComputedStyle(n).stroke !== 'none' && (n.getAttribute('d') || '').length > 40"),
    "histograms": ("TF-HISTOGRAM-LOADER", "n.nodeName === 'path' && n.classList.contains('outline') "
                   "&& (n.getAttribute('d') || '').length > 40"),
    "distributions": ("TF-DISTRIBUTION-LOADER", "n.nodeName === 'path' && n.classList.contains('area') "
                      "&& n.getBBox().width > 1"),
    "images": ("TF-IMAGE-LOADER", "n.nodeName === 'IMG' && n.complete && n.naturalWidth > 0"),
    "text": ("TF-TEXT-LOADER", "n.nodeName === 'TD' && n.textContent.trim().length > 0"),
    "graphs": ("TF-GRAPH-SCENE", "n.nodeName === 'g' && n.classList.contains('nodeshape')"),
}  # fmt: skip


def drawn(driver, dashboard: str) -> int:
    """How many data elements (lines, bars, areas, images, table cells, graph nodes) the
    cards of ``dashboard`` (a key of `DRAWN`) have drawn."""
    card, test = DRAWN[dashboard]
    return driver.execute_script(_WALK + f"""
    let count = 0;
    walkAll(document.documentElement, c => {{
      if (c.nodeName === {card!r}) walkAll(c, n => {{ if ({test}) count++; }});
    }});
    return count;
    """)  # fmt: skip


def element_box(driver, selector: str) -> dict:
    """The box of the first ``selector`` match (CSS pixels, relative to the window)."""
    return browser.call_on(driver, selector, "const r = el.getBoundingClientRect(); "
                           "return {x: r.x, y: r.y, width: r.width, height: r.height};")  # fmt: skip


# ------------------------------------------------------------------------ dashboards' settings
def histogram_mode(driver, mode: str) -> None:
    """The Histograms dashboard's mode: ``"overlay"`` or ``"offset"``."""
    browser.wait_for(
        lambda: browser.call_on(driver, "tf-histogram-dashboard", "el._histogramMode = arguments[0]; return true;", mode),
        DASHBOARD_TIMEOUT_S, "the histogram dashboard",
    )  # fmt: skip


def plain_scalars(driver) -> None:
    """Raw values: no smoothing and no outlier clipping, which hide an outlier channel."""
    browser.wait_for(
        lambda: browser.call_on(
            driver, "tf-scalar-dashboard", "el._ignoreYOutliers = false; el._smoothingWeight = 0; return true;"
        ),
        DASHBOARD_TIMEOUT_S, "the scalar dashboard",
    )  # fmt: skip


def selected_runs(driver) -> tuple[int, int]:
    """(runs selected, runs listed) in the run selector of the dashboard on the page."""
    return tuple(
        browser.wait_for(
            lambda: browser.call_on(
                driver, "tf-runs-selector",
                "return el.runs && el.runs.length ? [el.selectedRuns.length, el.runs.length] : null;",
            ),
            DASHBOARD_TIMEOUT_S, "the run selector",
        )  # fmt: skip
    )


# ------------------------------------------------------------------------ the Graphs dashboard
def graph_runs(driver) -> list[str]:
    """The Graphs dashboard's run menu, in the order it lists the runs."""
    return browser.wait_for(
        lambda: browser.call_on(driver, "tf-graph-controls", "return (el.datasets || []).map(d => d.name);"),
        DASHBOARD_TIMEOUT_S, "the graph runs",
    )  # fmt: skip


def select_graph(driver, run: str, tag: str = "Default", color_by: str = "device") -> None:
    """The Graphs dashboard on ``run`` (tag ``Default`` or ``Resources``), coloured by ``color_by``."""
    controls = "tf-graph-controls"
    names = graph_runs(driver)
    browser.call_on(driver, controls, "el._selectedRunIndex = arguments[0];", names.index(run))
    if tag != "Default":
        tags = browser.call_on(driver, controls, "return el.datasets[el._selectedRunIndex].tags.map(t => t.tag);")
        browser.call_on(driver, controls, "el._selectedTagIndex = arguments[0];", tags.index(tag))
        browser.wait_for(lambda: browser.call_on(driver, controls, "return el.stats != null;"),
                         DASHBOARD_TIMEOUT_S, f"the {tag} stats")  # fmt: skip
    browser.call_on(driver, controls, "el.colorBy = arguments[0];", color_by)
    if color_by == "device":
        browser.wait_for(lambda: browser.call_on(driver, controls, "return (el.colorByParams || {}).device ? 1 : 0;"),
                         DASHBOARD_TIMEOUT_S, "the device colours")  # fmt: skip
    wait_for_graph(driver, run)
    settled(driver)


def settled(driver, interval_s: float = 0.4) -> dict[str, dict]:
    """The node shapes once the graph has stopped moving (it zooms to fit after it is drawn)."""
    last: list = [None]

    def still() -> dict | None:
        shapes = node_shapes(driver)
        boxes = {k: (round(v["x"]), round(v["y"]), round(v["width"])) for k, v in shapes.items()}
        same, last[0] = boxes == last[0], boxes
        return shapes if same and shapes else None

    return browser.wait_for(still, DASHBOARD_TIMEOUT_S, "the graph to settle", interval_s=interval_s)


def wait_for_graph(driver, run: str | None = None) -> int:
    """The number of layer nodes drawn, once the graph of ``run`` (default: any) is on screen."""

    def drawn() -> int:
        shown = browser.call_on(driver, "tf-graph-controls", "return el.datasets && el.datasets.length ? "
                                "el.datasets[el._selectedRunIndex].name : null;")  # fmt: skip
        if run is not None and shown != run:
            return 0
        return browser.call_on(driver, "tf-graph-scene", "return (el.shadowRoot || el).querySelectorAll("
                               "'g.node .nodeshape').length;") or 0  # fmt: skip

    return browser.wait_for(drawn, DASHBOARD_TIMEOUT_S, f"the graph of {run or 'the first run'}")


def select_node(driver, node: str) -> str:
    """Open ``node``'s panel; its text."""
    browser.wait_for(
        lambda: browser.call_on(driver, "tf-graph-board", "el.selectedNode = arguments[0]; return true;", node),
        DASHBOARD_TIMEOUT_S, "the graph board",
    )  # fmt: skip
    return browser.wait_for_text(driver, [node, "Attributes"], DASHBOARD_TIMEOUT_S, selector="tf-node-info")


def node_attributes(driver) -> list[tuple[str, str]]:
    """The open node panel's attributes as TensorBoard lists them, top to bottom: (key, value shown)."""
    rows = browser.wait_for(
        lambda: browser.call_on(driver, "tf-node-info", "return el._attributes;"),
        DASHBOARD_TIMEOUT_S, "the node's attributes",
    )  # fmt: skip
    return [(row["key"], row["value"]) for row in rows]


def device_colours(driver) -> dict[str, str]:
    """Device -> the colour "Color: Device" gives it (``rgb(r, g, b)``)."""
    params = browser.call_on(driver, "tf-graph-controls", "return el.colorByParams.device;")
    return {p["device"]: p["color"] for p in params}


def legend(driver) -> list[str]:
    """The device legend's entries, as the Graphs dashboard shows them."""
    return [p["device"] for p in browser.call_on(driver, "tf-graph-controls", "return el._currentDeviceParams;")]


def node_shapes(driver) -> dict[str, dict]:
    """Node name -> the box of its drawn shape (CSS pixels) and the colours its fill gradient uses."""
    return browser.call_on(driver, "tf-graph-scene", """
    const root = el.shadowRoot || el;
    const out = {};
    for (const n of root.querySelectorAll('g.node')) {
      const s = n.querySelector('.nodeshape ellipse, .nodeshape rect');
      if (!s) continue;
      const b = s.getBoundingClientRect();
      const name = n.getAttribute('data-name');
      const grad = root.querySelector('linearGradient[id="device-' + CSS.escape(name) + '"]');
      out[name] = {x: b.x, y: b.y, width: b.width, height: b.height,
                   stops: grad ? Array.from(grad.querySelectorAll('stop')).map(
                     s => s.getAttribute('stop-color') || s.style.stopColor) : []};
    }
    return out;
    """)  # fmt: skip
