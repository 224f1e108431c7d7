"""Bad input gets a clear, typed error before any work starts; nothing is written."""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.errors import (
    ConfigurationError,
    InputMismatchError,
    RepresentativeDataError,
    UnsupportedFrameworkError,
)


@pytest.fixture
def model_and_batch(fw, trained_digits, tmp_path):
    mct.set_log_folder(tmp_path / "logs")
    model, x_train, _, _ = trained_digits
    return model, x_train[:8]


def nothing_written(tmp_path):
    return list((tmp_path / "logs").iterdir()) == []


def test_data_gen_not_callable(fw, model_and_batch, tmp_path):
    model, batch = model_and_batch
    with pytest.raises(RepresentativeDataError, match="callable.*got list"):
        fw.ptq(model, [[batch]])
    assert nothing_written(tmp_path)


def test_data_gen_yields_nothing(fw, model_and_batch, tmp_path):
    model, _ = model_and_batch
    with pytest.raises(RepresentativeDataError, match="no batches"):
        fw.ptq(model, lambda: iter([]))
    assert nothing_written(tmp_path)


def test_batch_not_a_list_of_arrays(fw, model_and_batch, tmp_path):
    model, batch = model_and_batch
    with pytest.raises(RepresentativeDataError, match=r"list or tuple.*ndarray"):
        fw.ptq(model, lambda: iter([batch]))
    with pytest.raises(RepresentativeDataError, match="input 0.*str"):
        fw.ptq(model, lambda: iter([["not an array"]]))
    assert nothing_written(tmp_path)


def test_wrong_number_of_inputs(fw, model_and_batch, tmp_path):
    model, batch = model_and_batch
    with pytest.raises(InputMismatchError, match="1 input.*holds 2"):
        fw.ptq(model, lambda: iter([[batch, batch]]))
    assert nothing_written(tmp_path)


def test_shape_the_model_rejects(fw, model_and_batch, tmp_path):
    model, batch = model_and_batch
    bad = np.zeros((8, 32, 32, 3) if fw.channels_last else (8, 3, 32, 32), np.float32)
    with pytest.raises(InputMismatchError, match=r"\(8, (32, 32, 3|3, 32, 32)\)"):
        fw.ptq(model, lambda: iter([[bad]]))
    assert nothing_written(tmp_path)


def test_bad_core_config(fw, model_and_batch, tmp_path):
    model, batch = model_and_batch
    with pytest.raises(ConfigurationError, match="weights_n_bits.*2 to 16.*got 1"):
        fw.ptq(model, lambda: iter([[batch]]), mct.core.CoreConfig(mct.core.QuantizationConfig(weights_n_bits=1)))
    with pytest.raises(ConfigurationError, match="CoreConfig"):
        fw.ptq(model, lambda: iter([[batch]]), {"weights_n_bits": 8})
    assert nothing_written(tmp_path)


def test_model_of_the_other_framework(fw, model_and_batch):
    model, batch = model_and_batch
    other = mct.ptq.keras_post_training_quantization if fw.name == "pytorch" else mct.ptq.pytorch_post_training_quantization
    with pytest.raises(UnsupportedFrameworkError, match=f"{fw.name}_post_training_quantization"):
        other(model, lambda: iter([[batch]]))
    with pytest.raises(UnsupportedFrameworkError, match="got builtins.str"):
        fw.ptq("model.pt", lambda: iter([[batch]]))


def test_channels_first_batch_for_a_channels_last_model_names_both_shapes(fw, model_and_batch):
    if not fw.channels_last:
        pytest.skip("PyTorch models are channels-first")
    model, batch = model_and_batch
    wrong = np.transpose(batch, (0, 3, 1, 2))
    with pytest.raises(InputMismatchError, match=r"\(N, 32, 32, 1\).*\(8, 1, 32, 32\).*channels-first"):
        fw.ptq(model, lambda: iter([[wrong]]))
