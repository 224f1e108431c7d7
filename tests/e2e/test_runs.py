"""Issue 23, point 1: five PTQ calls in one log folder stay readable in TensorBoard.

TensorBoard selects no run at all when a log folder holds more than 40, and every
dashboard but Graphs then opens blank. Each call writes at most 8 runs, so five calls
open with every dashboard filled; the stage runs sort in pipeline order; a call shows
its name; the line a call ends with opens that call alone.
"""

from __future__ import annotations

import re
import shlex

import pytest

from model_compression_toolkit.pipeline.events import STAGES
from tests.e2e import browser, pages
from tests.e2e.server import tensorboard

pytestmark = pytest.mark.e2e

MAX_RUNS_SELECTED = 40  # TensorBoard's run selector selects none above this
MAX_RUNS_PER_CALL = 8


def test_each_call_writes_at_most_8_runs_so_five_calls_are_40(calls, board):
    runs = board.json("/data/runs")
    for key, logged in calls.items():
        mine = [r for r in runs if r.startswith(logged.name(""))]
        assert 0 < len(mine) <= MAX_RUNS_PER_CALL, (key, mine)
    assert len(runs) <= MAX_RUNS_SELECTED


@pytest.mark.parametrize("dashboard", list(pages.DRAWN))
def test_every_dashboard_shows_data_without_a_click(driver, board, dashboard):
    """Opened as the docs say (``--logdir`` on the folder), nothing clicked: every run
    is selected and the cards draw their data."""
    browser.open_page(driver, f"{board.url}/#{dashboard}")
    if dashboard != "graphs":  # the Graphs dashboard shows one run, whatever is selected
        selected, listed = pages.selected_runs(driver)
        assert selected == listed == len(board.json("/data/runs")), f"{selected} of {listed} runs selected"
    count = browser.wait_for(lambda: pages.drawn(driver, dashboard), pages.DASHBOARD_TIMEOUT_S,
                             f"the {dashboard} dashboard to draw data")  # fmt: skip
    assert count > 0


def test_the_graph_run_menu_lists_each_call_in_pipeline_order_with_its_name(driver, board, calls):
    browser.open_page(driver, f"{board.url}/#graphs")
    menu = pages.graph_runs(driver)
    for key, logged in calls.items():
        stages = [run.removeprefix(logged.name("")) for run in menu if run.startswith(logged.name(""))]
        assert [re.sub(r"^\d+_", "", s) for s in stages] == list(STAGES), (key, stages)
    names = {key: logged.run.name for key, logged in calls.items()}
    assert re.fullmatch(r"Sequential_outlier_\d{8}-\d{6}", names["pytorch_outlier"]), names  # run_name="outlier"
    assert re.fullmatch(r"digits_cnn_outlier_\d{8}-\d{6}", names["keras_outlier"]), names
    # its fix: the outlier ReLU's output at 16 bits, the next conv's weights at 12
    assert re.fullmatch(r"Sequential_tuned_\d{8}-\d{6}", names["pytorch_fixed"]), names  # tuned PTQ


def test_the_line_a_call_ends_with_opens_that_call_alone(calls):
    """``mct.log`` (and the console) end with ``tensorboard --logdir <call folder>``: run as
    written, TensorBoard serves this call's runs and no other call's."""
    logged = calls["pytorch_outlier"]
    line = (logged.run / "mct.log").read_text().strip().splitlines()[-1]
    command = shlex.split(line[line.index("tensorboard --logdir") :])
    assert command[:2] == ["tensorboard", "--logdir"] and len(command) == 3, line
    with tensorboard(command[2]) as alone:
        runs = browser.wait_for(
            lambda: (r := alone.json("/data/runs")) and len(r) == len(logged.runs()) and r,
            pages.DASHBOARD_TIMEOUT_S, "the call's runs",
        )  # fmt: skip
    assert sorted(f"{logged.run.name}/{r}" for r in runs) == logged.runs()
