"""Fixtures shared by the test suite: one `Framework` per backend, so a behaviour is proven
for PyTorch and Keras by the same test."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
pytest.register_assert_rewrite("tests.backends.contract")  # its checks run in every backend's tests

import model_compression_toolkit as mct  # noqa: E402
from tests.fixtures import digits  # noqa: E402
from tests.fixtures.trained import load_trained  # noqa: E402
from tests.zoo import torchvision_ops  # noqa: E402

torchvision_ops.install()  # timm and transformers import torchvision (tests/zoo/torchvision_ops.py)


@dataclass
class Framework:
    name: str
    channels_last: bool
    ptq: Callable[..., Any]
    make_digits_cnn: Callable[[], Any]
    predict: Callable[[Any], Callable[[np.ndarray], np.ndarray]]

    def data(self):
        return digits.digits_data(channels_last=self.channels_last)


FRAMEWORKS = {
    "pytorch": Framework(
        "pytorch", False, mct.ptq.pytorch_post_training_quantization,
        digits.torch_digits_cnn, digits.torch_predict,
    ),
    "keras": Framework(
        "keras", True, mct.ptq.keras_post_training_quantization,
        digits.keras_digits_cnn, digits.keras_predict,
    ),
}  # fmt: skip


@pytest.fixture(params=list(FRAMEWORKS), scope="session")
def fw(request) -> Framework:
    return FRAMEWORKS[request.param]


_TRAINED: dict[str, Any] = {}


@pytest.fixture
def trained_digits(fw):
    """(model, x_train, x_test, y_test): the digits CNN with the shipped trained weights
    (`tests.fixtures.trained`: the same model on every machine), loaded once per session."""
    x_train, _, x_test, y_test = fw.data()
    if fw.name not in _TRAINED:
        _TRAINED[fw.name] = load_trained(fw.name)
    return _TRAINED[fw.name], x_train, x_test, y_test


@pytest.fixture(autouse=True)
def no_log_folder_leaks():
    """Every test starts and ends with logging off."""
    mct.set_log_folder(None)
    yield
    mct.set_log_folder(None)
    assert not [h for h in logging.getLogger("model_compression_toolkit").handlers if isinstance(h, logging.FileHandler)]
