"""Five PTQ calls in one log folder, served by TensorBoard, and cropped screenshots of it.

    digits CNNs (shipped weights) -> 5 PTQ calls into one log folder -> TensorBoard
        -> headless Chromium -> <out_dir>/<shot>.png, each cropped to what it shows

Run by hand (or `make screenshots`):

    python -m tests.e2e.screenshots docs/_static/screenshots

The end-to-end tests read the same calls (`build_logs`) and drive the same shots (`SHOTS`).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e import browser
from tests.e2e.server import TensorBoard, tensorboard
from tests.tb import run_folders

DASHBOARD_TIMEOUT_S = 90.0
SETTLE_S = 1.0  # charts and the graph animate into place after their data is there


@dataclass
class LoggedRun:
    """One PTQ call's logs: `log_folder` is what TensorBoard serves, `run` the call's folder in it."""

    framework: str
    log_folder: Path
    run: Path
    info: Any = None
    names: dict[str, str] | None = None  # the damaged layers, for the damaged calls

    def name(self, *parts: str) -> str:
        """A TensorBoard run name: the path below the log folder, e.g. `Sequential_<time>/5_quantized_graph`."""
        return "/".join((self.run.relative_to(self.log_folder).as_posix(), *parts))


# ------------------------------------------------------------------------ the calls
CALLS = ("pytorch", "keras", "pytorch_outlier", "pytorch_fixed", "keras_outlier")


def build_logs(log_folder: Path, calls: tuple[str, ...] = CALLS) -> dict[str, LoggedRun]:
    """The calls, logged one after the other into ``log_folder``: the digits CNN of each
    framework, the PyTorch one with an outlier channel (`tests.fixtures.damage`), that
    model again with its report's suggested fix (a call named by its KeepFloat rules),
    and the Keras one with an outlier channel. Five calls of 8 runs: 40, the most
    TensorBoard still selects by default."""
    import model_compression_toolkit as mct
    from tests.conftest import FRAMEWORKS
    from tests.fixtures.damage import outlier_channel
    from tests.fixtures.trained import load_trained
    from tutorials.digits import representative_dataset

    logged: dict[str, LoggedRun] = {}
    mct.set_log_folder(log_folder)
    try:
        for key in calls:
            framework = key.split("_")[0]
            fw = FRAMEWORKS[framework]
            x_train = fw.data()[0]
            model, names, config = load_trained(framework), None, None
            if key.endswith(("_outlier", "_fixed")):
                model, names = outlier_channel(framework, model, x_train[:64])
            if key.endswith("_fixed"):
                config = mct.core.CoreConfig(keep_float=logged[f"{framework}_outlier"].info.similarity.suggested_fix())
            before = set(run_folders(log_folder))
            _, info = fw.ptq(model, representative_dataset(x_train), config)
            (run,) = set(run_folders(log_folder)) - before
            logged[key] = LoggedRun(framework, Path(log_folder), run, info, names)
    finally:
        mct.set_log_folder(None)
    return logged


# ------------------------------------------------------------------------ driving the dashboards
def open_dashboard(driver, board: TensorBoard, fragment: str, expected: list[str]) -> str:
    """Load ``#fragment`` afresh and wait until every string of ``expected`` is on the page."""
    browser.open_page(driver, f"{board.url}/#{fragment}")
    return browser.wait_for_text(driver, expected, DASHBOARD_TIMEOUT_S)


def select_graph(driver, run: str, tag: str = "Default", color_by: str = "device") -> None:
    """The Graphs dashboard on ``run`` (tag ``Default`` or ``Resources``), coloured by ``color_by``."""
    controls = "tf-graph-controls"
    names = browser.wait_for(
        lambda: browser.call_on(driver, controls, "return (el.datasets || []).map(d => d.name);"),
        DASHBOARD_TIMEOUT_S, "the graph runs",
    )  # fmt: skip
    browser.call_on(driver, controls, "el._selectedRunIndex = arguments[0];", names.index(run))
    if tag != "Default":
        tags = browser.call_on(driver, controls, "return el.datasets[el._selectedRunIndex].tags.map(t => t.tag);")
        browser.call_on(driver, controls, "el._selectedTagIndex = arguments[0];", tags.index(tag))
        browser.wait_for(lambda: browser.call_on(driver, controls, "return el.stats != null;"),
                         DASHBOARD_TIMEOUT_S, f"the {tag} stats")  # fmt: skip
    browser.call_on(driver, controls, "el.colorBy = arguments[0];", color_by)
    browser.wait_for(lambda: browser.call_on(driver, controls, "return (el.colorByParams || {}).device ? 1 : 0;"),
                     DASHBOARD_TIMEOUT_S, "the device colours")  # fmt: skip


def select_node(driver, node: str) -> str:
    """Open ``node``'s panel; its text."""
    browser.wait_for(
        lambda: browser.call_on(driver, "tf-graph-board", "el.selectedNode = arguments[0]; return true;", node),
        DASHBOARD_TIMEOUT_S, "the graph board",
    )  # fmt: skip
    return browser.wait_for_text(driver, [node, "» in short"], DASHBOARD_TIMEOUT_S, selector="tf-node-info")


def device_colours(driver) -> dict[str, str]:
    """Device -> the colour "Color: Device" gives it (``rgb(r, g, b)``)."""
    params = browser.call_on(driver, "tf-graph-controls", "return el.colorByParams.device;")
    return {p["device"]: p["color"] for p in params}


def legend(driver) -> list[str]:
    """The device legend's entries, as the Graphs dashboard shows them."""
    return [p["device"] for p in browser.call_on(driver, "tf-graph-controls", "return el._currentDeviceParams;")]


def histogram_mode(driver, mode: str) -> None:
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


def cards(driver, loader: str) -> list[dict]:
    """Every card of kind ``loader`` on the page, in page order: run, tag, title and box."""
    script = """
    const out = [];
    (function walk(n) {
      if (n.nodeName === LOADER) {
        const r = n.getBoundingClientRect();
        const h = n.shadowRoot && n.shadowRoot.querySelector('tf-card-heading');
        out.push({run: n.run, tag: n.tag, title: h ? h.displayName || '' : '',
                  x: r.x, y: r.y, width: r.width, height: r.height});
      }
      if (n.shadowRoot) walk(n.shadowRoot);
      for (const c of n.children || []) walk(c);
    })(document.documentElement);
    return out;
    """.replace("LOADER", repr(loader.upper()))
    return driver.execute_script(script)


def on_card(driver, loader: str, run: str, tag: str, body: str) -> Any:
    """Run ``body`` with ``el`` bound to the card of (run, tag) (shadow roots included)."""
    script = f"""
    const RUN = arguments[0], TAG = arguments[1];
    let el = null;
    (function walk(n) {{
      if (!el && n.nodeName === {loader.upper()!r} && n.run === RUN && n.tag === TAG) el = n;
      if (n.shadowRoot) walk(n.shadowRoot);
      for (const c of n.children || []) walk(c);
    }})(document.documentElement);
    if (!el) return null;
    {body}
    """
    return driver.execute_script(script, run, tag)


def scroll_to(driver, loader: str, run: str, tag: str) -> None:
    on_card(driver, loader, run, tag, "el.scrollIntoView({block: 'start'}); return true;")


def element_box(driver, selector: str) -> dict:
    return browser.call_on(driver, selector, "const r = el.getBoundingClientRect(); "
                           "return {x: r.x, y: r.y, width: r.width, height: r.height};")  # fmt: skip


# ------------------------------------------------------------------------ screenshots
def save_cropped(driver, png_path: Path, boxes: list[dict], margin: int = 8) -> Path:
    """A screenshot of the window cropped to the union of ``boxes`` (CSS pixels, the window's scale)."""
    from PIL import Image

    time.sleep(SETTLE_S)
    image = Image.open(io.BytesIO(driver.get_screenshot_as_png())).convert("RGB")
    scale = image.width / driver.execute_script("return window.innerWidth;")
    left = max(0, min(b["x"] for b in boxes) - margin)
    top = max(0, min(b["y"] for b in boxes) - margin)
    right = min(image.width / scale, max(b["x"] + b["width"] for b in boxes) + margin)
    bottom = min(image.height / scale, max(b["y"] + b["height"] for b in boxes) + margin)
    png_path.parent.mkdir(parents=True, exist_ok=True)
    image.crop(tuple(round(v * scale) for v in (left, top, right, bottom))).save(png_path, optimize=True)
    return png_path


@dataclass(frozen=True)
class Shot:
    """One docs screenshot: how to bring the page there, and what to crop to."""

    name: str
    take: Callable[[Any, TensorBoard, dict[str, LoggedRun], Path], Path]


def _graph(driver, board, logs, out: Path) -> Path:
    logged = logs["pytorch_outlier"]
    open_dashboard(driver, board, "graphs", [])
    select_graph(driver, logged.name("5_quantized_graph"))
    select_node(driver, f"[{logged.names['activation']}]")
    boxes = [element_box(driver, "tf-graph-board"), element_box(driver, ".legend-holder")]
    return save_cropped(driver, out, boxes)


def _histograms(driver, board, logs, out: Path) -> Path:
    logged = logs["pytorch_outlier"]
    layer = logged.names["activation"]
    open_dashboard(driver, board, f"histograms&tagFilter=^{layer}$", [logged.name("5_quantized_graph")])
    histogram_mode(driver, "overlay")
    boxes = [c for c in cards(driver, "tf-histogram-loader") if c["run"].startswith(logged.run.name)]
    return save_cropped(driver, out, boxes)


def _distributions(driver, board, logs, out: Path) -> Path:
    logged = logs["pytorch_outlier"]
    layer = logged.names["activation"]
    open_dashboard(driver, board, f"distributions&tagFilter=^{layer}$", [logged.name("5_quantized_graph")])
    boxes = [c for c in cards(driver, "tf-distribution-loader") if c["run"].startswith(logged.run.name)]
    return save_cropped(driver, out, boxes)


def _summary(driver, board, logs, out: Path) -> Path:
    logged = logs["pytorch_outlier"]
    open_dashboard(driver, board, "images&tagFilter=0_summary", [logged.name("5_quantized_graph")])
    browser.wait_for_images(driver, DASHBOARD_TIMEOUT_S)
    box = [c for c in cards(driver, "tf-image-loader") if c["run"] == logged.name("5_quantized_graph")]
    return save_cropped(driver, out, box)


def _per_channel(driver, board, logs, out: Path) -> Path:
    logged = logs["pytorch_outlier"]
    run = logged.name("4_thresholds_selection")
    open_dashboard(driver, board, "images&tagFilter=Per-channel ranges/00[12]_", [run])
    browser.wait_for_images(driver, DASHBOARD_TIMEOUT_S)
    boxes = [c for c in cards(driver, "tf-image-loader") if c["run"] == run]
    return save_cropped(driver, out, boxes)


def _scalars(driver, board, logs, out: Path) -> Path:
    logged = logs["pytorch_outlier"]
    layer = logged.names["activation"]
    open_dashboard(driver, board, f"scalars&tagFilter=^{layer}$&_smoothingWeight=0", [layer])
    plain_scalars(driver)
    boxes = [c for c in cards(driver, "tf-scalar-card") if c["tag"] == layer][:1]
    return save_cropped(driver, out, boxes or [element_box(driver, "tf-scalar-card")])


def _causes(driver, board, logs, out: Path) -> Path:
    logged = logs["pytorch_outlier"]
    open_dashboard(driver, board, "text&tagFilter=similarity/causes", ["Suggested fix"])
    box = [c for c in cards(driver, "tf-text-loader") if c["run"] == logged.name("5_quantized_graph")]
    return save_cropped(driver, out, box)


def _runs(driver, board, logs, out: Path) -> Path:
    open_dashboard(driver, board, "scalars", ["5_quantized_graph"])
    return save_cropped(driver, out, [element_box(driver, "tf-runs-selector")])


SHOTS = (
    Shot("graphs", _graph),
    Shot("histograms", _histograms),
    Shot("distributions", _distributions),
    Shot("images", _summary),
    Shot("per_channel", _per_channel),
    Shot("scalars", _scalars),
    Shot("text", _causes),
    Shot("runs", _runs),
)


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
            for shot in SHOTS:
                if args.only and shot.name not in args.only:
                    continue
                print(shot.take(driver, board, logs, args.out_dir / f"{shot.name}.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
