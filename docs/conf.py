"""Sphinx configuration: the user guide and the API reference from the docstrings."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "model_compression_toolkit"
author = "model_compression_toolkit contributors"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
autodoc_mock_imports = []
autodoc_typehints = "description"
napoleon_google_docstring = True
exclude_patterns = ["_build"]
html_theme = "alabaster"
nitpicky = False
