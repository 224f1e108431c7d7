"""Calibration data or weights that cannot give a usable model: a typed error that names
what is wrong, before a model is returned (they used to give a destroyed model silently)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.errors import ModelWeightsError, RepresentativeDataError
from tests.robustness.helpers import small_mlp


def _input_name(fw) -> str:
    return "input_1" if fw.name == "pytorch" else "x"


REAL = np.random.default_rng(1).standard_normal((32, 6)).astype(np.float32)
DEGENERATE = {
    "zeros": (np.zeros_like(REAL), "every value is 0"),
    "constant": (np.full_like(REAL, 0.5), "every value is 0.5"),
    "1e30": (REAL * np.float32(1e30), "e+30 in magnitude"),
}  # all-NaN or all-inf batches are refused as each is read: tests/robustness/test_poor_cases.py


@pytest.mark.parametrize("case", list(DEGENERATE))
def test_degenerate_calibration_data_is_refused_naming_the_input(fw, tmp_path, case):
    """All-zero, constant or absurdly large (1e30) calibration batches give
    a RepresentativeDataError naming the model input and what it held, not a model whose
    output on real data is a constant; the call's mct.log records why the run stopped."""
    data, got = DEGENERATE[case]
    mct.set_log_folder(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the non-finite values skipped are also warned about
        with pytest.raises(RepresentativeDataError) as err:
            fw.ptq(small_mlp(fw), lambda: [[data[:16]], [data[16:]]])
    message = str(err.value)
    assert f"input {_input_name(fw)!r}" in message and got in message, message
    assert "32 samples" in message and "representative_data_gen" in message
    (call,) = tmp_path.iterdir()
    assert "RepresentativeDataError" in (call / "mct.log").read_text()


def test_real_data_with_a_few_non_finite_values_still_quantizes(fw):
    """One NaN sample among real ones is skipped with a warning, as before: only data that
    leaves nothing to calibrate on is refused."""
    data = REAL.copy()
    data[3] = np.nan
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        q_model, _ = fw.ptq(small_mlp(fw), lambda: [[data]])
    assert q_model is not None
    assert any("non-finite" in str(w.message) for w in caught)


def test_a_dead_activation_is_one_warning_naming_it_and_the_model_comes_back(fw):
    """An activation that is constant on good data (a ReLU whose inputs are all negative) may
    be what the model does: one warning per such activation, naming it and its value, and
    the quantized model is returned."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        q_model, info = fw.ptq(small_mlp(fw, bias1=-1000.0), lambda: [[REAL[:16]], [REAL[16:]]])
    constant = [str(w.message) for w in caught if "was constant" in str(w.message)]
    assert q_model is not None
    assert len([m for m in constant if "'relu'" in m]) == 1, constant
    assert all(m in info.warnings for m in constant)


def test_nan_and_inf_weights_are_named_before_anything_is_written(fw, tmp_path):
    """A NaN in one layer's kernel and an inf in another's bias give a ModelWeightsError that
    names both layers and weights, before any file is written (it used to return a NaN model
    whose warnings spoke of activations only)."""
    model = small_mlp(fw)
    if fw.name == "pytorch":
        import torch

        with torch.no_grad():
            model.fc1.weight[2, 1] = float("nan")
            model.fc2.bias[0] = float("inf")
    else:
        w1, b1 = model.get_layer("fc1").get_weights()
        w1[1, 2] = np.nan
        model.get_layer("fc1").set_weights([w1, b1])
        w2, b2 = model.get_layer("fc2").get_weights()
        b2[0] = np.inf
        model.get_layer("fc2").set_weights([w2, b2])
    mct.set_log_folder(tmp_path)
    with pytest.raises(ModelWeightsError) as err:
        fw.ptq(model, lambda: [[REAL]])
    message = str(err.value)
    assert "'fc1'" in message and "1 NaN" in message, message
    assert "'fc2'" in message and "1 infinite" in message, message
    assert list(tmp_path.iterdir()) == []
