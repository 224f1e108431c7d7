"""The docs' screenshots: five PTQ calls in one log folder, served by TensorBoard, each
picture cropped to the part of the page it is about.

    shipped digits CNNs -> 5 PTQ calls (`tests.e2e.logs`) -> TensorBoard -> headless Chromium
        -> <out_dir>/<shot>.png, cropped (and, for the overview, pieces set side by side)

Run by hand (or `make screenshots`):

    python -m tests.e2e.screenshots docs/_static/screenshots [--only graph summary]

Every shot is of the PyTorch digits CNN with an outlier channel (`tests.fixtures.damage`),
the case the debugging page walks through, or of the call that applies its suggested fix.
`tests/e2e/test_screenshots.py` takes every shot and checks the docs show each one.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e import browser, pages
from tests.e2e.logs import LoggedRun, build_logs, wait_until_served
from tests.e2e.plugin_pages import dashboard, dashboard_calls
from tests.e2e.server import TensorBoard, tensorboard

SETTLE_S = 1.0  # charts animate into place after their data is there
MARGIN_PX = 8
GAP_PX = 16
CASE = "pytorch_outlier"


def crop(image, boxes: list[dict], margin: int = MARGIN_PX):
    """``image`` (one pixel per CSS pixel) cropped to the union of ``boxes``."""
    left = max(0, min(b["x"] for b in boxes) - margin)
    top = max(0, min(b["y"] for b in boxes) - margin)
    right = min(image.width, max(b["x"] + b["width"] for b in boxes) + margin)
    bottom = min(image.height, max(b["y"] + b["height"] for b in boxes) + margin)
    return image.crop(tuple(round(v) for v in (left, top, right, bottom)))


def side_by_side(images: list):
    """Pictures set left to right on white, top-aligned."""
    from PIL import Image

    width = sum(i.width for i in images) + GAP_PX * (len(images) - 1)
    out = Image.new("RGB", (width, max(i.height for i in images)), "white")
    x = 0
    for image in images:
        out.paste(image, (x, 0))
        x += image.width + GAP_PX
    return out


def snap(driver, boxes: list[dict]):
    """The window, once settled, cropped to ``boxes``."""
    time.sleep(SETTLE_S)
    return crop(pages.screenshot(driver), boxes)


def run_filter(*runs: str) -> str:
    return "|".join(f"^{re.escape(r)}$" for r in runs)


def card_boxes(driver, loader: str, runs: list[str], tag: str | None = None) -> list[dict]:
    """The boxes of the cards of ``runs`` (and ``tag``), once they are there."""
    return browser.wait_for(
        lambda: [c for c in pages.cards(driver, loader) if c["run"] in runs and tag in (None, c["tag"])],
        pages.DASHBOARD_TIMEOUT_S, f"the cards of {runs}",
    )  # fmt: skip


# ------------------------------------------------------------------------ the shots
LEGEND_PX = 173  # the legend's error classes; TensorBoard's own shape legend follows


def _open_graph(driver, board: TensorBoard, logged: LoggedRun, node: str):
    """The quantized graph coloured by error with ``node``'s panel open: the window, and the
    boxes of the drawn graph (labels included), the panel and the colour legend."""
    browser.open_page(driver, f"{board.url}/#graphs")
    pages.select_graph(driver, logged.name("5_quantized_graph"))
    pages.select_node(driver, node)
    pages.settled(driver)
    time.sleep(SETTLE_S)
    legend = pages.element_box(driver, ".legend-holder")
    legend["height"] = LEGEND_PX
    boxes = {"graph": layers_box(driver), "panel": pages.element_box(driver, "tf-node-info"), "legend": legend}
    return pages.screenshot(driver), boxes


def layers_box(driver) -> dict:
    """The box of the drawn layers, labels included: the ``legend_<class>`` nodes beside
    them, which pin the palette, are left out (the sidebar's legend says it in words)."""
    return browser.call_on(driver, "tf-graph-scene", """
    const root = el.shadowRoot || el;
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    for (const n of root.querySelectorAll('g.nodes > g.node')) {
      if ((n.getAttribute('data-name') || '').startsWith('legend_')) continue;
      const r = n.getBoundingClientRect();
      x0 = Math.min(x0, r.left); y0 = Math.min(y0, r.top); x1 = Math.max(x1, r.right); y1 = Math.max(y1, r.bottom);
    }
    return {x: x0, y: y0, width: x1 - x0, height: y1 - y0};
    """)  # fmt: skip


def overview(driver, board, logs) -> Any:
    """The graph coloured by error, the cause's panel, the colour legend: the README's picture."""
    logged = logs[CASE]
    screen, boxes = _open_graph(driver, board, logged, f"[{logged.names['activation']}]")
    return side_by_side([crop(screen, [boxes["graph"]]), crop(screen, [boxes["panel"]]), crop(screen, [boxes["legend"]], 0)])


def graph(driver, board, logs) -> Any:
    """The quantized graph coloured by error, with the colour legend."""
    logged = logs[CASE]
    screen, boxes = _open_graph(driver, board, logged, f"[{logged.names['activation']}]")
    return side_by_side([crop(screen, [boxes["graph"]]), crop(screen, [boxes["legend"]], 0)])


def node_panel(driver, board, logs) -> Any:
    """The panel of the outlier ReLU, the cause: ``» in short`` first."""
    logged = logs[CASE]
    screen, boxes = _open_graph(driver, board, logged, f"[{logged.names['activation']}]")
    return crop(screen, [boxes["panel"]])


def runs(driver, board, logs) -> Any:
    """The run list: two calls, named, their stages in pipeline order."""
    shown = [logs[CASE], logs["pytorch_fixed"]]
    pattern = "|".join(f"^{re.escape(logged.name(''))}" for logged in shown)
    pages.open_dashboard(driver, board, pages.fragment("scalars", runs=pattern), [shown[0].name("5_quantized_graph")])
    return snap(driver, [pages.element_box(driver, "tf-runs-selector")])


def histograms(driver, board, logs) -> Any:
    """The outlier ReLU's output in one card per stage: float (step 0) and through its grid at
    4_thresholds_selection, float and quantized model at 5_quantized_graph (step 1)."""
    logged = logs[CASE]
    layer = logged.names["activation"]
    shown = [logged.name("4_thresholds_selection"), logged.name("5_quantized_graph")]
    pages.open_dashboard(driver, board, pages.fragment("histograms", f"^{re.escape(layer)}$", run_filter(*shown)), shown)
    pages.histogram_mode(driver, "overlay")
    return snap(driver, card_boxes(driver, "tf-histogram-loader", shown, layer)[:2])


def distributions(driver, board, logs) -> Any:
    """The outlier ReLU and the next one, float (step 0) to quantized (step 1)."""
    logged = logs[CASE]
    layers = [logged.names["activation"], _next_activation(logged)]
    shown = [logged.name("5_quantized_graph")]
    tags = "|".join(f"^{re.escape(t)}$" for t in layers)
    pages.open_dashboard(driver, board, pages.fragment("distributions", tags, run_filter(*shown)), shown)
    return snap(driver, card_boxes(driver, "tf-distribution-loader", shown)[:2])


def _next_activation(logged: LoggedRun) -> str:
    """The compare point after the outlier's: where the damage shows first."""
    layers = sorted(logged.info.similarity.layers, key=lambda la: la.position)
    names = [la.name for la in layers]
    return names[names.index(logged.names["activation"]) + 1]


def _image_cards(driver, board, run: str, tags: str, count: int) -> list[dict]:
    pages.open_dashboard(driver, board, pages.fragment("images", tags, run_filter(run)), [run])
    browser.wait_for_images(driver, pages.DASHBOARD_TIMEOUT_S)
    return card_boxes(driver, "tf-image-loader", [run])[:count]


def per_channel(driver, board, logs) -> Any:
    """The outlier layer's picture (first: layers with outliers sort first) beside a healthy one."""
    return snap(driver, _image_cards(driver, board, logs[CASE].name("4_thresholds_selection"), "^Per-channel", 2))


def summary(driver, board, logs) -> Any:
    return snap(driver, _image_cards(driver, board, logs[CASE].name("5_quantized_graph"), "0_summary", 1))


def summary_fixed(driver, board, logs) -> Any:
    return snap(driver, _image_cards(driver, board, logs["pytorch_fixed"].name("5_quantized_graph"), "0_summary", 1))


def scalars(driver, board, logs) -> Any:
    """The per-channel maxima of the outlier ReLU (step = channel), smoothing off, outliers not clipped."""
    logged = logs[CASE]
    layer, run = logged.names["activation"], logged.name("3_after_statistics_collection", "max_per_channel")
    pages.open_dashboard(driver, board, pages.fragment("scalars", f"^{re.escape(layer)}$", run_filter(run),
                                                       _smoothingWeight=0), [layer])  # fmt: skip
    pages.plain_scalars(driver)
    boxes = browser.wait_for(lambda: [c for c in pages.cards(driver, "tf-scalar-card") if c["tag"] == layer][:1],
                             pages.DASHBOARD_TIMEOUT_S, "the scalar card")  # fmt: skip
    return snap(driver, boxes)


def causes(driver, board, logs) -> Any:
    """The Text dashboard's similarity/causes: the quantizers to blame and the fix."""
    run = logs[CASE].name("5_quantized_graph")
    pages.open_dashboard(driver, board, pages.fragment("text", "^similarity/causes$", run_filter(run)), ["Suggested fix"])
    return snap(driver, card_boxes(driver, "tf-text-loader", [run])[:1])


@dataclass(frozen=True)
class Shot:
    """One docs picture: ``take(driver, board, logs)`` brings the page there and returns the
    cropped picture."""

    name: str
    take: Callable[[Any, TensorBoard, dict[str, LoggedRun]], Any]


SHOTS = tuple(
    Shot(f.__name__, f)
    for f in (overview, graph, node_panel, runs, histograms, distributions, per_channel, summary, summary_fixed,
              scalars, causes, dashboard, dashboard_calls)  # fmt: skip
)


def take_all(driver, board, logs, out_dir: Path, only: list[str] | None = None) -> list[Path]:
    """Take the shots (all, or ``only`` these) into ``out_dir/<shot>.png``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for shot in SHOTS:
        if only and shot.name not in only:
            continue
        path = out_dir / f"{shot.name}.png"
        shot.take(driver, board, logs).save(path, optimize=True)
        written.append(path)
    return written


# ------------------------------------------------------------------------ by hand
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path, help="where the PNGs go (<shot>.png)")
    parser.add_argument("--only", nargs="+", choices=[s.name for s in SHOTS], help="these shots only")
    args = parser.parse_args(argv)
    if reason := browser.missing_binaries():
        print(f"cannot take screenshots: {reason}", file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with tempfile.TemporaryDirectory(prefix="mct_screenshots_") as tmp:
        logs = build_logs(Path(tmp))
        with tensorboard(Path(tmp)) as board, browser.chromium() as driver:
            wait_until_served(board, logs)
            for path in take_all(driver, board, logs, args.out_dir, args.only):
                print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
