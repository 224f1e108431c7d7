"""Screenshots of every TensorBoard dashboard showing a PTQ call's logs.

    digits CNN -> PTQ with a log folder -> TensorBoard -> headless Chromium -> <out_dir>/*.png

Run by hand (or `make screenshots`):

    python -m tests.e2e.screenshots docs/_static/screenshots

The end-to-end tests drive the same `DASHBOARDS` and assert on the text they render.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tests.e2e import browser
from tests.e2e.server import TensorBoard, tensorboard
from tests.tb import load, resources, run_folders

DASHBOARD_TIMEOUT_S = 60.0
SETTLE_S = 1.5  # charts and the graph animate into place after their text is there


@dataclass
class LoggedRun:
    """One PTQ call's logs: `log_folder` is what TensorBoard serves, `run` the call's folder in it."""

    framework: str
    log_folder: Path
    run: Path
    info: Any = None

    def name(self, *parts: str) -> str:
        """A TensorBoard run name: the path below the log folder, e.g. `Sequential_<time>/similarity`."""
        return "/".join((self.run.name, *parts))

    def runs_with(self, kind: str) -> dict[str, list[str]]:
        """TensorBoard run name -> tags of `kind` ("scalars", "images", "text", ...), for runs that have any."""
        out = {}
        for folder in sorted({p.parent for p in self.run.rglob("events.out.tfevents.*")}):
            acc = load(folder)
            if kind == "text":
                tags = [
                    t
                    for t in acc.Tags()["tensors"]
                    if acc.SummaryMetadata(t).plugin_data.plugin_name == "text"
                ]
            else:
                tags = acc.Tags()[kind]
            if tags:
                out[folder.relative_to(self.log_folder).as_posix()] = list(tags)
        return out


def train_digits(framework: str, epochs: int = 15) -> tuple[Any, np.ndarray]:
    """(the trained digits CNN of `framework`, its training images)."""
    from tests.conftest import FRAMEWORKS

    fw = FRAMEWORKS[framework]
    x_train, y_train, _, _ = fw.data()
    return fw.train(fw.make_digits_cnn(), x_train, y_train, epochs=epochs), x_train


def quantize_with_logging(framework: str, model: Any, x_train: np.ndarray, log_folder: Path) -> LoggedRun:
    """One PTQ call of `model` logged to `log_folder`."""
    import model_compression_toolkit as mct
    from tests.conftest import FRAMEWORKS
    from tutorials.digits import representative_dataset

    mct.set_log_folder(log_folder)
    try:
        _, info = FRAMEWORKS[framework].ptq(model, representative_dataset(x_train))
    finally:
        mct.set_log_folder(None)
    (run,) = run_folders(log_folder)
    return LoggedRun(framework, Path(log_folder), run, info)


# ------------------------------------------------------------------------ the dashboards
def heaviest_node(logged: LoggedRun) -> str:
    """The quantized graph's node needing the most memory (weights + output activation)."""
    memory = resources(load(logged.run / "quantized_graph"))
    return max(memory, key=memory.get)


def _graphs_expected(logged: LoggedRun) -> list[str]:
    from model_compression_toolkit.pipeline.events import STAGES

    nodes = [n.name for n in load(logged.run / "quantized_graph").Graph().node]
    return [*(logged.name(s) for s in STAGES), "Resources", *nodes, "Node Stats", "Memory"]


def _select_resources(driver, logged: LoggedRun) -> None:
    """The quantized graph's `Resources` tag, coloured by memory, its heaviest node opened."""
    controls = "tf-graph-controls"
    names = browser.wait_for(
        lambda: browser.call_on(driver, controls, "return (el.datasets || []).map(d => d.name);"),
        DASHBOARD_TIMEOUT_S, "the graph runs",
    )  # fmt: skip
    browser.call_on(
        driver, controls, "el._selectedRunIndex = arguments[0];", names.index(logged.name("quantized_graph"))
    )
    tags = browser.call_on(driver, controls, "return el.datasets[el._selectedRunIndex].tags.map(t => t.tag);")
    browser.call_on(driver, controls, "el._selectedTagIndex = arguments[0];", tags.index("Resources"))
    browser.wait_for(
        lambda: browser.call_on(driver, controls, "return el.stats != null;"),
        DASHBOARD_TIMEOUT_S,
        "the Resources stats",
    )
    browser.call_on(driver, controls, "el.colorBy = 'memory';")
    node = heaviest_node(logged)
    browser.wait_for(
        lambda: browser.call_on(driver, "tf-graph-board", "el.selectedNode = arguments[0]; return true;", node),
        DASHBOARD_TIMEOUT_S, "the graph board",
    )  # fmt: skip
    browser.wait_for_text(
        driver, [node, "Node Stats", "Memory"], DASHBOARD_TIMEOUT_S, selector="tf-node-info"
    )


def _scalars_expected(logged: LoggedRun) -> list[str]:
    runs = logged.runs_with("scalars")
    similarity = runs[logged.name("similarity", "accumulated")]
    layers = runs[logged.name("after_statistics_collection", "max_per_channel")]
    return [*runs, *similarity, *layers]


def _plain_lines(driver, logged: LoggedRun) -> None:
    """Raw values: no smoothing (also in the URL) and no outlier clipping, which hide the worst layer."""
    browser.wait_for(
        lambda: browser.call_on(driver, "tf-scalar-dashboard", "el._ignoreYOutliers = false; el._smoothingWeight = 0; return true;"),
        DASHBOARD_TIMEOUT_S, "the scalar dashboard",
    )  # fmt: skip


def _images_expected(logged: LoggedRun) -> list[str]:
    runs = logged.runs_with("images")
    tags = runs[logged.name("similarity")]
    return [
        *runs,
        "cosine_similarity/summary",
        "cosine_similarity/sample_0",
        *(t for t in tags if t.startswith("filters/")),
    ]


def _histograms_expected(logged: LoggedRun) -> list[str]:
    tags = logged.runs_with("histograms")[logged.name("quantized_graph")]
    kernels = ("/weights/float", "/weights/quantized")  # the biases' pairs would push some off the page
    return [logged.name("quantized_graph"), *(t for t in tags if t.endswith(kernels))]


def _text_expected(logged: LoggedRun) -> list[str]:
    runs = logged.runs_with("text")
    return [*runs, *sorted({t for tags in runs.values() for t in tags})]


@dataclass(frozen=True)
class Dashboard:
    """A TensorBoard dashboard as we show it: the URL fragment, what must be on it, how to drive it."""

    name: str
    fragment: str
    expected: Callable[[LoggedRun], list[str]]
    drive: Callable[[Any, LoggedRun], None] | None = None


DASHBOARDS = (
    Dashboard("graphs", "graphs", _graphs_expected, _select_resources),
    Dashboard("scalars", "scalars&tagFilter=similarity&_smoothingWeight=0", _scalars_expected, _plain_lines),
    Dashboard("images", "images&tagFilter=summary", _images_expected),
    Dashboard("histograms", "histograms&tagFilter=weights/[fq]", _histograms_expected),
    Dashboard("text", "text", _text_expected),
)


def capture(driver, board: TensorBoard, logged: LoggedRun, dashboard: Dashboard, png: Path) -> str:
    """Open `dashboard`, drive it, wait until it shows what we logged, save `png`; the page's text."""
    browser.open_page(driver, f"{board.url}/#{dashboard.fragment}")
    expected = dashboard.expected(logged)
    browser.wait_for_text(driver, expected[:1], DASHBOARD_TIMEOUT_S)
    if dashboard.drive:
        dashboard.drive(driver, logged)
    text = browser.wait_for_text(driver, expected, DASHBOARD_TIMEOUT_S)
    browser.wait_for_images(driver, DASHBOARD_TIMEOUT_S)
    time.sleep(SETTLE_S)
    png.parent.mkdir(parents=True, exist_ok=True)
    if not driver.save_screenshot(str(png)):
        raise RuntimeError(f"Chromium could not save {png}")
    return text


# ------------------------------------------------------------------------ by hand
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out_dir", type=Path, help="where the PNGs go (<framework>_<dashboard>.png)")
    parser.add_argument("--frameworks", nargs="+", default=["pytorch", "keras"], choices=["pytorch", "keras"])
    parser.add_argument("--epochs", type=int, default=15, help="training epochs of the digits CNN")
    args = parser.parse_args(argv)
    if reason := browser.missing_binaries():
        print(f"cannot take screenshots: {reason}", file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with tempfile.TemporaryDirectory(prefix="mct_screenshots_") as tmp, browser.chromium() as driver:
        for framework in args.frameworks:
            model, x_train = train_digits(framework, args.epochs)
            logged = quantize_with_logging(framework, model, x_train, Path(tmp) / framework)
            with tensorboard(logged.log_folder) as board:
                for dashboard in DASHBOARDS:
                    png = args.out_dir / f"{framework}_{dashboard.name}.png"
                    capture(driver, board, logged, dashboard, png)
                    print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
