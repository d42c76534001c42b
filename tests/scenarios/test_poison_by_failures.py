"""Poison means the message, not the weather: given, when, then.

A queue message's ``receive_count`` grows with every receive, and every worker that
dies (or whose visibility runs out, or that releases its work) makes its messages
visible again: a healthy message can be received fifty times in a day of restarts.
Only receives that failed on the message itself (``Received.failures``) count toward
the poison limit (``worker.max_receives``); the dead letter says which count tripped.
Judged by the sandbox's own counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tidings.core.model import Intent
from tidings.core.states import State
from tidings.delivery.compose import Composed

if TYPE_CHECKING:
    from conftest import Harness, HarnessFactory

EMAIL = "email"
LIMIT = 3
SETTINGS = {"worker": {"max_receives": LIMIT, "lease_s": 10.0, "visibility_s": 20.0},
            "retry": {"max_failures": 50, "base_s": 1.0, "cap_s": 1.0}}


class ComposerFailsFor:
    """The worker's composer, but composing a batch that holds ``key`` raises (a template
    filter that fails on one recipient's data, say)."""

    def __init__(self, inner: Any, key: str) -> None:
        self.inner = inner
        self.key = key

    async def compose(self, intents: Sequence[Intent], *, now: float | None = None
                      ) -> list[Composed]:
        if any(i.key == self.key for i in intents):
            raise ValueError("template filter failed")
        result: list[Composed] = await self.inner.compose(intents, now=now)
        return result


async def test_a_message_redelivered_by_receivers_that_died_is_still_delivered(
        make_harness: HarnessFactory) -> None:
    # given a healthy intent whose message ten receivers took and died holding, far more
    # than the poison limit of three
    h: Harness = await make_harness(settings=SETTINGS)
    key = await h.notify("weekly:c1")
    for _ in range(10):
        (taken,) = await h.rt.transport.receive(EMAIL, max_messages=1, visibility_s=20.0,
                                                now=h.clock.now())
        h.clock.advance(20.0)
    assert (taken.receive_count, taken.failures) == (10, 0)

    # when a live worker receives it
    w = h.worker()
    await h.drive(w)

    # then it is delivered once, not dead-lettered
    assert (await h.intent(key)).state is State.ACCEPTED
    assert h.accepted_by_sandbox(key) is not None
    assert h.stats()["keys_accepted_twice"] == 0
    assert await h.rt.transport.dead_letters(EMAIL) == []
    assert w.stats.poison == 0


async def test_a_message_whose_intent_a_dead_worker_still_holds_waits_for_the_lease(
        make_harness: HarnessFactory) -> None:
    # given an intent claimed by a worker that died, and its message received again and
    # again while that lease is live (busy) and while its retry is not yet due
    h: Harness = await make_harness(settings=SETTINGS)
    key = await h.notify("weekly:c2")
    await h.rt.store.intent_claim_many([key], owner="dead-worker", lease_s=10.0,
                                       now=h.clock.now())
    w = h.worker()
    for _ in range(2 * LIMIT):
        await h.run_once(w)
        await h.reconcile()
        h.clock.advance(2.0)

    # then no busy or not-due redelivery made it poison: it was delivered once
    await h.drive(w)
    assert (await h.intent(key)).state is State.ACCEPTED
    assert h.stats()["keys_accepted_twice"] == 0
    assert await h.rt.transport.dead_letters(EMAIL) == []
    assert w.stats.by_kind.get("busy", 0) + w.stats.by_kind.get("not_due", 0) >= 1


async def test_a_message_that_fails_on_itself_is_dead_lettered_at_the_limit(
        make_harness: HarnessFactory) -> None:
    # given two intents, the composer failing on one of them (its own data), with a retry
    # budget far above the poison limit, and its message redelivered by dead receivers
    h: Harness = await make_harness(settings=SETTINGS)
    good = await h.notify("weekly:c3")
    bad = await h.notify("weekly:c4")
    for _ in range(5):
        await h.rt.transport.receive(EMAIL, max_messages=10, visibility_s=20.0,
                                     now=h.clock.now())
        h.clock.advance(20.0)
    w = h.worker()
    w.composer = ComposerFailsFor(w.composer, bad)  # type: ignore[assignment]

    # when the worker handles them until all is settled
    await h.drive(w)

    # then the good one is delivered once; the bad one failed LIMIT times on itself and
    # was then dead-lettered unsent, the reason naming the count that tripped
    assert (await h.intent(good)).state is State.ACCEPTED
    assert h.accepted_by_sandbox(bad) is None
    intent = await h.intent(bad)
    assert intent.state is State.DEAD
    assert intent.failures == LIMIT
    assert intent.reason == (f"poison: failed {LIMIT} times on the message itself "
                             f"(received {5 + LIMIT + 1} times)")
    (letter,) = await h.rt.transport.dead_letters(EMAIL)
    assert letter.message_id == bad
    assert letter.reason == intent.reason
    assert letter.receive_count == 5 + LIMIT + 1
    assert w.stats.poison == 1
    stats = h.stats()
    assert (stats["requests"], stats["accepted_keys"], stats["keys_accepted_twice"]) == (1, 1, 0)


async def test_a_store_that_fails_is_not_the_message_s_failure(
        make_harness: HarnessFactory) -> None:
    # given an intent whose composer cannot read preferences (the store is down) more
    # times than the poison limit
    h: Harness = await make_harness(settings=SETTINGS)
    key = await h.notify("weekly:c5")
    w = h.worker()
    inner = w.composer
    failing = {"left": 2 * LIMIT}

    class StoreDown:
        async def compose(self, intents: Sequence[Intent], *, now: float | None = None
                          ) -> list[Composed]:
            if failing["left"] > 0:
                failing["left"] -= 1
                raise OSError("connection refused")
            assert inner is not None
            result: list[Composed] = await inner.compose(intents, now=now)
            return result

    w.composer = StoreDown()  # type: ignore[assignment]

    # when the worker goes on until the store is back
    await h.drive(w)

    # then the released message was never counted as poison: delivered once
    assert (await h.intent(key)).state is State.ACCEPTED
    assert w.stats.released >= 2 * LIMIT
    assert await h.rt.transport.dead_letters(EMAIL) == []
    assert h.stats()["keys_accepted_twice"] == 0
