"""GroupCommit: concurrent calls share a write; each is answered for its own drafts."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.clock import FakeClock
from tidings.core.errors import StoreError
from tidings.core.model import IntentDraft
from tidings.delivery.group_commit import GroupCommit, GroupCommitConfig


def draft(key: str) -> IntentDraft:
    return IntentDraft(key=key, channel="email", recipient_id="r", address="a@example.com",
                       template="t", due_at=0.0)


class Ledger:
    """A write that records each transaction, refuses drafts whose key starts with
    ``bad``, and can be held open."""

    def __init__(self) -> None:
        self.transactions: list[list[str]] = []
        self.written: list[str] = []
        self.open = asyncio.Event()
        self.open.set()

    async def write(self, drafts: Sequence[IntentDraft], now: float) -> None:
        await self.open.wait()
        keys = [d.key for d in drafts]
        self.transactions.append(keys)
        if any(k.startswith("bad") for k in keys):
            raise StoreError(f"refused {next(k for k in keys if k.startswith('bad'))}")
        self.written.extend(keys)


def grouped(ledger: Ledger, **config: float) -> GroupCommit:
    return GroupCommit(ledger.write, clock=FakeClock(),
                       config=GroupCommitConfig(**config))  # type: ignore[arg-type]


async def test_concurrent_calls_share_one_transaction() -> None:
    ledger = Ledger()
    group = grouped(ledger)
    await asyncio.gather(*(group.submit([draft(f"k{i}")]) for i in range(200)))
    assert ledger.transactions == [[f"k{i}" for i in range(200)]]
    assert group.groups == 1


async def test_each_caller_is_answered_only_once_its_write_committed() -> None:
    ledger = Ledger()
    ledger.open.clear()
    group = grouped(ledger)
    calls = [asyncio.create_task(group.submit([draft(f"k{i}")])) for i in range(3)]
    for _ in range(20):
        await asyncio.sleep(0)
    assert not any(c.done() for c in calls) and ledger.written == []
    # calls arriving while the write is held form the next group
    late = asyncio.create_task(group.submit([draft("late")]))
    ledger.open.set()
    await asyncio.gather(*calls, late)
    assert ledger.transactions == [["k0", "k1", "k2"], ["late"]]


async def test_a_refused_draft_fails_its_own_caller_alone() -> None:
    ledger = Ledger()
    group = grouped(ledger)
    results = await asyncio.gather(
        *(group.submit([draft("bad-7" if i == 7 else f"k{i}")]) for i in range(10)),
        return_exceptions=True)
    errors = {i: r for i, r in enumerate(results) if r is not None}
    assert list(errors) == [7] and isinstance(errors[7], StoreError)
    assert "bad-7" in str(errors[7])
    assert sorted(ledger.written) == sorted(f"k{i}" for i in range(10) if i != 7)


async def test_a_group_is_bounded_and_a_call_is_never_split() -> None:
    ledger = Ledger()
    group = grouped(ledger, max_drafts=50)
    await asyncio.gather(*(group.submit([draft(f"k{i}a"), draft(f"k{i}b")])
                           for i in range(60)))
    assert [len(t) for t in ledger.transactions] == [50, 50, 20]
    for transaction in ledger.transactions:
        assert {k[:-1] for k in transaction if k.endswith("a")} == {
            k[:-1] for k in transaction if k.endswith("b")}


async def test_a_caller_cancelled_before_its_group_is_written_is_left_out() -> None:
    ledger = Ledger()
    ledger.open.clear()
    group = grouped(ledger)
    first = asyncio.create_task(group.submit([draft("first")]))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    gone = asyncio.create_task(group.submit([draft("gone")]))
    kept = asyncio.create_task(group.submit([draft("kept")]))
    await asyncio.sleep(0)
    gone.cancel()
    ledger.open.set()
    await asyncio.gather(first, kept)
    assert ledger.written == ["first", "kept"]


async def test_the_window_waits_on_the_clock_for_company_or_a_full_group() -> None:
    ledger = Ledger()
    clock = FakeClock()
    group = GroupCommit(ledger.write, clock=clock,
                        config=GroupCommitConfig(window_s=0.005, max_drafts=3))
    one = asyncio.create_task(group.submit([draft("a")]))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not one.done() and ledger.transactions == []
    clock.advance(0.005)
    await one
    assert ledger.transactions == [["a"]]
    # a full group does not wait for the window
    await asyncio.gather(*(group.submit([draft(k)]) for k in "xyz"))
    assert ledger.transactions[-1] == ["x", "y", "z"]


async def test_drain_waits_for_every_call_in_hand() -> None:
    ledger = Ledger()
    ledger.open.clear()
    group = grouped(ledger)
    calls = [asyncio.create_task(group.submit([draft(f"k{i}")])) for i in range(5)]
    await asyncio.sleep(0)
    draining = asyncio.create_task(group.drain())
    await asyncio.sleep(0)
    assert not draining.done()
    ledger.open.set()
    await draining
    assert all(c.done() for c in calls) and len(ledger.written) == 5


@settings(max_examples=60, deadline=None)
@given(calls=st.lists(st.tuples(st.integers(1, 4), st.booleans()), min_size=1, max_size=40),
       max_drafts=st.integers(1, 12))
def test_every_good_call_is_written_once_and_every_bad_one_fails_alone(
        calls: list[tuple[int, bool]], max_drafts: int) -> None:
    async def scenario() -> None:
        ledger = Ledger()
        group = grouped(ledger, max_drafts=max_drafts)
        batches = [[draft(f"{'bad' if bad and j == 0 else 'k'}-{i}-{j}") for j in range(size)]
                   for i, (size, bad) in enumerate(calls)]
        results = await asyncio.gather(*(group.submit(b) for b in batches),
                                       return_exceptions=True)
        for (_, bad), result in zip(calls, results, strict=True):
            assert (result is not None) == bad
        good = [d.key for b, (_, bad) in zip(batches, calls, strict=True) if not bad for d in b]
        assert sorted(ledger.written) == sorted(good)
        assert len(ledger.written) == len(set(ledger.written))
        assert all(len(t) <= max(max_drafts, 4) for t in ledger.transactions)

    asyncio.run(scenario())


def test_an_empty_call_writes_nothing() -> None:
    ledger = Ledger()
    asyncio.run(grouped(ledger).submit([]))
    assert ledger.transactions == []


@pytest.mark.parametrize("max_drafts", [1, 2])
async def test_one_call_larger_than_a_group_is_written_whole(max_drafts: int) -> None:
    ledger = Ledger()
    group = grouped(ledger, max_drafts=max_drafts)
    await group.submit([draft(f"k{i}") for i in range(5)])
    assert ledger.transactions == [[f"k{i}" for i in range(5)]]


async def test_a_coalescer_answers_each_call_with_its_own_item_and_fails_one_alone() -> None:
    from tidings.delivery.group_commit import Coalescer

    groups: list[list[int]] = []

    async def square(items: Sequence[int], _now: float) -> list[int]:
        groups.append(list(items))
        if 13 in items:
            raise StoreError("13 refused")
        return [i * i for i in items]

    coalescer: Coalescer[int, int] = Coalescer(square, clock=FakeClock())
    results = await asyncio.gather(*(coalescer.submit(i) for i in range(20)),
                                   return_exceptions=True)

    assert [r for i, r in enumerate(results) if i != 13] == [i * i for i in range(20) if i != 13]
    assert isinstance(results[13], StoreError)
    assert groups[0] == list(range(20))  # one group, then each alone to find the bad one
    assert len(groups) == 1 + 20 and coalescer.groups == 0


async def test_settle_turns_let_a_burst_that_is_still_on_its_way_join_the_first_write(
) -> None:
    # Calls made a few event-loop turns apart (tasks of one batch, each awaiting
    # something quick first): without settle turns the first is written alone.
    async def caller(group: GroupCommit, key: str, turns: int) -> None:
        for _ in range(turns):
            await asyncio.sleep(0)
        await group.submit([draft(key)])

    writes = {}
    for settle in (0, 4):
        ledger = Ledger()
        group = grouped(ledger, settle_turns=settle)
        await asyncio.gather(*(caller(group, f"k{i}", i % 3) for i in range(30)))
        assert sorted(ledger.written) == sorted(f"k{i}" for i in range(30))
        writes[settle] = len(ledger.transactions)
    assert writes[0] > 1 and writes[4] == 1, writes
