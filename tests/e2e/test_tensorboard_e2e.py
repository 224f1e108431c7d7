"""The real TensorBoard serves every run and tag we log, and its dashboards render them.

The five calls of `tests.e2e.logs` are served from one log folder by `python -m
tensorboard.main`; what its HTTP data API answers is compared with what TensorBoard's own
EventAccumulator reads from the same files, then the dashboards are opened in headless
Chromium on each framework's plain call.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from tensorboard.compat.proto import config_pb2, graph_pb2

from model_compression_toolkit.observers.stage_view import PER_CHANNEL, STAGE_RUNS
from tests.e2e import browser, pages
from tests.e2e.logs import LoggedRun, expected_tags, served_tags
from tests.fixtures.tb import load

pytestmark = pytest.mark.e2e

STATISTICS_RUN, QUANTIZED_RUN = STAGE_RUNS["after_statistics_collection"], STAGE_RUNS["quantized_graph"]


def folder(logged: LoggedRun, run: str):
    return logged.log_folder / run


# ------------------------------------------------------------------------ the HTTP data API
def test_every_event_folder_is_a_run_and_each_call_has_its_stages_and_per_channel_runs(board, calls):
    runs = board.json("/data/runs")
    log_folder = next(iter(calls.values())).log_folder
    on_disk = {p.parent.relative_to(log_folder).as_posix() for p in log_folder.rglob("events.out.tfevents.*")}
    assert sorted(runs) == sorted(on_disk)
    for logged in calls.values():
        ours = {logged.name(run) for run in STAGE_RUNS.values()}
        ours |= {logged.name(STATISTICS_RUN, field) for field in PER_CHANNEL}
        assert ours == set(logged.runs())


def test_the_dashboards_we_write_for_are_enabled(board):
    listing = board.json("/data/plugins_listing")
    for plugin in ("graphs", "scalars", "histograms", "distributions", "images", "text"):
        assert listing[plugin]["enabled"], plugin


def test_each_stage_serves_its_graph_and_resources_exactly(board, calls):
    info = board.json("/data/plugin/graphs/info")
    assert set(info) == {logged.name(run) for logged in calls.values() for run in STAGE_RUNS.values()}
    for logged in calls.values():
        for stage_run in STAGE_RUNS.values():
            run = logged.name(stage_run)
            acc = load(folder(logged, run))
            assert info[run]["run_graph"] is True
            # a tuned call's later trials are graph tags of its quantized run (no profile)
            trials = _trial_tags(logged) if stage_run == QUANTIZED_RUN else {}
            assert {tag: item["profile"] for tag, item in info[run]["tags"].items()} == {"Resources": True, **trials}
            graph = text_format.Parse(board.get("/data/plugin/graphs/graph", run=run).decode(), graph_pb2.GraphDef())
            assert graph == acc.Graph(), run
            body = board.get("/data/plugin/graphs/run_metadata", run=run, tag="Resources").decode()
            assert text_format.Parse(body, config_pb2.RunMetadata()) == acc.RunMetadata("Resources"), run


def _trial_tags(logged: LoggedRun) -> dict[str, bool]:
    """A tuned call's later trials, each a graph tag (with no profile) of its quantized run."""
    tuning = getattr(logged.info, "tuning", None)
    return {t.run_name: False for t in tuning.trials if t.n > 1} if tuning is not None else {}


def _steps(logged: LoggedRun, run: str, tag: str) -> list[int]:
    """The steps of a histogram: float 0 and quantized 1; a tuned call's compare points in
    its quantized run also carry each later trial n at step n."""
    trials = _trial_tags(logged)
    if trials and run == logged.name(QUANTIZED_RUN) and "/weights" not in tag:
        return [0, *(t.n for t in logged.info.tuning.trials)]
    return [0, 1]


def test_scalars_are_served_value_for_value(board, calls):
    expected = expected_tags(calls, "scalars")
    assert served_tags(board, "scalars") == expected
    for run, tags in expected.items():
        acc = load(next(iter(calls.values())).log_folder / run)
        for tag in tags:
            got = board.json("/data/plugin/scalars/scalars", run=run, tag=tag)
            assert got == [[e.wall_time, e.step, e.value] for e in acc.Scalars(tag)], (run, tag)


def test_histograms_are_served_bucket_for_bucket_float_and_quantized_as_steps_0_and_1(board, calls):
    expected = expected_tags(calls, "histograms")
    assert served_tags(board, "histograms") == expected
    assert served_tags(board, "distributions") == expected
    for logged in calls.values():
        assert any(t.endswith("/weights") for t in expected[logged.name(QUANTIZED_RUN)])
    log_folder = next(iter(calls.values())).log_folder
    owner = {r: logged for logged in calls.values() for r in logged.runs()}
    for run, tags in expected.items():
        acc = load(log_folder / run)
        for tag in tags:
            events = acc.Histograms(tag)
            served = board.json("/data/plugin/histograms/histograms", run=run, tag=tag)
            assert [e.step for e in events] == [s for _, s, _ in served] == _steps(owner[run], run, tag), (run, tag)
            for event, (wall_time, step, buckets) in zip(events, served):
                h = event.histogram_value
                counts = np.asarray(h.bucket)
                used = np.flatnonzero(counts)  # TensorBoard drops the empty buckets at both ends
                first, last = used[0], used[-1]
                edges = np.asarray([h.min, *h.bucket_limit[first:last], h.max], dtype=np.float32)
                buckets = np.asarray(buckets)
                assert (wall_time, step) == (event.wall_time, event.step)
                np.testing.assert_array_equal(buckets[:, 2], counts[first : last + 1], err_msg=f"{run} {tag}")
                np.testing.assert_array_equal(buckets[:, 0], edges[:-1])
                np.testing.assert_array_equal(buckets[:, 1], edges[1:])
                assert buckets[:, 2].sum() == h.num


def test_images_are_served_byte_for_byte(board, calls):
    expected = expected_tags(calls, "images")
    assert served_tags(board, "images") == expected
    for logged in calls.values():
        tags = expected[logged.name(QUANTIZED_RUN)]
        assert {"Cosine similarity/0_summary", "Cosine similarity/1_samples"} <= tags
        assert any(tag.startswith("Filters/") for tag in tags)
        assert any(tag.startswith("Per-channel ranges/") for tag in expected[logged.name(STAGE_RUNS["thresholds_selection"])])
    log_folder = next(iter(calls.values())).log_folder
    for run, tags in expected.items():
        acc = load(log_folder / run)
        for tag in tags:
            served = board.json("/data/plugin/images/images", run=run, tag=tag)
            assert [meta["step"] for meta in served] == [image.step for image in acc.Images(tag)], (run, tag)
            for meta, image in zip(served, acc.Images(tag)):
                png = board.get(f"/data/plugin/images/individualImage?{meta['query']}")
                assert png == image.encoded_image_string, (run, tag, meta["step"])


def words(text: str) -> list[str]:
    """The words and numbers of a text, with markdown or HTML markup and entities gone."""
    import html

    return re.findall(r"[^\W_]+", html.unescape(re.sub(r"<[^>]+>", " ", text)))


def raw_texts(log_folder, run: str, tag: str) -> list[tuple[float, int, str]]:
    acc = load(log_folder / run)
    return [(e.wall_time, e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(tag)]


def test_text_is_served_word_for_word(board, calls):
    expected = expected_tags(calls, "text")
    assert served_tags(board, "text") == expected
    log_folder = next(iter(calls.values())).log_folder
    for logged in calls.values():
        tuned = {"tuning/trials"} if _trial_tags(logged) else set()
        assert expected[logged.name(QUANTIZED_RUN)] == {"summary", "similarity/causes", "similarity/report", *tuned}
        assert all(expected[logged.name(run)] == {"summary"} for run in list(STAGE_RUNS.values())[:-1])
    for run, tags in expected.items():
        for tag in tags:
            got = board.json("/data/plugin/text/text", run=run, tag=tag)
            want = raw_texts(log_folder, run, tag)
            assert [(g["wall_time"], g["step"]) for g in got] == [w[:2] for w in want]
            assert [words(g["text"]) for g in got] == [words(w[2]) for w in want], (run, tag)


# ------------------------------------------------------------------------ the browser
def tb_memory(n_bytes: float) -> str:
    """Bytes as TensorBoard's node info card prints them: 1024-based units, JavaScript's
    `toPrecision(3)` (which rounds halves up, not to even as Python's format does)."""
    units = ["B", "KB", "MB", "GB"]
    unit = 0
    while unit + 1 < len(units) and n_bytes >= 1024:
        n_bytes, unit = n_bytes / 1024, unit + 1
    exact = Decimal(n_bytes)
    rounded = exact.quantize(Decimal(1).scaleb(exact.adjusted() - 2), rounding=ROUND_HALF_UP)
    return f"{float(rounded):g} {units[unit]}"


def node_memory(logged: LoggedRun) -> dict[str, int]:
    """TensorBoard node name -> bytes, from the quantized graph's ``Resources`` run metadata
    (the colour legend's nodes, listed first with no memory, left out)."""
    meta = load(folder(logged, logged.name(QUANTIZED_RUN))).RunMetadata("Resources")
    stats = [ns for d in meta.step_stats.dev_stats for ns in d.node_stats if ns.memory]
    return {ns.node_name: max(m.total_bytes for m in ns.memory) for ns in stats}


def heaviest_node(logged: LoggedRun) -> str:
    """The quantized graph's node needing the most memory (weights + output activation), as TensorBoard names it."""
    memory = node_memory(logged)
    return max(memory, key=memory.get)


def _graphs_expected(logged: LoggedRun) -> list[str]:
    nodes = [n.name for n in load(folder(logged, logged.name(QUANTIZED_RUN))).Graph().node if n.op != "legend"]
    return [*(logged.name(run) for run in STAGE_RUNS.values()), "Resources", *nodes, "Node Stats", "Memory"]


def _select_resources(driver, logged: LoggedRun) -> None:
    """The quantized graph's `Resources` tag, coloured by memory, its heaviest node opened."""
    pages.select_graph(driver, logged.name(QUANTIZED_RUN), tag="Resources", color_by="memory")
    node = heaviest_node(logged)
    pages.select_node(driver, node)
    browser.wait_for_text(driver, [node, "Node Stats", "Memory"], pages.DASHBOARD_TIMEOUT_S, selector="tf-node-info")


def _scalars_expected(logged: LoggedRun) -> list[str]:
    """The runs, the similarity charts (the tag filter's) and every layer (a category each)."""
    runs = logged.runs_with("scalars")
    return [*runs, *runs[logged.name(QUANTIZED_RUN)], *runs[logged.name(STATISTICS_RUN, "max_per_channel")]]


def _images_expected(logged: LoggedRun) -> list[str]:
    runs = logged.runs_with("images")
    tags = runs[logged.name(QUANTIZED_RUN)]
    return [*runs, "Cosine similarity/0_summary", *(t for t in tags if t.startswith("Filters/"))]


def _histograms_expected(logged: LoggedRun) -> list[str]:
    tags = logged.runs_with("histograms")[logged.name(QUANTIZED_RUN)]
    return [logged.name(QUANTIZED_RUN), *(t for t in tags if re.fullmatch(r".*/weights", t))]


def _text_expected(logged: LoggedRun) -> list[str]:
    runs = logged.runs_with("text")
    return [*runs, *sorted({t for tags in runs.values() for t in tags})]


@dataclass(frozen=True)
class Dashboard:
    """A TensorBoard dashboard as we check it: the URL fragment (the call's runs only), what
    must be on it, how to drive it."""

    name: str
    tags: str | None
    expected: Callable[[LoggedRun], list[str]]
    drive: Callable[[Any, LoggedRun], None] | None = None
    settings: tuple[tuple[str, Any], ...] = ()

    def fragment(self, logged: LoggedRun) -> str:
        runs = None if self.name == "graphs" else f"^{re.escape(logged.name(''))}"
        return pages.fragment(self.name, self.tags, runs, **dict(self.settings))


DASHBOARDS = (
    Dashboard("graphs", None, _graphs_expected, _select_resources),
    Dashboard("scalars", "similarity", _scalars_expected, lambda d, _: pages.plain_scalars(d),
              (("_smoothingWeight", 0),)),  # fmt: skip
    Dashboard("images", "0_summary|Filters", _images_expected),
    Dashboard("histograms", "/weights$", _histograms_expected),
    Dashboard("text", None, _text_expected),
)


def capture(driver, board, logged: LoggedRun, dashboard: Dashboard, png) -> str:
    """Open ``dashboard`` on the call's runs, drive it, wait until it shows what we logged,
    save ``png``; the page's text."""
    browser.open_page(driver, f"{board.url}/#{dashboard.fragment(logged)}")
    expected = dashboard.expected(logged)
    browser.wait_for_text(driver, expected[:1], pages.DASHBOARD_TIMEOUT_S)
    if dashboard.drive:
        dashboard.drive(driver, logged)
    text = browser.wait_for_text(driver, expected, pages.DASHBOARD_TIMEOUT_S)
    browser.wait_for_images(driver, pages.DASHBOARD_TIMEOUT_S)
    png.parent.mkdir(parents=True, exist_ok=True)
    if not driver.save_screenshot(str(png)):
        raise RuntimeError(f"Chromium could not save {png}")
    return text


def check_graphs(driver, logged: LoggedRun, text: str) -> None:
    node = heaviest_node(logged)
    card = browser.deep_text(driver, "tf-node-info")
    assert f"Memory {tb_memory(node_memory(logged)[node])}" in card, card
    assert browser.call_on(driver, "tf-graph-controls", "return [el.colorBy, el._selectedGraphType];") == [
        "memory",
        "profile",
    ]


def check_text(driver, logged: LoggedRun, text: str) -> None:
    """Every report and every stage summary of the call is on the page in full (cards render
    lazily: the page is read again, for a bounded time, until all are there)."""
    wanted = {
        (run, tag): " ".join(words(raw))
        for run, tags in logged.runs_with("text").items()
        for tag in tags
        for _, _, raw in raw_texts(logged.log_folder, run, tag)
    }

    def missing() -> list:
        page = " ".join(words(browser.deep_text(driver)))
        return [key for key, body in wanted.items() if body not in page]

    browser.wait_for(lambda: not missing() or None, 60, "every text card rendered in full")


def check_images(driver, logged: LoggedRun, text: str) -> None:
    assert browser.wait_for_images(driver, 5) >= 2  # the summary plot and a filter picture at least


EXTRA_CHECKS = {"graphs": check_graphs, "text": check_text, "images": check_images}


def not_blank(png) -> bool:
    """The dashboard area (right of the run list, below the header) has more than a few colours."""
    from PIL import Image

    with Image.open(png) as image:
        width, height = image.size
        area = image.convert("RGB").crop((360, 80, width, height))
        return len(area.getcolors(maxcolors=1 << 16) or range(1 << 16)) > 20


@pytest.mark.parametrize("key", ["pytorch", "keras"])
@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=lambda d: d.name)
def test_dashboard_renders_our_runs_and_tags(driver, board, calls, key, dashboard, tmp_path_factory):
    logged = calls[key]
    png = tmp_path_factory.getbasetemp() / "screenshots" / f"{key}_{dashboard.name}.png"
    text = capture(driver, board, logged, dashboard, png)
    missing = [s for s in dashboard.expected(logged) if s not in text]
    assert not missing, f"not on the {dashboard.name} dashboard: {missing}"
    assert not_blank(png), png
    assert browser.foreign_requests(driver, board.url) == []
    if check := EXTRA_CHECKS.get(dashboard.name):
        check(driver, logged, text)
