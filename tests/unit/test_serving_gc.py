"""A serving process's collector: start-up frozen, young collections rarer, all put back."""

import gc

import pytest

from tidings.processes.gc_tuning import WORKER_GC_YOUNG, serving_gc


def test_serving_gc_freezes_start_up_and_restores_the_collector_after() -> None:
    before = gc.get_threshold()
    try:
        with serving_gc():
            assert gc.get_threshold() == (WORKER_GC_YOUNG, *before[1:])
            assert gc.get_freeze_count() > 0  # what was built before serving
        assert gc.get_threshold() == before
        assert gc.get_freeze_count() == 0
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def test_serving_gc_puts_the_collector_back_when_serving_raises() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), serving_gc(young=5_000):
        assert gc.get_threshold()[0] == 5_000
        raise RuntimeError("the worker stopped on an error")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_a_worker_freezes_what_it_built_without_collecting_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Its start is on the path of every restart after a crash: no full collection there.
    collections: list[int] = []
    monkeypatch.setattr(gc, "collect", lambda generation=2: collections.append(generation) or 0)
    before = gc.get_threshold()
    try:
        with serving_gc(collect=False):
            assert gc.get_freeze_count() > 0
        with serving_gc():
            pass
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
    assert collections == [2]  # only the default, collect=True
