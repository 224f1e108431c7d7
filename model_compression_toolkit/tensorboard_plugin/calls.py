"""The call folders under a log folder, and what the dashboard lists of each.

    <logdir>/<call>/quantization_call.json      a call (id: "<call>")
    <logdir>/<group>/<call>/quantization_call.json   deeper calls (id: "<group>/<call>")
    <logdir> itself a call folder               id: its own name (`tensorboard --logdir <call>`)

A call's id is its folder's path below the log folder; only ids found by the walk are
served, so a request never names a file outside the log folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from model_compression_toolkit.observers.plugin_files import PLUGIN_FILE

MAX_DEPTH = 3  # call folders are looked for this many levels below the log folder, at most


def find_calls(logdir: str | Path | None) -> dict[str, Path]:
    """Call id -> call folder, for every folder under ``logdir`` holding `PLUGIN_FILE`."""
    if not logdir:
        return {}
    root = Path(logdir).expanduser()
    if not root.is_dir():
        return {}
    if (root / PLUGIN_FILE).is_file():
        return {root.resolve().name: root}
    found: dict[str, Path] = {}
    for folder, dirs, files in os.walk(root):
        depth = len(Path(folder).relative_to(root).parts)
        if PLUGIN_FILE in files:
            found[Path(folder).relative_to(root).as_posix()] = Path(folder)
            dirs[:] = []  # a call's own runs hold no other call
        elif depth >= MAX_DEPTH:
            dirs[:] = []
    return found


def has_calls(logdir: str | Path | None) -> bool:
    """Whether any call folder under ``logdir`` has the dashboard's file."""
    return bool(find_calls(logdir))


def read_page(folder: Path) -> dict[str, Any] | None:
    """A call's page, or None when its file cannot be read (being written, damaged)."""
    try:
        return json.loads((folder / PLUGIN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


LISTED = ("model", "framework", "settings", "output_sqnr_db", "memory", "metric", "verdict", "created")


def call_rows(logdir: str | Path | None) -> list[dict[str, Any]]:
    """One row per call for the landing page, newest first."""
    rows = []
    for call_id, folder in find_calls(logdir).items():
        page = read_page(folder)
        if page is None:
            continue
        row = {"run": call_id, **{key: page.get(key) for key in LISTED}}
        row["float_layers"] = len(page.get("float_layers") or [])
        row["causes"] = [
            f"{c['name']} {'output' if c['kind'] == 'activation' else 'weights'}"
            for c in page.get("causes", [])
        ]
        rows.append(row)
    return sorted(rows, key=lambda row: (row.get("created") or 0.0, row["run"]), reverse=True)
