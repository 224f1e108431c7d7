"""One log folder, one TensorBoard and one browser for every end-to-end test.

    calls    the 5 PTQ calls of `tests.e2e.logs.CALLS`, logged into one folder (built once)
    board    TensorBoard serving that folder as the docs say (`--logdir <log folder>`), on
             127.0.0.1 and a free port, stopped at the end; every run loaded before a test
    driver   headless Chromium (skips the browser tests where it is not installed)
"""

from __future__ import annotations

import pytest

from tests.e2e import browser
from tests.e2e.logs import LoggedRun, build_logs, wait_until_served
from tests.e2e.server import tensorboard


@pytest.fixture(scope="session")
def calls(tmp_path_factory) -> dict[str, LoggedRun]:
    return build_logs(tmp_path_factory.mktemp("e2e_logs"))


@pytest.fixture(scope="session")
def board(calls):
    """TensorBoard on the calls' log folder, once it serves every run and tag written."""
    with tensorboard(next(iter(calls.values())).log_folder) as running:
        wait_until_served(running, calls)
        yield running


@pytest.fixture(scope="session")
def driver():
    if reason := browser.missing_binaries():
        pytest.skip(reason)
    with browser.chromium() as chromium:
        yield chromium
