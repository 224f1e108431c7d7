"""The real TensorBoard serves every run and tag we log, and its dashboards render them.

Per framework one PTQ call is logged and served by `python -m tensorboard.main`; what its
HTTP data API answers is compared with what TensorBoard's own EventAccumulator reads from
the same files, then the dashboards are opened in headless Chromium.
"""

from __future__ import annotations

import contextlib
import re
from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import pytest
from google.protobuf import text_format
from tensorboard.compat.proto import config_pb2, graph_pb2

from model_compression_toolkit.pipeline.events import STAGES
from tests.e2e import browser
from tests.e2e.screenshots import DASHBOARDS, LoggedRun, capture, heaviest_node, quantize_with_logging
from tests.e2e.server import TensorBoard, tensorboard
from tests.tb import load, resources

pytestmark = pytest.mark.e2e

PER_CHANNEL = ("min_per_channel", "max_per_channel", "mean_per_channel")


@pytest.fixture(scope="module")
def boards():
    """Framework -> (its logs, the TensorBoard serving them): one at a time, all stopped after the module."""
    with contextlib.ExitStack() as running:
        yield running, {}


@pytest.fixture
def served(fw, trained_digits, boards, tmp_path_factory) -> tuple[LoggedRun, TensorBoard]:
    """(logs of one PTQ call of the session's trained digits CNN, the TensorBoard serving them).

    Started once per framework; the previous framework's TensorBoard is stopped first.
    """
    running, cache = boards
    if fw.name not in cache:
        running.close()
        cache.clear()
        model, x_train, _, _ = trained_digits
        logged = quantize_with_logging(fw.name, model, x_train, tmp_path_factory.mktemp(f"{fw.name}_logs"))
        cache[fw.name] = logged, running.enter_context(tensorboard(logged.log_folder))
    return cache[fw.name]


@pytest.fixture(scope="session")
def driver():
    if reason := browser.missing_binaries():
        pytest.skip(reason)
    with browser.chromium() as chromium:
        yield chromium


def served_tags(board, plugin: str) -> dict[str, set[str]]:
    """Run -> tags, as the plugin's /tags route lists them."""
    return {run: set(tags) for run, tags in board.json(f"/data/plugin/{plugin}/tags").items()}


def expected_tags(logged: LoggedRun, kind: str) -> dict[str, set[str]]:
    return {run: set(tags) for run, tags in logged.runs_with(kind).items()}


def folder(logged: LoggedRun, run: str):
    return logged.log_folder / run


# ------------------------------------------------------------------------ the HTTP data API
def test_every_event_folder_is_a_run(served):
    logged, board = served
    runs = board.json("/data/runs")
    on_disk = {
        p.parent.relative_to(logged.log_folder).as_posix()
        for p in logged.log_folder.rglob("events.out.tfevents.*")
    }
    assert sorted(runs) == sorted(on_disk)
    ours = {logged.name(s) for s in (*STAGES, "similarity")}
    ours |= {logged.name("similarity", k) for k in ("accumulated", "local")}
    ours |= {
        logged.name(s, k)
        for s in ("after_statistics_collection", "thresholds_selection")
        for k in PER_CHANNEL
    }
    assert ours == set(runs)


def test_the_dashboards_we_write_for_are_enabled(served):
    _, board = served
    listing = board.json("/data/plugins_listing")
    for plugin in ("graphs", "scalars", "histograms", "distributions", "images", "text"):
        assert listing[plugin]["enabled"], plugin


def test_each_stage_serves_its_graph_and_resources_exactly(served):
    logged, board = served
    info = board.json("/data/plugin/graphs/info")
    assert set(info) == {logged.name(s) for s in STAGES}
    for stage in STAGES:
        run = logged.name(stage)
        acc = load(folder(logged, run))
        assert info[run]["run_graph"] is True
        assert {tag: item["profile"] for tag, item in info[run]["tags"].items()} == {"Resources": True}
        graph = text_format.Parse(
            board.get("/data/plugin/graphs/graph", run=run).decode(), graph_pb2.GraphDef()
        )
        assert graph == acc.Graph(), stage
        body = board.get("/data/plugin/graphs/run_metadata", run=run, tag="Resources").decode()
        assert text_format.Parse(body, config_pb2.RunMetadata()) == acc.RunMetadata("Resources"), stage


def test_scalars_are_served_value_for_value(served):
    logged, board = served
    assert served_tags(board, "scalars") == expected_tags(logged, "scalars")
    for run, tags in expected_tags(logged, "scalars").items():
        acc = load(folder(logged, run))
        for tag in tags:
            got = board.json("/data/plugin/scalars/scalars", run=run, tag=tag)
            assert got == [[e.wall_time, e.step, e.value] for e in acc.Scalars(tag)], (run, tag)


def test_histograms_are_served_bucket_for_bucket(served):
    logged, board = served
    expected = expected_tags(logged, "histograms")
    assert served_tags(board, "histograms") == expected
    assert served_tags(board, "distributions") == expected
    assert any(t.endswith("/weights/quantized") for t in expected[logged.name("quantized_graph")])
    for run, tags in expected.items():
        acc = load(folder(logged, run))
        for tag in tags:
            (event,) = acc.Histograms(tag)
            ((wall_time, step, buckets),) = board.json("/data/plugin/histograms/histograms", run=run, tag=tag)
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


def test_images_are_served_byte_for_byte(served):
    logged, board = served
    expected = expected_tags(logged, "images")
    assert {run: set(tags) for run, tags in board.json("/data/plugin/images/tags").items()} == expected
    similarity = expected[logged.name("similarity")]
    assert {"cosine_similarity/summary", "cosine_similarity/sample_0"} <= similarity
    assert any(tag.startswith("filters/") for tag in similarity)
    for run, tags in expected.items():
        acc = load(folder(logged, run))
        for tag in tags:
            (meta,) = board.json("/data/plugin/images/images", run=run, tag=tag)
            png = board.get(f"/data/plugin/images/individualImage?{meta['query']}")
            assert png == acc.Images(tag)[-1].encoded_image_string, (run, tag)


def words(text: str) -> list[str]:
    """The words and numbers of a text, with markdown or HTML markup and entities gone."""
    import html

    return re.findall(r"[^\W_]+", html.unescape(re.sub(r"<[^>]+>", " ", text)))


def raw_texts(logged: LoggedRun, run: str, tag: str) -> list[tuple[float, int, str]]:
    acc = load(folder(logged, run))
    return [(e.wall_time, e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(tag)]


def test_text_is_served_word_for_word(served):
    logged, board = served
    expected = expected_tags(logged, "text")
    assert served_tags(board, "text") == expected
    assert expected[logged.name("similarity")] == {"similarity/causes", "similarity/report"}
    assert all(expected[logged.name(stage)] == {"summary"} for stage in STAGES)
    for run, tags in expected.items():
        for tag in tags:
            got = board.json("/data/plugin/text/text", run=run, tag=tag)
            want = raw_texts(logged, run, tag)
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


def check_graphs(driver, logged: LoggedRun, text: str) -> None:
    node = heaviest_node(logged)
    card = browser.deep_text(driver, "tf-node-info")
    memory = resources(load(logged.run / "quantized_graph"))[node]
    assert f"Memory {tb_memory(memory)}" in card, card
    assert browser.call_on(driver, "tf-graph-controls", "return [el.colorBy, el._selectedGraphType];") == [
        "memory",
        "profile",
    ]


def check_text(driver, logged: LoggedRun, text: str) -> None:
    """Every report and every stage summary is on the page in full (cards render lazily:
    the page is read again, for a bounded time, until all are there)."""
    wanted = {
        (run, tag): " ".join(words(raw))
        for run, tags in logged.runs_with("text").items()
        for tag in tags
        for _, _, raw in raw_texts(logged, run, tag)
    }

    def missing() -> list:
        page = " ".join(words(browser.deep_text(driver)))
        return [key for key, body in wanted.items() if body not in page]

    browser.wait_for(lambda: not missing() or None, 60, "every text card rendered in full")


def check_images(driver, logged: LoggedRun, text: str) -> None:
    assert browser.wait_for_images(driver, 5) >= 2  # the summary plot and the first sample at least


EXTRA_CHECKS = {"graphs": check_graphs, "text": check_text, "images": check_images}


def not_blank(png) -> bool:
    """The dashboard area (right of the run list, below the header) has more than a few colours."""
    from PIL import Image

    with Image.open(png) as image:
        width, height = image.size
        area = image.convert("RGB").crop((360, 80, width, height))
        return len(area.getcolors(maxcolors=1 << 16) or range(1 << 16)) > 20


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=lambda d: d.name)
def test_dashboard_renders_our_runs_and_tags(driver, served, dashboard, tmp_path_factory):
    logged, board = served
    png = tmp_path_factory.getbasetemp() / "screenshots" / f"{logged.framework}_{dashboard.name}.png"
    text = capture(driver, board, logged, dashboard, png)
    missing = [s for s in dashboard.expected(logged) if s not in text]
    assert not missing, f"not on the {dashboard.name} dashboard: {missing}"
    assert not_blank(png), png
    assert browser.foreign_requests(driver, board.url) == []
    if check := EXTRA_CHECKS.get(dashboard.name):
        check(driver, logged, text)
