"""The node filters and edit rules of `model_compression_toolkit.core.network_editor`,
under MCT's older module path."""

from model_compression_toolkit.core.network_editor import *  # noqa: F403
from model_compression_toolkit.core.network_editor import __all__  # noqa: F401
