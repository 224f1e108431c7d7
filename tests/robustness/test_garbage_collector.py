"""A call sets the objects alive before it aside from the cyclic garbage collector
(`gc.freeze`: a full collection then scans only what the call makes) and hands them back
after it, error or not: the process's collector is as the call found it, and garbage the
call makes is still collected."""

from __future__ import annotations

import gc
import weakref

import pytest

from model_compression_toolkit.errors import RepresentativeDataError
from tests.robustness.helpers import no_similarity


class _Cycle:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_a_call_hands_the_older_objects_back_to_the_collector(fw):
    x = fw.data()[0][:16]
    model = fw.make_digits_cnn()
    seen: dict[str, object] = {}

    def data():
        seen["frozen"] = gc.get_freeze_count()  # during the call
        cycle = _Cycle()
        seen["cycle"] = weakref.ref(cycle)  # garbage the call makes, in a cycle
        return [[x[:8]], [x[8:]]]

    before = gc.get_freeze_count()
    fw.ptq(model, data, no_similarity())
    assert seen["frozen"] > before  # the objects alive before the call were set aside
    assert gc.get_freeze_count() == before  # and handed back
    gc.collect()
    assert seen["cycle"]() is None  # what the call made is collected as ever

    with pytest.raises(RepresentativeDataError):
        fw.ptq(model, lambda: [[x[:8]], "not a batch"], no_similarity())
    assert gc.get_freeze_count() == before  # after an error too


def test_a_caller_who_runs_without_the_collector_keeps_it_off(fw):
    x = fw.data()[0][:8]
    gc.disable()
    try:
        fw.ptq(fw.make_digits_cnn(), lambda: [[x]], no_similarity())
        assert not gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_a_caller_who_froze_objects_of_their_own_keeps_them_frozen(fw):
    x = fw.data()[0][:8]
    gc.freeze()  # as a pre-fork server does after loading
    try:
        frozen = gc.get_freeze_count()
        fw.ptq(fw.make_digits_cnn(), lambda: [[x]], no_similarity())
        # still frozen (an unfreeze would leave none; some frozen objects die meanwhile)
        assert gc.get_freeze_count() > frozen // 2, (gc.get_freeze_count(), frozen)
    finally:
        gc.unfreeze()
