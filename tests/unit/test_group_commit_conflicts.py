"""Coalescer: a failed group write whose error names the call it is about (``culprit``,
as a KeyConflict's index does) sets that call aside and writes the others together
again, instead of one transaction per call; whatever fails, each caller is answered
for its own item, in the order the calls came, and none is left waiting."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.clock import FakeClock
from tidings.core.errors import KeyConflict, StoreError
from tidings.core.repeats import conflicting
from tidings.delivery.group_commit import MAX_SET_ASIDE, Coalescer, GroupCommitConfig


class Ledger:
    """A write that refuses, as a whole transaction, any batch holding an item that
    starts with ``bad`` (naming the first one's index, as the repeat guard does) or
    ``down`` (a store error that names nobody)."""

    def __init__(self) -> None:
        self.transactions: list[list[str]] = []
        self.committed: list[str] = []

    async def write(self, items: Sequence[str], now: float) -> list[str]:
        await asyncio.sleep(0)
        self.transactions.append(list(items))
        for index, item in enumerate(items):
            if item.startswith("bad"):
                raise KeyConflict(item, "data.x", f"{item} conflicts", index=index)
            if item.startswith("down"):
                raise StoreError(f"{item} refused")
        self.committed.extend(items)
        return [f"ok:{item}" for item in items]


def coalescer(ledger: Ledger, *, culprit: bool = True) -> Coalescer[str, str]:
    return Coalescer(ledger.write, clock=FakeClock(), config=GroupCommitConfig(),
                     culprit=conflicting if culprit else None)


async def submit_all(group: Coalescer[str, str], items: Sequence[str]) -> list[object]:
    return list(await asyncio.gather(*(group.submit(i) for i in items),
                                     return_exceptions=True))


async def test_one_conflict_costs_two_more_transactions_not_one_per_call() -> None:
    ledger = Ledger()
    items = [f"k{i}" for i in range(50)]
    items.insert(17, "bad-17")
    results = await submit_all(coalescer(ledger), items)
    assert ledger.transactions == [items, [i for i in items if i != "bad-17"], ["bad-17"]]
    assert isinstance(results[17], KeyConflict) and results[17].key == "bad-17"
    assert [r for n, r in enumerate(results) if n != 17] == [
        f"ok:{i}" for i in items if i != "bad-17"]
    assert ledger.committed == [i for i in items if i != "bad-17"]


async def test_without_a_culprit_each_call_is_written_alone() -> None:
    ledger = Ledger()
    items = ["k0", "bad-1", "k2"]
    results = await submit_all(coalescer(ledger, culprit=False), items)
    assert ledger.transactions == [items, ["k0"], ["bad-1"], ["k2"]]
    assert results[0] == "ok:k0" and results[2] == "ok:k2"
    assert isinstance(results[1], KeyConflict)


async def test_an_error_naming_nobody_falls_back_to_one_by_one() -> None:
    ledger = Ledger()
    items = ["k0", "bad-1", "k2", "down-3", "k4"]
    results = await submit_all(coalescer(ledger), items)
    # bad-1 set aside; the rest fail on down-3, which names nobody: one by one, in order.
    assert ledger.transactions[:2] == [items, ["k0", "k2", "down-3", "k4"]]
    assert ledger.transactions[2:] == [[i] for i in items]
    assert [type(r).__name__ for r in results] == ["str", "KeyConflict", "str", "StoreError",
                                                   "str"]
    assert ledger.committed == ["k0", "k2", "k4"]


async def test_many_conflicts_stop_being_set_aside() -> None:
    ledger = Ledger()
    items = [f"bad-{i}" if i % 2 else f"k{i}" for i in range(20)]
    results = await submit_all(coalescer(ledger), items)
    grouped = [t for t in ledger.transactions if len(t) > 1]
    assert len(grouped) == MAX_SET_ASIDE + 1  # then every call alone
    assert len(ledger.transactions) == len(grouped) + len(items)
    for item, result in zip(items, results, strict=True):
        assert (isinstance(result, KeyConflict) if item.startswith("bad")
                else result == f"ok:{item}"), item


async def test_a_culprit_out_of_range_names_nobody() -> None:
    ledger = Ledger()
    group: Coalescer[str, str] = Coalescer(ledger.write, clock=FakeClock(),
                                           culprit=lambda _error: 99)
    results = await submit_all(group, ["k0", "bad-1"])
    assert ledger.transactions == [["k0", "bad-1"], ["k0"], ["bad-1"]]
    assert results[0] == "ok:k0" and isinstance(results[1], KeyConflict)


async def test_cancelled_while_writing_alone_leaves_nobody_waiting() -> None:
    ledger = Ledger()
    hold = asyncio.Event()
    original = ledger.write

    async def slow(items: Sequence[str], now: float) -> list[str]:
        if len(items) == 1:
            await hold.wait()  # the writes alone never finish
        return await original(items, now)

    group: Coalescer[str, str] = Coalescer(slow, clock=FakeClock(), culprit=None)
    calls = [asyncio.create_task(group.submit(i)) for i in ("k0", "bad-1", "k2")]
    for _ in range(20):
        await asyncio.sleep(0)
    writer = group._writer
    assert writer is not None and not writer.done()
    writer.cancel()
    done, pending = await asyncio.wait(calls, timeout=5)
    assert not pending
    assert all(c.cancelled() for c in done)


async def test_a_caller_that_gave_up_is_not_written_alone() -> None:
    ledger = Ledger()
    group = coalescer(ledger, culprit=False)
    gate = asyncio.Event()
    original = ledger.write

    async def gated(items: Sequence[str], now: float) -> list[str]:
        await gate.wait()
        return await original(items, now)

    group._write = gated
    calls = [asyncio.create_task(group.submit(i)) for i in ("k0", "bad-1", "k2")]
    for _ in range(5):
        await asyncio.sleep(0)
    calls[2].cancel()
    gate.set()
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert results[0] == "ok:k0" and isinstance(results[1], KeyConflict)
    assert isinstance(results[2], asyncio.CancelledError)
    assert ["k2"] not in ledger.transactions


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["k", "bad", "down"]), min_size=1, max_size=30),
       st.booleans(), st.integers(1, 12))
def test_fuzz_every_caller_gets_its_own_answer_once(kinds: list[str], culprit: bool,
                                                    max_drafts: int) -> None:
    items = [f"{kind}-{n}" for n, kind in enumerate(kinds)]

    async def run() -> tuple[Ledger, list[object]]:
        ledger = Ledger()
        group: Coalescer[str, str] = Coalescer(
            ledger.write, clock=FakeClock(), config=GroupCommitConfig(max_drafts=max_drafts),
            culprit=conflicting if culprit else None)
        return ledger, await submit_all(group, items)

    ledger, results = asyncio.run(run())
    for item, result in zip(items, results, strict=True):
        if item.startswith("k"):
            assert result == f"ok:{item}"
        else:
            assert isinstance(result, KeyConflict if item.startswith("bad") else StoreError)
    # Each good item committed once, in the order the calls came; no bad one ever.
    assert ledger.committed == [i for i in items if i.startswith("k")]
    # Never more transactions than the group, a few set aside, and one per call.
    assert len(ledger.transactions) <= len(items) * 2 + MAX_SET_ASIDE + 1


def test_a_key_conflict_names_its_request_in_the_batch() -> None:
    error = KeyConflict("k", "requests[3].data.x", "differs", index=3)
    assert conflicting(error) == 3 and error.index == 3
    assert KeyConflict("k", "data.x", "differs").index == 0
    assert conflicting(StoreError("down")) is None
    assert conflicting(ValueError()) is None


@pytest.mark.parametrize("where", [0, 1, 4])
async def test_the_conflicting_call_is_written_after_the_others(where: int) -> None:
    """The call set aside is answered by a write of its own, after the others were
    committed: a conflict with an earlier call of its group is one with the ledger by
    then."""
    ledger = Ledger()
    items = [f"k{i}" for i in range(5)]
    items[where] = f"bad-{where}"
    await submit_all(coalescer(ledger), items)
    assert ledger.transactions[-1] == [f"bad-{where}"]
    assert ledger.committed == [i for i in items if not i.startswith("bad")]
