"""Store conformance: digest windows and their items (``Digests``).

One open window per digest key; an item is known for good by (digest key, item key);
a window closes to items when its time is up, at its cap or over the payload budget,
and the item that finds it so opens the next; a sliding window moves within its
maximum wait; seal, finish and cancel answer what they did; three processes adding
to few keys at once put every item in exactly one window and open at most one window
per key at a time. Runs unchanged on every store backend (see conftest.py).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from tidings.core.digest import ITEMS_BUDGET
from tidings.core.model import IntentDraft
from tidings.stores.base import (
    DigestItem,
    DigestItemDraft,
    DigestPage,
    DigestsClosed,
    DigestWindow,
    Store,
)

T0 = 1_000_100.0


def item(key: str, digest: str = "comments:r1", *, window_s: float = 60.0,
         sliding: bool = False, wait_s: float | None = None, max_items: int = 100,
         data: dict[str, Any] | None = None) -> DigestItemDraft:
    return DigestItemDraft(
        digest_key=digest, item_key=key, data=json.dumps(data or {"n": key}),
        request=json.dumps({"recipient_id": "r1", "channels": ["email"]}),
        window_s=window_s, wait_s=wait_s if wait_s is not None else window_s,
        sliding=sliding, max_items=max_items)


async def test_items_within_the_window_share_it_in_order(store: Store) -> None:
    a = await store.digest_add(item("a"), now=T0)
    b = await store.digest_add(item("b"), now=T0 + 10)
    c = await store.digest_add(item("c"), now=T0 + 59)

    assert a.created and b.created and c.created
    assert a.window_id == b.window_id == c.window_id
    assert (a.items, b.items, c.items) == (1, 2, 3)
    assert c.closes_at == T0 + 60 and c.state == "open"
    assert [i.item_key for i in await store.digest_items(a.window_id)] == ["a", "b", "c"]
    assert json.loads((await store.digest_items(a.window_id))[1].data) == {"n": "b"}
    other = await store.digest_add(item("a", "comments:r2"), now=T0)
    assert other.created and other.window_id != a.window_id


async def test_the_same_item_again_is_where_it_was(store: Store) -> None:
    first = await store.digest_add(item("a"), now=T0)
    again = await store.digest_add(item("a", data={"n": "changed"}), now=T0 + 5)

    assert not again.created and again.window_id == first.window_id and again.items == 1
    assert json.loads((await store.digest_items(first.window_id))[0].data) == {"n": "a"}
    # ... and after its window closed and a new one opened: still where it was
    assert await store.digest_seal(first.window_id)
    later = await store.digest_add(item("b"), now=T0 + 100)
    replay = await store.digest_add(item("a"), now=T0 + 101)
    assert later.window_id != first.window_id
    assert replay.window_id == first.window_id and not replay.created
    assert replay.state == "sealed"
    assert [i.item_key for i in await store.digest_items(later.window_id)] == ["b"]


async def test_an_item_after_the_close_opens_the_next_window(store: Store) -> None:
    first = await store.digest_add(item("a"), now=T0)
    late = await store.digest_add(item("b"), now=T0 + 60)  # closes_at reached

    assert late.window_id != first.window_id and late.items == 1
    assert late.closes_at == T0 + 120
    due = await store.digest_due(now=T0 + 60, limit=10)
    assert [(w.window_id, w.state) for w in due] == [(first.window_id, "sealed")]


async def test_windows_of_one_key_never_share_an_id(store: Store) -> None:
    first = await store.digest_add(item("a", max_items=1), now=T0)
    second = await store.digest_add(item("b", max_items=1), now=T0)  # same instant

    assert first.state == "sealed" and second.state == "sealed"
    assert first.window_id != second.window_id
    assert {w.window_id for w in await store.digest_due(now=T0, limit=10)} == {
        first.window_id, second.window_id}


async def test_the_cap_seals_the_window(store: Store) -> None:
    adds = [await store.digest_add(item(k, max_items=3), now=T0 + n)
            for n, k in enumerate("abcd")]

    assert [a.state for a in adds] == ["open", "open", "sealed", "open"]
    assert adds[3].window_id != adds[0].window_id
    due = await store.digest_due(now=T0 + 4, limit=10)  # sealed: due before its time
    assert [w.window_id for w in due] == [adds[0].window_id]
    assert due[0].items == 3


async def test_the_payload_budget_opens_the_next_window(store: Store) -> None:
    big = {"text": "x" * (ITEMS_BUDGET // 2)}
    a = await store.digest_add(item("a", data=big), now=T0)
    b = await store.digest_add(item("b", data=big), now=T0 + 1)

    assert a.window_id != b.window_id and b.items == 1
    assert (await store.digest_window(a.window_id)).state == "sealed"  # type: ignore[union-attr]


async def test_a_sliding_window_moves_within_its_maximum_wait(store: Store) -> None:
    def sliding(key: str) -> DigestItemDraft:
        return item(key, sliding=True, window_s=60, wait_s=150)

    a = await store.digest_add(sliding("a"), now=T0)
    b = await store.digest_add(sliding("b"), now=T0 + 50)
    c = await store.digest_add(sliding("c"), now=T0 + 100)

    assert (a.closes_at, b.closes_at, c.closes_at) == (T0 + 60, T0 + 110, T0 + 150)
    assert await store.digest_due(now=T0 + 149, limit=10) == []
    assert [w.window_id for w in await store.digest_due(now=T0 + 150, limit=10)] == [
        a.window_id]


async def test_seal_and_finish_answer_what_they_did(store: Store) -> None:
    a = await store.digest_add(item("a"), now=T0)

    assert not await store.digest_finish(a.window_id, intent_keys=["k"], now=T0)  # open
    assert await store.digest_seal(a.window_id)
    assert await store.digest_seal(a.window_id)  # a closer finishing another's seal
    assert await store.digest_finish(a.window_id, intent_keys=["k:email"], now=T0 + 61)
    assert not await store.digest_finish(a.window_id, intent_keys=["k:email"], now=T0 + 62)
    assert not await store.digest_seal(a.window_id)
    window = await store.digest_window(a.window_id)
    assert window is not None and window.state == "closed"
    assert await store.digest_due(now=T0 + 1000, limit=10) == []
    assert await store.digest_window("digest/none/x") is None


async def test_cancel_takes_an_item_out_while_its_window_is_open(store: Store) -> None:
    a = await store.digest_add(item("a"), now=T0)
    await store.digest_add(item("b"), now=T0 + 1)

    assert await store.digest_cancel_item("comments:r1", "a", now=T0 + 2) == "open"
    assert await store.digest_cancel_item("comments:r1", "a", now=T0 + 3) == "open"
    assert await store.digest_cancel_item("comments:r1", "zzz", now=T0 + 3) is None
    assert [i.item_key for i in await store.digest_items(a.window_id)] == ["b"]
    window = await store.digest_window(a.window_id)
    assert window is not None and window.items == 1
    # a cancelled item is known: adding it again does not bring it back
    assert not (await store.digest_add(item("a"), now=T0 + 4)).created
    assert [i.item_key for i in await store.digest_items(a.window_id)] == ["b"]
    # once sealed, too late
    assert await store.digest_seal(a.window_id)
    assert await store.digest_cancel_item("comments:r1", "b", now=T0 + 5) == "sealed"
    assert [i.item_key for i in await store.digest_items(a.window_id)] == ["b"]


async def test_an_item_after_a_cancel_comes_after_every_item_before(store: Store) -> None:
    a = await store.digest_add(item("a"), now=T0)
    await store.digest_add(item("b"), now=T0 + 1)
    assert await store.digest_cancel_item("comments:r1", "a", now=T0 + 2) == "open"
    await store.digest_add(item("c"), now=T0 + 3)
    await store.digest_add(item("d"), now=T0 + 4)

    kept = await store.digest_items(a.window_id)
    assert [i.item_key for i in kept] == ["b", "c", "d"]
    assert len({i.seq for i in kept}) == 3


async def test_pending_and_purge(store: Store) -> None:
    a = await store.digest_add(item("a"), now=T0)
    await store.digest_add(item("b"), now=T0 + 1)
    await store.digest_add(item("c", "other"), now=T0 + 2)

    pending = await store.digest_pending()
    assert (pending.windows, pending.items, pending.oldest_opened_at) == (2, 3, T0)
    await store.digest_seal(a.window_id)
    await store.digest_finish(a.window_id, intent_keys=["x"], now=T0 + 61)
    pending = await store.digest_pending()
    assert (pending.windows, pending.items) == (1, 1)

    assert await store.digest_purge(before=T0 + 60) == 0
    assert await store.digest_purge(before=T0 + 61) == 1
    assert await store.digest_window(a.window_id) is None
    assert await store.digest_items(a.window_id) == []
    assert (await store.digest_pending()).windows == 1


def build(windows: Sequence[DigestWindow], items: dict[str, list[DigestItem]]) -> DigestPage:
    """One email intent per window with items (its item keys as its data), none for one
    whose items were all cancelled."""
    drafts, finished = [], {}
    for w in windows:
        keys = [i.item_key for i in items.get(w.window_id, [])]
        made = [IntentDraft(key=f"{w.window_id}:email", channel="email", recipient_id="r1",
                            address="r1@example.com", template="t", data=json.dumps(keys),
                            due_at=T0)] if keys else []
        drafts += made
        finished[w.window_id] = [d.key for d in made]
    return DigestPage(drafts=drafts, finished=finished)


async def test_a_close_takes_a_page_of_due_windows_and_admits_it(store: Store) -> None:
    windows = [(await store.digest_add(item("a", f"d{n}"), now=T0 + n)).window_id
               for n in range(5)]
    await store.digest_add(item("b", "d4"), now=T0 + 5)
    await store.digest_cancel_item("d3", "a", now=T0 + 6)
    late = await store.digest_add(item("a", "later"), now=T0 + 100)  # not due
    nothing = DigestsClosed(windows=[], created=[])

    first = await store.digest_close(now=T0 + 70, limit=2, build=build, enqueue=True)
    second = await store.digest_close(now=T0 + 70, limit=10, build=build, enqueue=False)
    assert sorted(first.windows) == windows[:2]  # the earliest due first
    assert sorted(second.windows) == sorted(windows[2:])
    assert sorted(first.created + second.created) == sorted(
        f"{w}:email" for w in windows if w != windows[3])
    assert await store.digest_close(now=T0 + 70, limit=10, build=build,
                                    enqueue=True) == nothing
    states = [(await store.digest_window(w)).state for w in windows]  # type: ignore[union-attr]
    assert states == ["closed", "closed", "closed", "empty", "closed"]
    intent = await store.intent_get(f"{windows[4]}:email")
    assert intent is not None and json.loads(intent.data) == ["a", "b"]
    assert intent.state == "selected"  # not enqueued: the outbox relay publishes it
    enqueued = await store.intent_get(f"{windows[0]}:email")
    assert enqueued is not None and enqueued.state == "enqueued"
    # one window: only if due
    assert await store.digest_close(now=T0 + 80, limit=1, build=build, enqueue=True,
                                    window_id=late.window_id) == nothing
    full = await store.digest_add(item("z", "full", max_items=1), now=T0 + 80)
    one = await store.digest_close(now=T0 + 80, limit=1, build=build, enqueue=True,
                                   window_id=full.window_id)
    assert one.windows == [full.window_id] and one.created == [f"{full.window_id}:email"]
    assert (await store.digest_pending()).windows == 1  # `late`, still open


async def test_a_close_that_fails_leaves_its_page_to_the_next(store: Store) -> None:
    a = await store.digest_add(item("a"), now=T0)

    def dies(windows: Sequence[DigestWindow], items: dict[str, list[DigestItem]]
             ) -> DigestPage:
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        await store.digest_close(now=T0 + 60, limit=10, build=dies, enqueue=True)
    window = await store.digest_window(a.window_id)
    assert window is not None and window.state == "open"  # as it was: rolled back
    closed = await store.digest_close(now=T0 + 60, limit=10, build=build, enqueue=True)
    assert closed.windows == [a.window_id]


def _add_everything(opener: Callable[[str], Awaitable[Store]], url: str, owner: str,
                    start: Any, results: Any) -> None:
    """Child process: add 60 items (20 shared with every other process) to 4 keys."""

    async def run() -> list[tuple[str, str, bool]]:
        store = await opener(url)
        try:
            start.wait()
            out = []
            for n in range(60):
                key = f"shared-{n}" if n < 20 else f"{owner}-{n}"
                added = await store.digest_add(item(key, f"d{n % 4}", max_items=3),
                                               now=T0 + n * 0.01)
                out.append((key, added.window_id, added.created))
            return out
        finally:
            await store.close()

    try:
        results.put((owner, asyncio.run(run())))
    except Exception:  # said, not lost in a child's stderr: the test fails naming it
        results.put((owner, traceback.format_exc()))


async def test_three_processes_put_every_item_in_one_window(
        store: Store, store_backend: Any, store_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=_add_everything,
                         args=(store_backend.open, store_url, f"w{n}", start, results))
             for n in range(3)]
    for p in procs:
        p.start()
    got = dict(await asyncio.to_thread(lambda: [results.get(timeout=120) for _ in procs]))
    for p in procs:
        p.join(timeout=30)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    failed = {owner: text for owner, text in got.items() if isinstance(text, str)}
    assert not failed, failed

    answers = [a for rows in got.values() for a in rows]
    # a shared item is created once, and every answer for it names one window
    created = Counter(key for key, _, made in answers if made)
    assert all(n == 1 for n in created.values()) and len(created) == 20 + 2 * 40 + 40
    windows_of: dict[str, set[str]] = {}
    for key, wid, _ in answers:
        windows_of.setdefault(key, set()).add(wid)
    assert all(len(w) == 1 for w in windows_of.values())
    # the windows hold exactly the items, each once, none over the cap
    held: Counter[str] = Counter()
    for wid in {w for ws in windows_of.values() for w in ws}:
        keys = [i.item_key for i in await store.digest_items(wid)]
        assert 1 <= len(keys) <= 3
        held.update(keys)
    assert held == Counter({key: 1 for key in windows_of})
    pending = await store.digest_pending()
    assert pending.items == sum(held.values())


def _close_everything(opener: Callable[[str], Awaitable[Store]], url: str, owner: str,
                      start: Any, results: Any) -> None:
    """Child process: close pages of 4 due windows until none is left."""

    async def run() -> list[str]:
        store = await opener(url)
        try:
            start.wait()
            closed: list[str] = []
            while True:
                page = await store.digest_close(now=T0 + 100, limit=4, build=build,
                                                enqueue=True)
                if not page.windows:
                    return closed
                assert sorted(page.created) == sorted(f"{w}:email" for w in page.windows)
                closed += page.windows
        finally:
            await store.close()

    try:
        results.put((owner, asyncio.run(run())))
    except Exception:  # said, not lost in a child's stderr: the test fails naming it
        results.put((owner, traceback.format_exc()))


async def test_three_processes_close_each_due_window_once(
        store: Store, store_backend: Any, store_url: str) -> None:
    due = {(await store.digest_add(item("a", f"d{n}"), now=T0 + n * 0.01)).window_id
           for n in range(90)}
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=_close_everything,
                         args=(store_backend.open, store_url, f"c{n}", start, results))
             for n in range(3)]
    for p in procs:
        p.start()
    got = dict(await asyncio.to_thread(lambda: [results.get(timeout=120) for _ in procs]))
    for p in procs:
        p.join(timeout=30)
    failed = {owner: text for owner, text in got.items() if isinstance(text, str)}
    assert not failed, failed

    closed = Counter(wid for wids in got.values() for wid in wids)
    assert set(closed) == due and set(closed.values()) == {1}
    assert (await store.digest_pending()).windows == 0
