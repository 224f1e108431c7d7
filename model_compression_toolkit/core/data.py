"""The representative dataset: checked before any work starts, then iterated once.

``representative_data_gen`` is a callable returning an iterable of batches; each batch
is a list (or tuple) with one array per model input, batch dimension first, as in MCT, or
a dict of keyword inputs (``{"input_ids": ..., "attention_mask": ...}``), which is served
as a `NamedBatch`: the arrays in the model's input order, their keywords in ``names``.

Each batch is checked as it is read, the first before any work starts (so a refusal
writes nothing):

- a tensor without values (PyTorch's ``meta`` device) or one that cannot be read as numpy:
  `RepresentativeDataError`;
- integers and booleans, one rule for both frameworks: they are taken only by an input the
  model reads as integers or booleans (token ids, masks). Fed to an input the model computes
  in float, they are an `InputMismatchError` naming the dtype: here when the model declares
  its inputs' dtypes (Keras), else when the backend reads the model (PyTorch: the first
  layer that computes in float), which is before anything is written too;
- values that are not numbers (strings, Python objects): `RepresentativeDataError`;
- a floating-point input whose every value in a batch is NaN or infinite:
  `RepresentativeDataError` (a few non-finite values are skipped with a warning).

Every array is copied as it is read, so a generator that refills one buffer for every
batch cannot change a batch the library keeps (the float samples of the similarity
analysis). Each iteration of the user's iterable is closed as soon as the library is done
with it, when a call fails or is interrupted too, so a generator's ``finally`` runs then.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from model_compression_toolkit.core.backend import Backend
from model_compression_toolkit.errors import InputMismatchError, RepresentativeDataError

Batch = list[np.ndarray]


class NamedBatch(list):
    """A batch given as a dict of keyword inputs: a list of its arrays, in the order the
    model takes them, whose ``names`` are their keywords."""

    def __init__(self, arrays: list[np.ndarray], names: tuple[str, ...]) -> None:
        super().__init__(arrays)
        self.names = names


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return f"{type(value).__name__} of shape {tuple(shape)}" if shape is not None else type(value).__name__


class RepresentativeData:
    """Checks the first batch of ``representative_data_gen`` and serves batches as numpy.

    Args:
        representative_data_gen: the user's callable.
        backend: converts framework tensors to numpy.
        model: the user's model, for the expected number and shapes of inputs.
    """

    def __init__(self, representative_data_gen: Callable[[], Any], backend: Backend, model: Any) -> None:
        if not callable(representative_data_gen):
            raise RepresentativeDataError(
                "representative_data_gen must be a callable returning an iterable of batches "
                f"(each a list of arrays, one per model input); got {_describe(representative_data_gen)}. "
                "Pass the function itself, not its result."
            )
        self._gen = representative_data_gen
        self._backend = backend
        self._first: Batch | None = None
        self._rest: Iterator[Any] | None = None
        self._length: int | None = None  # len() of what representative_data_gen() returned, if it has one
        self._open: list[Iterator[Any]] = []  # iterations started and not yet closed
        self._shapes: list[tuple | None] = []  # the input shapes the model declares
        self._dtypes: list[str | None] = []  # the input dtypes the model declares (Keras), in batch order
        self.samples_read = 0  # samples of the last full pass (`batches`)
        self._names: tuple[str, ...] | None = None  # the keywords of dict batches, in input order
        self._model_names = list(backend.input_names(model) or [])
        try:
            self._check_first(model)
        except BaseException:
            self.close()
            raise

    def _iterate(self) -> Iterator[Any]:
        try:
            iterable = self._gen()
            iterator = iter(iterable)
        except TypeError as err:
            raise RepresentativeDataError(
                f"representative_data_gen() must return an iterable of batches; calling it failed or "
                f"returned a non-iterable: {err}"
            ) from err
        try:
            self._length = len(iterable)
        except TypeError:  # a generator: its length is known only once it ends
            self._length = None
        self._open.append(iterator)
        return iterator

    def _order(self, batch: Mapping, index: int) -> list[Any]:
        """A dict batch's values in the model's input order (the first batch sets the keys)."""
        keys = [str(k) for k in batch]
        if self._names is None:
            known = [n for n in self._model_names if n in keys]
            self._names = tuple(known + [k for k in keys if k not in known])
        if set(keys) != set(self._names):
            raise InputMismatchError(
                f"expected every batch to give the keyword inputs of the first ({', '.join(self._names)}); "
                f"batch {index} gives ({', '.join(keys)}). Yield the same keys in every batch."
            )
        return [batch[k] for k in self._names]

    def _convert(self, batch: Any, index: int) -> Batch:
        if isinstance(batch, NamedBatch):  # the first batch, converted already
            return batch
        named = isinstance(batch, Mapping)
        if named:
            batch = self._order(batch, index)
        elif not isinstance(batch, (list, tuple)):
            raise RepresentativeDataError(
                f"each batch from representative_data_gen must be a list or tuple of arrays, one per "
                f"model input (or a dict of keyword inputs); batch {index} is a {_describe(batch)}. "
                "Yield [x] rather than x."
            )
        elif self._names is not None:
            raise RepresentativeDataError(
                f"expected every batch to be a dict of keyword inputs, as the first is; batch {index} is a "
                f"{type(batch).__name__}. Yield the same kind of batch every time."
            )
        arrays = []
        for i, item in enumerate(batch):
            if not (isinstance(item, np.ndarray) or self._backend.is_tensor(item)):
                raise RepresentativeDataError(
                    f"batch {index}, input {i}: expected a numpy array or a {self._backend.name} tensor; "
                    f"got {_describe(item)}"
                )
            array = self._to_numpy(item, index, i)
            if array.ndim >= 1 and array.shape[0] == 0:
                raise RepresentativeDataError(
                    f"batch {index}, input {i} has no samples (shape {array.shape}); every batch from "
                    "representative_data_gen must hold at least one sample"
                )
            arrays.append(array)
        if self._first is not None:  # a later batch: the same inputs as the first one
            self._check_count(arrays, len(self._first), index)
            self._check_shapes(arrays, index)
            self._check_values(arrays, index)
        return NamedBatch(arrays, self._names) if named and self._names is not None else arrays

    def _to_numpy(self, item: Any, index: int, i: int) -> np.ndarray:
        """A copy of ``item`` as numpy (the user may refill their buffer), or why it cannot be."""
        if getattr(item, "is_meta", False):
            raise RepresentativeDataError(
                f"batch {index}, input {i}: expected values to calibrate on; got a {_describe(item)} on the "
                "'meta' device, which holds a shape but no values. Yield the data itself (a numpy array, or "
                "a tensor on 'cpu' or 'cuda')."
            )
        try:
            return np.array(self._backend.to_numpy(item))
        except (RuntimeError, TypeError, ValueError, NotImplementedError) as err:
            raise RepresentativeDataError(
                f"batch {index}, input {i}: expected an array or tensor that can be read as numpy; reading "
                f"the {_describe(item)} failed ({type(err).__name__}: {err}). Yield numpy arrays or plain tensors."
            ) from err

    def _name(self, i: int) -> str:
        names = self._names or self._model_names
        return repr(names[i]) if i < len(names) else str(i)

    def _check_values(self, arrays: Batch, index: int) -> None:
        """The dtype rule for integers and booleans, and no input of nothing but NaN or inf."""
        for i, arr in enumerate(arrays):
            if arr.dtype.kind not in "biufc":
                raise RepresentativeDataError(
                    f"batch {index}, input {self._name(i)}: expected numbers (float, integer or bool arrays); got "
                    f"{arr.dtype} values ({_describe(arr)}). Convert them, e.g. np.asarray(x, dtype=np.float32)."
                )
            want = self._dtypes[i] if i < len(self._dtypes) else None
            if arr.dtype.kind in "biu" and want is not None and _is_float(want):
                raise InputMismatchError(
                    f"batch {index}, input {self._name(i)}: expected floating-point values, as the model "
                    f"declares this input {want}; got {arr.dtype} values. Integer and bool batches are taken "
                    "only by inputs the model reads as integers (token ids, masks): yield "
                    "x.astype(np.float32), scaled as in training."
                )
            if arr.dtype.kind in "fc" and arr.size and not np.isfinite(arr).any():
                raise RepresentativeDataError(
                    f"expected calibration data like what the model sees in use; representative_data_gen's "
                    f"batch {index}, input {self._name(i)} holds no finite value: all {arr.size} values are NaN "
                    "or infinite, and a quantizer calibrated on it makes the model useless on real data. Check "
                    "the data pipeline (a missing normalisation, padding, an uninitialised np.empty buffer)."
                )

    def _check_count(self, arrays: Batch, expected: int | None, index: int) -> None:
        if expected is not None and len(arrays) != expected:
            raise InputMismatchError(
                f"the model takes {expected} input(s); each batch from representative_data_gen must hold "
                f"{expected}, but batch {index} holds {len(arrays)} ({', '.join(_describe(a) for a in arrays)})"
            )

    def _check_shapes(self, arrays: Batch, index: int) -> None:
        for i, (arr, want) in enumerate(zip(arrays, self._shapes)):
            if want is None or _fits(arr.shape, want):
                continue
            hint = ""
            if self._backend.channels_last and arr.ndim >= 3 and _fits(_channels_last(arr.shape), want):
                order = (0, *range(2, arr.ndim), 1)
                hint = (
                    f"; the batch is channels-first but the model is channels-last: "
                    f"transpose it with np.transpose(x, {order})"
                )
            raise InputMismatchError(
                f"batch {index}, input {i}: the model expects batches of shape {_show(want)}; got {arr.shape}{hint}"
            )

    def _check_first(self, model: Any) -> None:
        self._rest = self._iterate()
        try:
            first = next(self._rest)
        except StopIteration:
            raise RepresentativeDataError(
                "representative_data_gen yielded no batches; it must yield at least one list of arrays"
            ) from None
        self._first = self._convert(first, 0)
        if self._names is None:  # keyword inputs: the backend checks their names
            self._check_count(self._first, self._backend.input_count(model), 0)
        self._shapes = list(self._backend.expected_input_shapes(model) or [])
        declared = getattr(self._backend, "expected_input_dtypes", None)  # a capability of some backends
        self._dtypes = list((declared(model) if declared is not None else None) or [])
        if self._names is not None:  # the declared shapes and dtypes in the batch's order
            shapes, dtypes = dict(zip(self._model_names, self._shapes)), dict(zip(self._model_names, self._dtypes))
            self._shapes = [shapes.get(n) for n in self._names] if self._shapes else []
            self._dtypes = [dtypes.get(n) for n in self._names]
        self._check_shapes(self._first, 0)
        self._check_values(self._first, 0)

    @property
    def first(self) -> Batch:
        assert self._first is not None
        return self._first

    def expected_batches(self, limit: int | None) -> int | None:
        """How many batches `batches(limit)` will read, when that is known: ``limit``, or
        fewer when the iterable has a length."""
        if self._length is None:
            return limit
        return self._length if limit is None else min(limit, self._length)

    def batches(self, limit: int | None = None) -> Iterator[Batch]:
        """Every batch once, at most ``limit`` of them: the first (already read) and then the
        rest of the same iteration, which is closed when the pass ends or is abandoned."""
        first, rest = self._first, self._rest
        self._rest = None
        if rest is None:  # a second pass starts a new iteration
            rest = self._iterate()
            source = rest
        else:
            source = itertools.chain([first], rest)
        self.samples_read = 0
        try:
            for i, batch in enumerate(itertools.islice(source, limit)):
                arrays = self._convert(batch, i)
                self.samples_read += len(arrays[0]) if arrays and arrays[0].ndim else 1
                yield arrays
        finally:
            self._close(rest)

    def samples(self, n: int) -> Iterator[Batch]:
        """Batches of a fresh iteration, cut so that exactly the first ``n`` samples are served."""
        left = n
        iterator = self._iterate()
        try:
            for i, batch in enumerate(iterator):
                arrays = self._convert(batch, i)
                take = min(left, len(arrays[0]))
                yield [a[:take] for a in arrays]
                left -= take
                if left <= 0:
                    return
        finally:
            self._close(iterator)

    def close(self) -> None:
        """Close every iteration of the user's data still open: the one the first batch came
        from, and any a pass left suspended (a call that failed or was interrupted)."""
        self._rest = None
        for iterator in list(self._open):
            self._close(iterator)

    def _close(self, iterator: Any) -> None:
        """Close a generator (its ``finally`` runs now, not whenever it is collected)."""
        self._open = [it for it in self._open if it is not iterator]
        close = getattr(iterator, "close", None)
        if callable(close):
            close()


def _is_float(dtype: str) -> bool:
    return "float" in dtype or dtype in ("half", "double")


def _fits(shape: tuple, want: tuple) -> bool:
    return len(shape) == len(want) and all(w is None or w == s for s, w in zip(shape, want))


def _channels_last(shape: tuple) -> tuple:
    return (shape[0], *shape[2:], shape[1])


def _show(shape: tuple) -> str:
    return "(" + ", ".join("N" if d is None else str(d) for d in shape) + ")"
