"""Issue 23, point 9: the docs show cropped screenshots of the new view, and every one is used.

The pictures were whole pages shrunk to about 600 px, unreadable. `make screenshots`
(`tests.e2e.screenshots`) now crops each to the part of the page it is about; this takes
every shot on the session's TensorBoard and checks the docs show each one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e import browser
from tests.e2e.screenshots import SHOTS, take_all

pytestmark = pytest.mark.e2e

DOCS = Path(__file__).resolve().parents[2] / "docs"
STATIC = DOCS / "_static" / "screenshots"
MAX_WINDOW_SHARE = 0.5  # a cropped shot covers at most half the window


def referenced() -> set[str]:
    """The screenshots the docs pages show (``.. screenshot:: name`` or an image path)."""
    text = "\n".join(p.read_text() for p in DOCS.rglob("*.rst"))
    return set(re.findall(r"\.\. screenshot:: (\S+)", text)) | set(re.findall(r"_static/screenshots/(\S+)\.png", text))


def test_every_shot_is_cropped_to_what_it_shows(driver, board, calls, tmp_path):
    from PIL import Image

    window = browser.WINDOW[0] * browser.WINDOW[1]
    for path in take_all(driver, board, calls, tmp_path):
        with Image.open(path) as image:
            width, height = image.size
            colours = len(image.convert("RGB").getcolors(maxcolors=1 << 16) or range(1 << 16))
        assert 150 <= min(width, height) and width * height <= MAX_WINDOW_SHARE * window, (path.name, width, height)
        assert colours > 20, path.name  # not blank


def test_the_docs_show_every_shot_and_only_shots_that_exist():
    shots = {shot.name for shot in SHOTS}
    shown = referenced()
    assert shown == shots, (shown - shots, shots - shown)
    on_disk = {p.stem for p in STATIC.glob("*.png")}
    assert on_disk == shots, on_disk ^ shots
