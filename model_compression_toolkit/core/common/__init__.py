"""MCT's import path ``mct.core.common.network_editors``, for scripts written against MCT
(``mct.core.common.network_editors.NodeNameFilter``); the same objects as
``mct.core.network_editor``."""

from model_compression_toolkit.core.common import network_editors

__all__ = ["network_editors"]
