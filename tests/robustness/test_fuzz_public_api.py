"""Fuzzing the public API with names, paths and batches: whatever is given, a call either
works or raises an `mct.errors.MCTError` whose message says what was expected; never a raw
exception from Python, numpy or a framework (issue 34)."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import model_compression_toolkit as mct
from model_compression_toolkit.errors import MCTError
from tests.robustness.helpers import no_similarity, small_mlp

FUZZ = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
REAL = np.random.default_rng(3).standard_normal((8, 6)).astype(np.float32)

# any character, lone surrogates and NUL included
ANY_TEXT = st.text(st.characters(blacklist_categories=()), max_size=40)
NAMES = st.one_of(ANY_TEXT, st.text("a./\\ _-:*?", max_size=300), st.just("a" * 300), st.just(".."))


def typed_or_nothing(call) -> object:
    """Run ``call``; an error it raises must be the library's, with a message."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return call()
        except MCTError as err:
            assert str(err), f"{type(err).__name__} without a message"
            return err


@FUZZ
@given(part=NAMES)
def test_any_log_folder_name_is_usable_or_a_log_folder_error(tmp_path_factory, part):
    """Names too long, with NUL, surrogates, dots or separators: a folder inside the given
    root, or LogFolderError (a 300-character name raised OSError, a surrogate UnicodeEncodeError)."""
    root = tmp_path_factory.mktemp("fuzz")
    for how in ("set", "with"):
        if how == "set":
            got = typed_or_nothing(lambda: mct.set_log_folder(os.path.join(root, part)))
        else:
            got = typed_or_nothing(lambda: mct.log_folder(os.path.join(root, part)).__enter__())
        assert got is None or isinstance(got, (os.PathLike, MCTError)), got
    mct.set_log_folder(None)


@FUZZ
@given(run_name=st.one_of(st.none(), ANY_TEXT, st.just("a" * 300), st.just("../../x")), model_name=NAMES)
@example(run_name=None, model_name="\ud800")  # a lone surrogate, which UTF-8 cannot hold (Keras takes it)
def test_any_run_name_and_model_name_logs_inside_the_folder(fw, tmp_path_factory, run_name, model_name):
    """Run and model names become folder names made safe: the call works and writes only
    inside the log folder, or raises the library's error."""
    try:
        model = small_mlp(fw, name=model_name)
    except Exception:  # the framework refuses the name itself (Keras): nothing of ours ran
        assume(False)
    root = tmp_path_factory.mktemp("fuzz")
    mct.set_log_folder(root)
    got = typed_or_nothing(lambda: fw.ptq(model, lambda: [[REAL]], core_config=no_similarity(), run_name=run_name))
    mct.set_log_folder(None)
    if not isinstance(got, MCTError):
        (call,) = root.iterdir()
        assert (call / "mct.log").exists()


def _array(kind: str, shape: tuple) -> np.ndarray:
    base = np.random.default_rng(0).standard_normal(shape)
    if kind == "str":
        return base.astype(str)
    if kind == "object":
        return base.astype(object)
    if kind in ("nan", "inf"):
        return np.full(shape, getattr(np, kind), np.float32)
    return base.astype(kind)


KINDS = ["float32", "float64", "float16", "int64", "int8", "uint8", "bool", "complex64", "str", "object", "nan", "inf"]
SHAPES = st.sampled_from([(8, 6), (8, 5), (0, 6), (6,), (), (8, 6, 1), (1, 6)])
ARRAYS = st.builds(_array, st.sampled_from(KINDS), SHAPES)
ITEMS = st.one_of(ARRAYS, st.none(), st.integers(), st.floats(), st.text(max_size=5), st.just([[1.0] * 6] * 8))
BATCHES = st.one_of(
    st.lists(ITEMS, max_size=3),
    st.tuples(ARRAYS),
    st.dictionaries(st.text(max_size=5), ARRAYS, max_size=2),
    ITEMS,
)


@FUZZ
@given(batches=st.lists(BATCHES, max_size=3))
def test_any_batches_quantize_or_raise_the_library_error(fw, batches):
    """Batches of any type, dtype and shape (strings, objects, complex, empty, scalars,
    NaN, dicts with odd keys, None): a model, or an MCTError; never numpy's or the framework's."""
    typed_or_nothing(lambda: fw.ptq(small_mlp(fw), lambda: iter(batches), core_config=no_similarity()))


@FUZZ
@given(gen=st.sampled_from(["not callable", 3, None, lambda: 3, lambda: None, lambda: "abc", lambda: iter([])]))
def test_any_representative_data_gen_is_taken_or_refused_by_type(fw, gen):
    typed_or_nothing(lambda: fw.ptq(small_mlp(fw), gen, core_config=no_similarity()))


def test_a_buffer_reassigned_in_forward_is_read_or_a_typed_error():
    """A buffer replaced in ``forward`` (issue 34 saw AttributeError '_tensor_constant0'
    from the PyTorch reader): the call works or raises the library's error."""
    import torch
    from torch import nn

    class Counting(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 3)
            self.register_buffer("scale", torch.ones(3))
            self.register_buffer("seen", torch.zeros(1))

        def forward(self, x):
            self.scale = torch.ones(3)
            self.seen = self.seen + x.shape[0]
            return self.fc(x) * self.scale + self.seen

    got = typed_or_nothing(lambda: mct.ptq.pytorch_post_training_quantization(Counting().eval(), lambda: [[REAL]]))
    assert got is not None


@pytest.mark.parametrize("value", [np.array(["x"] * 48).reshape(8, 6), np.zeros((8, 6), dtype=object)])
def test_string_and_object_batches_are_refused_by_type(fw, value):
    with pytest.raises(MCTError):
        fw.ptq(small_mlp(fw), lambda: [[value]], core_config=no_similarity())
