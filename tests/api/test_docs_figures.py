"""The fixes' before/after figures in the docs are the ones ``docs/figures/fixes.py`` writes:
every figure the debugging page names is shipped and made by the script, and every figure the
script makes is shown. The script itself takes minutes (it quantizes the digits CNN a dozen
times), so it is not run here; its list of figures and its drawing functions are read."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
STATIC = DOCS / "_static" / "fixes"
PAGE = DOCS / "similarity.rst"
PNG = b"\x89PNG\r\n\x1a\n"


def _script():
    spec = importlib.util.spec_from_file_location("docs_figures_fixes", DOCS / "figures" / "fixes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports matplotlib and numpy only; the library when drawing
    return module


def _referenced(text: str) -> list[str]:
    return re.findall(r"^\.\. figure:: /_static/fixes/([\w-]+)\.png\s*$", text, flags=re.MULTILINE)


def test_every_figure_of_the_fixes_is_shown_shipped_and_drawn_by_the_script():
    script = _script()
    referenced = _referenced(PAGE.read_text())
    assert len(referenced) == len(set(referenced)), referenced
    assert set(referenced) == set(script.FIGURES), (referenced, script.FIGURES)
    assert set(script.DRAW) == set(script.FIGURES)  # one drawing function per figure
    for name in script.FIGURES:
        path = STATIC / f"{name}.png"
        assert path.is_file(), (
            f"{path} is missing: run .venv/bin/python docs/figures/fixes.py docs/_static/fixes"
        )
        data = path.read_bytes()
        assert data.startswith(PNG) and len(data) < 80 * 1024, (name, len(data))
    shipped = {p.stem for p in STATIC.glob("*.png")}
    assert shipped == set(script.FIGURES), shipped - set(script.FIGURES)  # nothing stale shipped


def test_each_fix_of_the_menu_has_a_section_with_its_figure():
    """Equalize, re-grid, widen (activations, weights), and only then keep float: each a
    section with the cause, the change, the cost on an integer target and a figure."""
    text = PAGE.read_text()
    sections = re.split(r"\n(?=[^\n]+\n\^{4,}\n)", text)
    fixes = {
        "Equalize channels": "equalization",
        "A better grid": "grid",
        "16-bit activations": "activation_bits",
        "More weight bits": "weight_bits",
        "Keep float": "keep_float",
    }
    for title, figure in fixes.items():
        (section,) = [s for s in sections if s.startswith(title + "\n^")]
        for part in ("*The cause*", "*What it changes*", "*What it costs on an integer target*"):
            assert part in section, (title, part)
        assert figure in _referenced(section), (title, figure)


def test_the_script_refuses_an_unknown_figure_name(tmp_path):
    with pytest.raises(SystemExit, match="names: equalization"):
        _script().main(["fixes.py", str(tmp_path), "no_such_figure"])
    assert not list(tmp_path.iterdir())
