"""One outcome the store will not take holds back no other: given, when, then.

PostgreSQL fails a whole transaction over one value it cannot hold, and a worker that
commits its outcomes in batches would try the same batch again for ever, holding every
slot in it. After ``COMMIT_APART_AFTER`` failed commits in a row the worker commits the
outcomes one by one: the refused one again without the text a provider wrote, and if
the store refuses even that while it takes the others, the worker gives it up to the
reconciler, which settles it as it settles a crashed worker's send. Judged by the
sandbox's own counts: every key accepted once, none twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pytest

from tidings.core.errors import StoreError
from tidings.core.outcomes import Accepted, Permanent, RateLimited, Transient
from tidings.core.states import State
from tidings.delivery.worker import COMMIT_APART_AFTER, PLAIN_REASON
from tidings.stores.base import Change, QueueAcks

if TYPE_CHECKING:
    from conftest import HarnessFactory

SETTINGS = {"worker": {"lease_s": 10.0, "visibility_s": 20.0}}


class RefusingStore:
    """The worker's store, but a commit holding ``key``'s outcome fails, as a whole
    transaction does over one value the database cannot hold; ``plain_too``: even
    when the outcome comes without its text. ``down_for``: the first that many
    commits fail whatever they hold (an outage)."""

    def __init__(self, inner: Any, key: str = "", *, plain_too: bool = False,
                 down_for: int = 0) -> None:
        self.inner = inner
        self.key = key
        self.plain_too = plain_too
        self.down_for = down_for
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def intent_apply_many(self, changes: Sequence[Change], *, now: float,
                                acks: QueueAcks | None = None) -> list[str]:
        if self.down_for > 0:
            self.down_for -= 1
            raise StoreError("connection refused")
        for change in changes:
            if change.key == self.key and (self.plain_too or change.reason != PLAIN_REASON):
                self.refused += 1
                raise StoreError("character with byte sequence 0xe2 0x80 in encoding UTF8 "
                                 "has no equivalent in encoding LATIN1")
        applied: list[str] = await self.inner.intent_apply_many(changes, now=now, acks=acks)
        return applied


async def test_an_outcome_refused_with_its_text_is_committed_without_it(
        make_harness: HarnessFactory) -> None:
    # given six intents, and a store that refuses the third one's outcome as written
    h = await make_harness(settings=SETTINGS)
    keys = [await h.notify(f"ship-1:c{i}") for i in range(6)]
    w = h.worker()
    store = RefusingStore(w.store, keys[2], plain_too=False)
    w.store = store  # type: ignore[assignment]
    running = asyncio.create_task(w.run())

    # when the worker runs until every outcome is committed
    await h.run_until(lambda: w.held == 0 and w.stats.accepted == len(keys)
                      and not w._outcomes)
    w.stop()
    await h.guard(running)

    # then the batch was tried as a batch, then apart, and every intent is accepted
    assert store.refused >= COMMIT_APART_AFTER
    assert {(await h.intent(k)).state for k in keys} == {State.ACCEPTED}
    refused = await h.intent(keys[2])
    assert refused.receipt is None and h.accepted_by_sandbox(keys[2]) is not None
    assert (await h.events(keys[2]))[-1].detail == PLAIN_REASON
    assert (await h.intent(keys[0])).receipt == h.accepted_by_sandbox(keys[0])
    assert w.stats.unrecorded == 0 and await h.queue_total() == 0
    stats = h.stats()
    assert (stats["requests"], stats["accepted_keys"], stats["keys_accepted_twice"]) == (6, 6, 0)


async def test_an_outcome_refused_even_plain_is_left_to_the_reconciler(
        make_harness: HarnessFactory) -> None:
    # given six intents, and a store that refuses the fourth one's outcome however written
    h = await make_harness(settings=SETTINGS)
    keys = [await h.notify(f"ship-2:c{i}") for i in range(6)]
    w = h.worker()
    store = RefusingStore(w.store, keys[3], plain_too=True)
    w.store = store  # type: ignore[assignment]
    running = asyncio.create_task(w.run())

    # when the worker runs: the others commit, and the refused one is given up
    await h.run_until(lambda: w.stats.unrecorded == 1 and w.held == 0 and not w._outcomes)
    assert not running.done()
    others = [k for k in keys if k != keys[3]]
    assert {(await h.intent(k)).state for k in others} == {State.ACCEPTED}
    assert (await h.intent(keys[3])).state is State.CLAIMED  # its lease, no longer renewed
    w.stop()
    await h.guard(running)

    # then once its lease has expired the reconciler settles it by the sandbox's lookup,
    # and its message, back on the queue, is acked unsent
    await h.drive(w)
    assert (await h.intent(keys[3])).state is State.ACCEPTED
    assert await h.queue_total() == 0
    stats = h.stats()
    assert (stats["requests"], stats["accepted_keys"], stats["keys_accepted_twice"]) == (6, 6, 0)


async def test_a_long_outage_of_the_store_is_waited_out_and_gives_nothing_up(
        make_harness: HarnessFactory) -> None:
    # given two intents sent, and a store that then refuses every commit for hours:
    # more than a thousand failed tries in a row
    h = await make_harness(settings=SETTINGS)
    keys = [await h.notify(f"ship-3:c{i}") for i in range(2)]
    w = h.worker()
    # (committed apart, each pass of two outcomes spends four calls: 1,250 passes)
    w.store = RefusingStore(w.store, down_for=5_000)  # type: ignore[assignment]
    running = asyncio.create_task(w.run())

    # when the store is back, the outcomes are committed: nothing given up meanwhile
    # (no commit went through, so none can be told apart as refused)
    await h.run_until(lambda: w.stats.accepted == 2 and w.held == 0 and not w._outcomes)
    assert not running.done()
    w.stop()
    await h.guard(running)
    assert {(await h.intent(k)).state for k in keys} == {State.ACCEPTED}
    assert w.stats.unrecorded == 0 and await h.queue_total() == 0
    assert h.clock.now() - h.t0 > 1_024 * 5.0  # over a thousand tries, 5 s apart at most
    stats = h.stats()
    assert (stats["requests"], stats["accepted_keys"], stats["keys_accepted_twice"]) == (2, 2, 0)


class Answers:
    """The sandbox twin, which sends, but the adapter hands back ``answer`` instead of
    what the sandbox said: a plug-in provider with a bug."""

    def __init__(self, inner: Any, answer: object) -> None:
        self.inner = inner
        self.answer = answer
        self.name = inner.name
        self.supports_lookup = inner.supports_lookup

    async def send(self, request: Any) -> Any:
        await self.inner.send(request)
        return self.answer

    async def lookup(self, key: str) -> Any:
        return await self.inner.lookup(key)

    async def close(self) -> None:
        await self.inner.close()


@pytest.mark.parametrize(("answer", "state"), [
    (None, State.UNCERTAIN),  # no outcome at all: it may have been sent
    (42, State.UNCERTAIN),
    (RateLimited(retry_after_s="soon"), State.UNCERTAIN),  # type: ignore[arg-type]
    (Accepted(receipt=123), State.ACCEPTED),  # type: ignore[arg-type]
    (Accepted(receipt="ok\x00\ud800"), State.ACCEPTED),
    (Transient(reason=None), State.RETRYABLE),  # type: ignore[arg-type]
    (Permanent(reason=b"bounced\x00"), State.REJECTED),  # type: ignore[arg-type]
])
async def test_whatever_a_plug_in_provider_answers_the_intent_leaves_claimed(
        make_harness: HarnessFactory, answer: object, state: State) -> None:
    # given three intents and a provider adapter that answers with something odd
    h = await make_harness(settings=SETTINGS)
    keys = [await h.notify(f"ship-4:c{i}") for i in range(3)]
    w = h.worker()
    w.provider = Answers(w.provider, answer)  # type: ignore[assignment]
    running = asyncio.create_task(w.run())

    # when the worker has handled them
    await h.run_until(lambda: w.stats.received == 3 and w.held == 0 and not w._outcomes)
    assert not running.done()
    w.stop()
    await h.guard(running)

    # then each left claimed as the answer allows, recorded as it came, text and all
    intents = [await h.intent(k) for k in keys]
    assert {i.state for i in intents} == {state}
    assert w.stats.unrecorded == 0 and await h.queue_total() in (0, 3)
    if isinstance(answer, Accepted):
        assert {i.receipt for i in intents} == {str(answer.receipt).replace("\x00", "\ufffd")
                                                .replace("\ud800", "\ufffd")}
    assert PLAIN_REASON not in [(await h.events(k))[-1].detail for k in keys]
    assert h.stats()["keys_accepted_twice"] == 0
