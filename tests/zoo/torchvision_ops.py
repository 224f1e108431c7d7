"""Let the Python half of torchvision import where its C ops cannot load.

The torchvision built for torch 2.13 on PyPI links CUDA libraries; beside the CPU torch
this environment pins, its ``_C`` extension does not load. torchvision's own code guards
every use of those ops but two: ``_meta_registrations`` registers fake kernels for
``torchvision::nms`` and ``torchvision::qnms`` unconditionally, so ``import torchvision``
fails, and with it ``import timm`` and transformers' image utilities.

`install` puts a finder first on ``sys.meta_path``: on the first import of torchvision it
tries the real ``_C`` extension, and only when it does not load gives those two ops a
schema (no kernel: calling them raises), so that torchvision's models, ``ops.misc`` and
transforms import. Where torchvision's ops load, it does nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path

_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_LIBRARIES: list = []  # keeps the torch.library.Library alive (its definitions die with it)


class _Finder(importlib.abc.MetaPathFinder):
    done = False

    def find_spec(self, name, path=None, target=None):
        if name == "torchvision" and not self.done:
            self.done = True
            _define_missing_ops()
        return None  # the regular finders import torchvision itself


def _define_missing_ops() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return
    import torch

    extension = next(Path(spec.submodule_search_locations[0]).glob("_C*.so"), None)
    if extension is not None:
        try:
            torch.ops.load_library(str(extension))
            return  # the real ops are there
        except OSError:
            pass
    if hasattr(torch.ops.torchvision, "nms"):
        return
    library = torch.library.Library("torchvision", "DEF")
    for schema in _SCHEMAS:
        library.define(schema)
    _LIBRARIES.append(library)


def install() -> None:
    if "torchvision" not in sys.modules and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
