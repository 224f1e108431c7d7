"""The dashboard's TensorBoard backend: JSON routes and the static frontend.

/data/plugin/quantization/index.js      the ES module TensorBoard imports (`render()`)
/data/plugin/quantization/static/<f>    the frontend's other modules and its style
/data/plugin/quantization/calls         the calls in the log folder, newest first
/data/plugin/quantization/call?run=<id> one call's page (404 for an id not found)
"""

from __future__ import annotations

import json
import mimetypes
from pathlib import Path

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from model_compression_toolkit.tensorboard_plugin.calls import (
    call_rows,
    find_calls,
    has_calls,
    log_roots,
    read_page,
)

STATIC = Path(__file__).with_name("static")
PLUGIN_NAME = "quantization"
_TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}


class QuantizationPlugin(base_plugin.TBPlugin):
    """The QUANTIZATION tab: every PTQ call in the log folder, and one page per call."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        spec = getattr(context.flags, "logdir_spec", None) if context.flags is not None else None
        self._logdir = context.logdir or spec or ""
        self._roots = log_roots(context.logdir, spec)

    def get_plugin_apps(self):
        return {
            "/index.js": self._index,
            "/static/*": self._static,
            "/calls": self._calls,
            "/call": self._call,
        }

    def is_active(self) -> bool:
        return has_calls(self._roots)

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(
            es_module_path="/index.js", tab_name="Quantization", disable_reload=True
        )

    @wrappers.Request.application
    def _index(self, request):
        return _file(request, STATIC / "index.js")

    @wrappers.Request.application
    def _static(self, request):
        name = request.path.rsplit("/static/", 1)[-1]
        allowed = {p.name: p for p in STATIC.iterdir() if p.is_file()}
        if name not in allowed:
            return http_util.Respond(request, f"no file {name!r}", "text/plain", code=404)
        return _file(request, allowed[name])

    @wrappers.Request.application
    def _calls(self, request):
        body = {"logdir": str(self._logdir or ""), "calls": call_rows(self._roots)}
        return http_util.Respond(request, json.dumps(body, allow_nan=False), "application/json")

    @wrappers.Request.application
    def _call(self, request):
        run = request.args.get("run", "")
        folder = find_calls(self._roots).get(run)
        page = read_page(folder) if folder is not None else None
        if page is None:
            return http_util.Respond(
                request, f"no quantization call {run!r} in this log folder", "text/plain", code=404
            )
        page["run"] = run
        return http_util.Respond(request, json.dumps(page, allow_nan=False), "application/json")


def _file(request, path: Path):
    kind = _TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return http_util.Respond(request, path.read_bytes(), kind)
