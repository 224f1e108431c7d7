"""Issue 34's attacks on the public API: each used to be refused wrongly, raise a raw
exception, or pass silently; each is now a typed error before anything is written, or a
warning that says what happened. One test body for both frameworks where both apply."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.errors import InputMismatchError, LogFolderError, RepresentativeDataError
from tests.robustness.helpers import no_similarity, small_mlp

REAL = np.random.default_rng(2).standard_normal((32, 6)).astype(np.float32)


def gen(*batches):
    return lambda: [[b] for b in batches]


def caught(call):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = call()
    return result, [str(w.message) for w in seen]


def test_the_readme_budget_call_runs_as_mct_spells_it(fw):
    """``target_resource_utilization=ResourceUtilization(...)`` by keyword (MCT's and the
    README's call) runs mixed precision; it was refused as a misplaced core_config."""
    budget = mct.core.ResourceUtilization(weights_memory=100)  # all 8-bit: 116 bytes, all 2-bit: 62
    _, info = fw.ptq(small_mlp(fw), gen(REAL), target_resource_utilization=budget, core_config=no_similarity())
    assert info.mixed_precision is not None
    assert info.final_resource_utilization.weights_memory <= 100
    _, info = fw.ptq(small_mlp(fw), gen(REAL), budget, core_config=no_similarity())  # positional, third
    assert info.mixed_precision is not None


def test_a_meta_device_batch_is_a_typed_error_before_anything_is_written(tmp_path):
    import torch

    mct.set_log_folder(tmp_path)
    model = small_mlp(SimpleNamespace(name="pytorch"))
    with pytest.raises(RepresentativeDataError, match="'meta' device") as err:
        mct.ptq.pytorch_post_training_quantization(model, lambda: [[torch.empty(4, 6, device="meta")]])
    assert "batch 0, input 0" in str(err.value) and "Yield" in str(err.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("how", ["set_log_folder", "log_folder"])
def test_a_300_character_folder_name_is_a_log_folder_error(tmp_path, how):
    """The docs promise LogFolderError; a name longer than the file system allows raised
    OSError [Errno 36] from Path.exists."""
    folder = tmp_path / ("a" * 300) / "logs"
    with pytest.raises(LogFolderError, match="too long") as err:
        if how == "set_log_folder":
            mct.set_log_folder(folder)
        else:
            with mct.log_folder(folder):
                pass
    assert "Give set_log_folder a writable directory" in str(err.value)
    assert mct.get_log_folder() is None and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool"])
def test_integer_and_bool_batches_for_a_float_input_are_refused_before_anything_is_written(fw, tmp_path, dtype):
    """One rule for both frameworks: integers and booleans fed to an input the model
    computes in float are an InputMismatchError naming the dtype, with no log file written
    (Keras took int32 silently; bool failed after 4 log files were written)."""
    mct.set_log_folder(tmp_path)
    batch = (np.abs(REAL) * 3).astype(dtype)
    with pytest.raises(InputMismatchError, match=dtype) as err:
        fw.ptq(small_mlp(fw), gen(batch))
    assert "float" in str(err.value)
    assert list(tmp_path.iterdir()) == []


def _embedding_model(fw):
    if fw.name == "pytorch":
        from torch import nn

        return nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(12, 2)).eval()
    import keras

    inputs = keras.Input((3,), dtype="int32")
    x = keras.layers.Flatten()(keras.layers.Embedding(10, 4)(inputs))
    return keras.Model(inputs, keras.layers.Dense(2)(x))


def test_integer_batches_for_an_integer_input_are_taken(fw):
    """The same rule keeps token ids working: an input the model reads as integers takes them."""
    ids = np.random.default_rng(0).integers(0, 10, (16, 3)).astype(np.int32 if fw.name == "keras" else np.int64)
    q_model, _ = fw.ptq(_embedding_model(fw), gen(ids), core_config=no_similarity())
    assert q_model is not None


def _half_model(fw, dtype: str):
    if fw.name == "pytorch":
        import torch

        return small_mlp(fw).to(getattr(torch, dtype))
    import keras

    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy(dtype)
    try:
        return small_mlp(fw)
    finally:
        keras.config.set_dtype_policy(before)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_precision_model_is_said_to_be_quantized_in_float32(fw, dtype):
    """PyTorch warned; a float16 Keras policy silently became float32."""
    (_, info), messages = caught(lambda: fw.ptq(_half_model(fw, dtype), gen(REAL), core_config=no_similarity()))
    said = [m for m in messages if dtype in m and "float32" in m]
    assert len(said) == 1, messages
    assert said[0] in info.warnings


def test_a_keep_float_that_matches_every_layer_warns(fw):
    """``KeepFloat(patterns=[".*"])`` quantized nothing without a word."""
    config = mct.core.CoreConfig(keep_float=mct.core.KeepFloat(patterns=[".*"]))
    (_, info), messages = caught(lambda: fw.ptq(small_mlp(fw), gen(REAL), core_config=config))
    said = [m for m in messages if "keeps every layer float" in m]
    assert len(said) == 1 and "'.*'" in said[0] and "nothing is quantized" in said[0], messages
    assert info.counts.quantized == 0 and said[0] in info.warnings


def test_a_keep_float_narrower_than_every_layer_does_not_warn(fw):
    config = mct.core.CoreConfig(keep_float=mct.core.KeepFloat(names=["fc2"]), debug_config=no_similarity().debug_config)
    _, messages = caught(lambda: fw.ptq(small_mlp(fw), gen(REAL), core_config=config))
    assert not [m for m in messages if "KeepFloat" in m], messages


def test_keep_float_and_a_bit_width_on_one_layer_keep_float_wins_said_and_shown_in_info(fw):
    """The stated rule: KeepFloat applies last and wins; a warning names the layer and both
    settings, and info gives it as the layer's float reason (it was resolved silently)."""
    bits = mct.core.BitWidthConfig()
    bits.set_manual_weights_bit_width(mct.core.network_editor.NodeNameFilter("fc1"), 4)
    config = mct.core.CoreConfig(
        keep_float=mct.core.KeepFloat(names=["fc1"]), bit_width_config=bits, debug_config=no_similarity().debug_config
    )
    (_, info), messages = caught(lambda: fw.ptq(small_mlp(fw), gen(REAL), core_config=config))
    said = [m for m in messages if "KeepFloat wins" in m]
    assert len(said) == 1 and "'fc1'" in said[0] and "set_manual_weights_bit_width" in said[0], messages
    layer = info.layers["fc1"]
    assert layer.weights == {}
    assert "KeepFloat" in layer.weights_float_reason and "BitWidthConfig" in layer.weights_float_reason
    assert said[0] in info.warnings


@pytest.mark.parametrize("value", [np.inf, np.nan])
def test_a_batch_of_nothing_but_inf_or_nan_is_refused(fw, tmp_path, value):
    """One such batch among real ones only warned ("non-finite values skipped"); as the
    first batch it is refused before anything is written."""
    bad = np.full_like(REAL[:16], value)
    with pytest.raises(RepresentativeDataError, match=r"batch 1, input '\w+' holds no finite value"):
        fw.ptq(small_mlp(fw), gen(REAL[:16], bad, REAL[16:]), core_config=no_similarity())
    mct.set_log_folder(tmp_path)
    with pytest.raises(RepresentativeDataError, match=r"batch 0, input '\w+' holds no finite value"):
        fw.ptq(small_mlp(fw), gen(bad, REAL[16:]))
    assert list(tmp_path.iterdir()) == []
