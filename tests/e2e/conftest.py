"""One log folder, one TensorBoard and one browser for every end-to-end test.

    calls    the 5 PTQ calls of `tests.e2e.logs.CALLS`, logged into one folder (built once)
    board    TensorBoard serving that folder as the docs say (`--logdir <log folder>`), on
             127.0.0.1 and a free port, stopped at the end; every run loaded before a test
    driver   headless Chromium (skips the browser tests where it is not installed)
"""

from __future__ import annotations

import pytest

from tests.e2e import browser
from tests.e2e.logs import LoggedRun, build_logs
from tests.e2e.server import tensorboard

LOAD_TIMEOUT_S = 90.0


@pytest.fixture(scope="session")
def calls(tmp_path_factory) -> dict[str, LoggedRun]:
    return build_logs(tmp_path_factory.mktemp("e2e_logs"))


def served_tags(board, plugin: str) -> dict[str, set[str]]:
    """Run -> tags, as the plugin's /tags route lists them."""
    return {run: set(tags) for run, tags in board.json(f"/data/plugin/{plugin}/tags").items()}


def expected_tags(calls: dict[str, LoggedRun], kind: str) -> dict[str, set[str]]:
    """Run -> tags of ``kind`` as TensorBoard's own EventAccumulator reads them from the files."""
    return {run: set(tags) for logged in calls.values() for run, tags in logged.runs_with(kind).items()}


@pytest.fixture(scope="session")
def board(calls):
    """TensorBoard on the calls' log folder, once it serves every run and tag written."""
    log_folder = next(iter(calls.values())).log_folder
    expected = {kind: expected_tags(calls, kind) for kind in ("scalars", "histograms", "images", "text")}
    with tensorboard(log_folder) as running:

        def loaded() -> bool:
            return all(served_tags(running, kind) == tags for kind, tags in expected.items())

        try:
            browser.wait_for(loaded, LOAD_TIMEOUT_S, "TensorBoard to load every run")
        except TimeoutError as error:
            raise TimeoutError(f"{error}; its output:\n{running.log_tail()}") from None
        yield running


@pytest.fixture(scope="session")
def driver():
    if reason := browser.missing_binaries():
        pytest.skip(reason)
    with browser.chromium() as chromium:
        yield chromium
