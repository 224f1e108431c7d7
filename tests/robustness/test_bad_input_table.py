"""Every bad input of the PTQ API, for both frameworks: a typed error saying what was
expected and what was got, raised before anything is written.

Extends tests/api/test_bad_input.py (one case per kind) to a table of variants per kind.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.errors import (
    ConfigurationError,
    InputMismatchError,
    LogFolderError,
    RepresentativeDataError,
    UnsupportedFrameworkError,
)
from model_compression_toolkit.observers.stage_view import stage_run
from tests.fixtures.tb import load, run_folders
from tests.robustness.helpers import no_similarity, tree

_MODELS: dict[str, Any] = {}


@pytest.fixture
def model(fw):
    """An untrained digits CNN per framework (values do not matter for bad input)."""
    if fw.name not in _MODELS:
        m = fw.make_digits_cnn()
        _MODELS[fw.name] = m.eval() if fw.name == "pytorch" else m
    return _MODELS[fw.name]


@pytest.fixture
def batch(fw):
    shape = (8, 32, 32, 1) if fw.channels_last else (8, 1, 32, 32)
    return np.random.default_rng(0).random(shape, dtype=np.float32)


@pytest.fixture
def logs(tmp_path):
    """Logging on into tmp_path/logs; the test checks nothing appears anywhere under tmp_path."""
    folder = tmp_path / "logs"
    mct.set_log_folder(folder)
    return folder


def assert_nothing_written(tmp_path, before):
    assert list((tmp_path / "logs").iterdir()) == []
    assert tree(tmp_path) == before


def _tensor(fw, array):
    if fw.name == "pytorch":
        import torch

        return torch.from_numpy(array)
    import tensorflow as tf

    return tf.constant(array)


def _other_tensor(fw, array):
    """A tensor of the other framework: not an input this backend accepts."""
    if fw.name == "pytorch":
        import tensorflow as tf

        return tf.constant(array)
    import torch

    return torch.from_numpy(array)


def _never_yields():
    return
    yield  # makes this a generator function


# fmt: off
# (id, data_gen given (fw, batch), error, pattern)
DATA_CASES: list[tuple[str, Callable[[Any, np.ndarray], Any], type, str]] = [
    ("gen_is_none", lambda fw, b: None, RepresentativeDataError, r"callable.*got NoneType"),
    (
        "gen_is_a_generator_object",
        lambda fw, b: (x for x in [[b]]),
        RepresentativeDataError,
        r"callable.*got generator.*Pass the function itself",
    ),
    ("gen_is_an_array", lambda fw, b: b, RepresentativeDataError, r"callable.*got ndarray of shape \(8, "),
    ("gen_returns_an_int", lambda fw, b: lambda: 5, RepresentativeDataError, r"iterable.*'int' object is not iterable"),
    ("gen_returns_none", lambda fw, b: lambda: None, RepresentativeDataError, r"iterable.*'NoneType' object"),
    ("generator_that_never_yields", lambda fw, b: _never_yields, RepresentativeDataError, "yielded no batches"),
    ("gen_returns_empty_tuple", lambda fw, b: lambda: (), RepresentativeDataError, "yielded no batches"),
    (  # a dict gives keyword inputs (issue 24): its keys must be the model's input names
        "batch_is_a_dict_of_unknown_names",
        lambda fw, b: lambda: [{"no_such_input": b}],
        InputMismatchError,
        r"expected keyword inputs that .* takes \(.*\); got \['no_such_input'\]",
    ),
    (
        "batch_is_a_bare_tensor",
        lambda fw, b: lambda: [_tensor(fw, b)],
        RepresentativeDataError,
        r"list or tuple.*batch 0 is a \w*Tensor of shape \(8, .*Yield \[x\]",
    ),
    ("batch_is_none", lambda fw, b: lambda: [None], RepresentativeDataError, r"list or tuple.*batch 0 is a NoneType"),
    (
        "item_is_a_nested_list",
        lambda fw, b: lambda: [[b.tolist()]],
        RepresentativeDataError,
        r"batch 0, input 0: expected a numpy array or a (pytorch|keras) tensor; got list",
    ),
    ("item_is_none", lambda fw, b: lambda: [[None]], RepresentativeDataError, r"input 0: expected .*got NoneType"),
    ("item_is_a_float", lambda fw, b: lambda: [(3.0,)], RepresentativeDataError, r"input 0: expected .*got float"),
    (
        "item_is_a_tensor_of_the_other_framework",
        lambda fw, b: lambda: [[_other_tensor(fw, b)]],
        RepresentativeDataError,
        r"input 0: expected a numpy array or a (pytorch|keras) tensor; got \w*Tensor of shape \(8, ",
    ),
    ("no_inputs", lambda fw, b: lambda: [[]], InputMismatchError, r"takes 1 input.*holds 0"),
    ("three_inputs", lambda fw, b: lambda: [(b, b, b)], InputMismatchError, r"takes 1 input.*holds 3 \(ndarray of shape"),
    ("rank_2_batch", lambda fw, b: lambda: [[b.reshape(8, -1)]], InputMismatchError, r"\(8, 1024\)"),
    ("rank_5_batch", lambda fw, b: lambda: [[b[None]]], InputMismatchError, r"\(1, 8, "),
    ("scalar_item", lambda fw, b: lambda: [[np.array(1.0, np.float32)]], InputMismatchError, r"\(\)"),
    (
        "the_other_layout",
        lambda fw, b: lambda: [[np.moveaxis(b, -1, 1) if fw.channels_last else np.moveaxis(b, 1, -1)]],
        InputMismatchError,
        r"\(8, (1, 32, 32|32, 32, 1)\)",
    ),
    (
        "first_batch_has_no_samples",
        lambda fw, b: lambda: [[b[:0]], [b]],
        RepresentativeDataError,
        r"batch 0, input 0.*no samples.*\(0, ",
    ),
]
# fmt: on


@pytest.mark.parametrize("case", DATA_CASES, ids=[c[0] for c in DATA_CASES])
def test_bad_representative_data_gets_a_typed_error_and_writes_nothing(
    fw, model, batch, logs, tmp_path, case
):
    """Each malformed representative_data_gen (not callable, nothing yielded, batch not a
    list, items not arrays, wrong input count, shapes the model rejects, empty batch) raises
    its typed error naming what was expected and what was got, before any file is written."""
    _, make_gen, error, pattern = case
    before = tree(tmp_path)
    with pytest.raises(error, match=pattern):
        fw.ptq(model, make_gen(fw, batch), no_similarity())
    assert_nothing_written(tmp_path, before)


def test_keras_channels_first_batch_names_both_shapes_and_the_fix(fw, model, logs, tmp_path):
    """A channels-first batch for a channels-last Keras model: the error names the shape the
    model expects, the shape given, and the transpose that fixes it; nothing is written."""
    if not fw.channels_last:
        pytest.skip("PyTorch models are channels-first")
    before = tree(tmp_path)
    wrong = np.zeros((5, 1, 32, 32), np.float32)
    pattern = r"\(N, 32, 32, 1\); got \(5, 1, 32, 32\).*channels-first.*np\.transpose\(x, \(0, 2, 3, 1\)\)"
    with pytest.raises(InputMismatchError, match=pattern):
        fw.ptq(model, lambda: iter([(wrong,)]), no_similarity())
    assert_nothing_written(tmp_path, before)


def test_keras_spatial_size_the_model_rejects(fw, model, logs, tmp_path):
    """A Keras model declares its input shape: a batch of another image size is refused
    up front with both shapes named."""
    if not fw.channels_last:
        pytest.skip("a PyTorch module declares no input shape")
    before = tree(tmp_path)
    small = np.zeros((8, 16, 16, 1), np.float32)
    with pytest.raises(InputMismatchError, match=r"\(N, 32, 32, 1\); got \(8, 16, 16, 1\)"):
        fw.ptq(model, lambda: [[small]], no_similarity())
    assert_nothing_written(tmp_path, before)


def _qc(**kw):
    return mct.core.CoreConfig(quantization_config=mct.core.QuantizationConfig(**kw))


def _dc(**kw):
    return mct.core.CoreConfig(debug_config=mct.core.DebugConfig(**kw))


# fmt: off
CONFIG_CASES = [
    ("activation_bits_17", lambda: _qc(activation_n_bits=17), r"activation_n_bits .*2 to 16; got 17"),
    ("weights_bits_bool", lambda: _qc(weights_n_bits=True), r"weights_n_bits .*integer.*got True"),
    ("weights_bits_float", lambda: _qc(weights_n_bits=8.0), r"weights_n_bits .*integer.*got 8\.0"),
    ("activation_bits_str", lambda: _qc(activation_n_bits="8"), r"activation_n_bits .*got '8'"),
    (
        "method_as_plain_string",
        lambda: _qc(weights_quantization_method="symmetric"),
        r"weights_quantization_method must be one of QuantizationMethod\..*got 'symmetric'",
    ),
    ("error_method_none", lambda: _qc(activation_error_method=None), r"activation_error_method must be one of .*got None"),
    ("lp_zero", lambda: _qc(l_p_value=0), r"l_p_value .*> 0; got 0"),
    ("lp_nan", lambda: _qc(l_p_value=math.nan), r"l_p_value .*got nan"),
    ("histogram_bins_8", lambda: _qc(histogram_bins=8), r"histogram_bins .*16 to 65536; got 8"),
    ("similarity_samples_0", lambda: _dc(similarity_samples=0), r"similarity_samples .*>= 1; got 0"),
    ("analyze_similarity_str", lambda: _dc(analyze_similarity="yes"), r"analyze_similarity must be True, False or None.*got 'yes'"),
    ("memory_cap_tiny", lambda: _dc(similarity_memory_cap=1000), r"similarity_memory_cap .*1 MiB; got 1000"),
    (
        "quantization_config_dict",
        lambda: mct.core.CoreConfig(quantization_config={"weights_n_bits": 8}),
        r"quantization_config must be a mct\.core\.QuantizationConfig; got dict",
    ),
    ("debug_config_none", lambda: mct.core.CoreConfig(debug_config=None), r"debug_config must be .*DebugConfig; got NoneType"),
    (
        "quantization_config_as_core_config",
        lambda: mct.core.QuantizationConfig(),
        r"core_config must be a mct\.core\.CoreConfig; got QuantizationConfig",
    ),
]
# fmt: on


@pytest.mark.parametrize("case", CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_bad_core_config_gets_a_configuration_error_and_writes_nothing(
    fw, model, batch, logs, tmp_path, case
):
    """Each out-of-range or mistyped CoreConfig value raises ConfigurationError naming the
    field, the allowed values and the value got, before any file is written."""
    _, make_config, pattern = case
    before = tree(tmp_path)
    with pytest.raises(ConfigurationError, match=pattern):
        fw.ptq(model, lambda: [[batch]], make_config())
    assert_nothing_written(tmp_path, before)


def _not_models(fw, model):
    """(id, object, what the error must say) for objects that are not a model of ``fw``."""
    import keras

    want = "expected a torch.nn.Module; got " if fw.name == "pytorch" else "expected a keras.Model; got "
    common = [
        ("none", None, want + "builtins.NoneType"),
        ("the_model_class", type(model), want + "builtins.type"),
        ("an_array", np.zeros(3), want + "numpy.ndarray"),
        ("a_path", "model.keras", want + "builtins.str"),
    ]
    if fw.name == "pytorch":
        return common + [
            ("a_state_dict", model.state_dict(), want + "collections.OrderedDict"),
            ("a_function", np.tanh, want + "numpy.ufunc"),
            ("a_keras_layer", keras.layers.Dense(3), want + r"keras\.src\..*Dense"),
        ]
    import torch

    return common + [
        ("a_weights_list", model.get_weights(), want + "builtins.list"),
        ("a_keras_layer_not_a_model", keras.layers.Dense(3), want + r"keras\.src\..*Dense"),
        (
            "a_torch_module",
            torch.nn.Linear(2, 2),
            r"expected a keras model; got a pytorch model \(Linear\)\. Use mct\.ptq\.pytorch_post_training_quantization",
        ),
    ]


def test_not_a_model_of_this_framework_gets_unsupported_framework_error(fw, model, batch, logs, tmp_path):
    """None, a class, an array, a path, weights, a layer or a model of the other framework
    passed as the model: UnsupportedFrameworkError saying what was expected and what was
    got (or which function to use), before any file is written."""
    before = tree(tmp_path)
    for _name, not_a_model, pattern in _not_models(fw, model):
        with pytest.raises(UnsupportedFrameworkError, match=pattern):
            fw.ptq(not_a_model, lambda: [[batch]], no_similarity())
    assert_nothing_written(tmp_path, before)


BAD_FOLDERS = [
    ("a_file", lambda f: f, r"is a file, expected a directory"),
    ("under_a_file", lambda f: f / "logs", r"cannot be created or written"),
    ("deep_under_a_file", lambda f: f / "a" / "b", r"cannot be created or written"),
]


@pytest.mark.parametrize("case", BAD_FOLDERS, ids=[c[0] for c in BAD_FOLDERS])
def test_set_log_folder_on_a_file_fails_and_changes_nothing(tmp_path, case):
    """set_log_folder on a file, or on a path under a file, raises LogFolderError naming the
    path and the way out (None); the file is untouched, nothing is created, and the log
    folder set before stays in force."""
    _, path_of, pattern = case
    good = tmp_path / "good"
    mct.set_log_folder(good)
    a_file = tmp_path / "model.pt"
    a_file.write_bytes(b"not a folder")
    before = tree(tmp_path)
    bad = path_of(a_file)
    with pytest.raises(LogFolderError, match=pattern) as err:
        mct.set_log_folder(bad)
    assert str(bad) in str(err.value) and "None" in str(err.value)
    assert a_file.read_bytes() == b"not a folder"
    assert tree(tmp_path) == before
    assert mct.get_log_folder() == good


def test_after_a_refused_log_folder_ptq_logs_nowhere(fw, model, batch, tmp_path, monkeypatch):
    """A refused set_log_folder does not half-enable logging: the PTQ call that follows
    succeeds and writes nothing anywhere."""
    monkeypatch.chdir(tmp_path)
    a_file = tmp_path / "logs.txt"
    a_file.write_text("x")
    with pytest.raises(LogFolderError):
        mct.set_log_folder(a_file / "logs")
    before = tree(tmp_path)
    _, info = fw.ptq(model, lambda: [[batch]], no_similarity())
    assert info.log_folder is None
    assert tree(tmp_path) == before


# fmt: off
LATER_BATCH_CASES = [
    ("not_a_list", lambda fw, b: b, RepresentativeDataError, r"batch 1 is a ndarray"),
    ("item_not_an_array", lambda fw, b: ["x"], RepresentativeDataError, r"batch 1, input 0: expected .*got str"),
    ("two_inputs", lambda fw, b: [b, b], InputMismatchError, r"takes 1 input.*batch 1 holds 2"),
    ("no_samples", lambda fw, b: [b[:0]], RepresentativeDataError, r"batch 1, input 0.*no samples"),
    (
        "shape_the_model_rejects",
        lambda fw, b: [b[:, :, :16] if fw.channels_last else np.concatenate([b, b], axis=1)],
        InputMismatchError,
        r"batch 1, input 0: .*\(8, (32, 16, 1|2, 32, 32)\)",
    ),
]
# fmt: on


@pytest.mark.parametrize("case", LATER_BATCH_CASES, ids=[c[0] for c in LATER_BATCH_CASES])
def test_a_bad_later_batch_gets_a_typed_error_naming_it_and_leaves_a_clean_partial_run(
    fw, model, batch, logs, case, request
):
    """A bad batch after a good first one is found only while collecting statistics: it
    still gets the typed error naming the batch, and the stages written before it load."""
    name, make_bad, error, pattern = case
    with pytest.raises(error, match=pattern):
        fw.ptq(model, lambda: [[batch], make_bad(fw, batch)], no_similarity())
    (run,) = run_folders(logs)
    for stage in ("initial_graph", "after_graph_preparation"):
        assert load(run / stage_run(stage)).Tags()["graph"]
