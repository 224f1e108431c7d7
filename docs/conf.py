"""Sphinx configuration: the user guide and the API reference from the docstrings.

The package imports neither torch nor TensorFlow, so autodoc needs neither.
"""

import os
import sys

from docutils import nodes
from docutils.parsers.rst.directives.images import Figure

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

project = "model_compression_toolkit"
author = "model_compression_toolkit contributors"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
autodoc_mock_imports = []
autodoc_typehints = "description"
autodoc_member_order = "bysource"
napoleon_google_docstring = True
exclude_patterns = ["_build"]
html_theme = "alabaster"
# wide enough for the cropped TensorBoard screenshots at their own size (up to about 1000 px)
html_theme_options = {"page_width": "1280px", "body_max_width": "none"}
html_static_path = ["_static"] if os.path.isdir(os.path.join(HERE, "_static")) else []
nitpicky = False

SCREENSHOTS = os.path.join(HERE, "_static", "screenshots")


class Screenshot(Figure):
    """``.. screenshot:: graph``: a figure of a cropped TensorBoard screenshot from
    ``make screenshots`` (``_static/screenshots/<name>.png``, shown at its own size); the
    directive's content is the caption. When the file is missing, the page gets an HTML
    comment instead (no image, no caption), so the build stays free of warnings; the text
    around each screenshot describes what it shows.
    """

    def run(self):
        name = self.arguments[0]
        if os.path.isfile(os.path.join(SCREENSHOTS, f"{name}.png")):
            self.arguments[0] = f"/_static/screenshots/{name}.png"
            self.options.setdefault("alt", f"TensorBoard: {name}")
            return super().run()
        return [nodes.comment("", f"screenshot {name!r}: run `make screenshots` to add it")]


def setup(app):
    app.add_directive("screenshot", Screenshot)
