"""The package stays readable: no module over 600 lines and no folder more than three deep
(STYLE.md), so a module that grows past it is split when it grows, not later."""

from __future__ import annotations

from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "model_compression_toolkit"
MODULES = sorted(PACKAGE.rglob("*.py"))


def test_the_package_has_modules():
    assert len(MODULES) > 50, MODULES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_over_600_lines(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= 600, f"{path.relative_to(PACKAGE.parent)} has {lines} lines: split it"


def test_no_folder_more_than_three_deep():
    deep = [p for p in MODULES if len(p.relative_to(PACKAGE.parent).parts) > 4]
    assert not deep, f"folders more than three deep: {deep}"
