"""The call folders under a log folder, and what the dashboard lists of each.

    <logdir>/<call>/quantization_call.json           a call (id: "<call>")
    <logdir>/<group>/<call>/quantization_call.json   deeper calls (id: "<group>/<call>")
    <logdir> itself a call folder                    id: its own name (`tensorboard --logdir <call>`)
    --logdir_spec name:<folder>,...                  ids "<name>/<call>" (a call folder itself: "<name>")

A call's id is its folder's path below the log folder; only ids found by the walk are
served, so a request never names a file outside the log folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from model_compression_toolkit.observers.plugin_files import PLUGIN_FILE

MAX_DEPTH = 3  # call folders are looked for this many levels below the log folder, at most
Roots = Mapping[str, Path]  # name ("" for --logdir) -> folder


def log_roots(logdir: str | None, logdir_spec: str | None = None) -> dict[str, Path]:
    """The folders TensorBoard serves: ``--logdir``, or each ``name:folder`` of ``--logdir_spec``
    (a folder without a name is named after itself)."""
    if logdir:
        return {"": Path(logdir).expanduser()}
    roots = {}
    for part in (logdir_spec or "").split(","):
        name, sep, folder = part.partition(":")
        if not sep or not name or "/" in name or "\\" in name:  # a folder without a name
            name, folder = "", part
        if folder:
            roots[name or Path(folder).name] = Path(folder).expanduser()
    return roots


def find_calls(roots: Roots) -> dict[str, Path]:
    """Call id -> call folder, for every folder under ``roots`` holding `PLUGIN_FILE`."""
    found: dict[str, Path] = {}
    for name, root in roots.items():
        if not root.is_dir():
            continue
        if (root / PLUGIN_FILE).is_file():
            found[name or root.resolve().name] = root
            continue
        for folder, dirs, files in os.walk(root):
            relative = Path(folder).relative_to(root)
            if PLUGIN_FILE in files:
                found["/".join(p for p in (name, relative.as_posix()) if p)] = Path(folder)
                dirs[:] = []  # a call's own runs hold no other call
            elif len(relative.parts) >= MAX_DEPTH:
                dirs[:] = []
    return found


def has_calls(roots: Roots) -> bool:
    """Whether any call folder under ``roots`` has the dashboard's file."""
    return bool(find_calls(roots))


def read_page(folder: Path) -> dict[str, Any] | None:
    """A call's page, or None when its file cannot be read (being written, damaged)."""
    try:
        return json.loads((folder / PLUGIN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


LISTED = ("model", "framework", "settings", "output_sqnr_db", "memory", "metric", "verdict", "created")


def call_rows(roots: Roots) -> list[dict[str, Any]]:
    """One row per call for the landing page, newest first."""
    rows = []
    for call_id, folder in find_calls(roots).items():
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
