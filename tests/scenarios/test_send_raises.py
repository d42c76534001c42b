"""No exception strands a delivery: given, when, then.

A provider adapter should answer with an outcome, but a client library can raise (a
pool's "Too many connections"), and so can the code around the send: the composer,
the pacer, the last checks. Whatever raises, the intent leaves ``claimed``: raised
before the request could have left, a transient failure retried with backoff against
the budget; raised once it may have left, uncertain, settled by the reconciler. The
worker's slot is freed, the message is acked or nacked as the outcome says, the event
tells what was raised (with no address in it), and the worker goes on receiving.
Judged, as everywhere, by the sandbox's own counts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pytest

from tidings.core.errors import StoreError
from tidings.core.model import Intent
from tidings.core.states import State
from tidings.delivery.compose import Composed
from tidings.providers.faults import RaisingProvider

if TYPE_CHECKING:
    from conftest import Harness, HarnessFactory

EMAIL = "email"
ADDRESS = "ada.lovelace@example.com"


class FailingPacer:
    """The worker's pacer, but ``method`` raises (``times`` times, then it recovers)."""

    def __init__(self, inner: Any, method: str, *, times: int = 1_000_000,
                 streak_to_end: int = 0) -> None:
        self.inner = inner
        self.streak_to_end = streak_to_end
        self.method = method
        self.left = times
        self.raised = 0

    def __getattr__(self, name: str) -> Any:
        if name == "streak" and self.streak_to_end:
            return self.streak_to_end  # a 429 streak the next acceptance ends
        attribute = getattr(self.inner, name)
        if name != self.method:
            return attribute

        async def failing(*args: Any, **kwargs: Any) -> Any:
            if self.left > 0:
                self.left -= 1
                self.raised += 1
                # As a backend's error would: it names what it was doing, here an address.
                raise StoreError(f"pacer state locked while pacing {ADDRESS} / +15551234567")
            return await attribute(*args, **kwargs)

        return failing


class ComposerFailsFor:
    """The worker's composer, but composing a batch that holds ``key`` raises (a bug in a
    template filter for one recipient's data, say)."""

    def __init__(self, inner: Any, key: str) -> None:
        self.inner = inner
        self.key = key

    async def compose(self, intents: Sequence[Intent], *, now: float | None = None
                      ) -> list[Composed]:
        if any(i.key == self.key for i in intents):
            raise ValueError(f"template filter failed on {ADDRESS}")
        result: list[Composed] = await self.inner.compose(intents, now=now)
        return result


def raising(h: Harness, *, before: float = 0.0, after: float = 0.0) -> RaisingProvider:
    return RaisingProvider(h.provider, before=before, after=after, rng=random.Random(0))


async def last_event(h: Harness, key: str) -> Any:
    return (await h.events(key))[-1]


def assert_no_address(text: str | None) -> None:
    assert text is not None
    assert ADDRESS not in text and "5551234567" not in text and "@" not in text


# ---------------------------------------------------------------- before the request left


async def test_a_pacer_that_raises_before_the_send_is_a_transient_failure_with_backoff(
        h: Harness) -> None:
    # given an intent, and a pacer whose next slot raises
    key = await h.notify("ship-1:c1", address=ADDRESS)
    w = h.worker()
    pacer = FailingPacer(w.pacer, "slot", times=1)
    w.pacer = pacer  # type: ignore[assignment]

    # when the worker handles it
    await h.run_once(w)

    # then nothing was sent, and the intent is retryable later, one failure spent
    assert pacer.raised == 1 and h.stats()["requests"] == 0
    intent = await h.intent(key)
    assert intent.state is State.RETRYABLE and intent.failures == 1
    assert intent.lease_owner is None
    assert intent.next_attempt_at is not None and intent.next_attempt_at >= h.clock.now()
    # and the slot is free, the message back on the queue for then (not in flight)
    assert w.held == 0 and w.stats.raised == 1
    depth = await h.rt.transport.depth(EMAIL, now=h.clock.now())
    assert depth.in_flight == 0 and depth.ready + depth.delayed == 1
    # and the event says what was raised, with neither the address nor the number
    event = await last_event(h, key)
    assert (event.type, event.state) == ("transient_failure", "retryable")
    assert event.detail.startswith("raised before the send: tidings.core.errors.StoreError: "
                                   "pacer state locked while pacing")
    assert_no_address(event.detail)

    # when the backoff has passed, the next try goes through: one acceptance
    h.clock.set(intent.next_attempt_at + 0.001)
    await h.drive(w)
    assert (await h.intent(key)).state is State.ACCEPTED
    stats = h.stats()
    assert (stats["requests"], stats["accepted_keys"], stats["keys_accepted_twice"]) == (1, 1, 0)


async def test_a_last_check_that_raises_before_the_send_is_a_transient_failure(
        make_harness: HarnessFactory) -> None:
    # given a worker whose re-read of the intent before the send (after a long pacer
    # wait) fails
    h = await make_harness()
    key = await h.notify("ship-2:c2", address=ADDRESS)
    w = h.worker()

    class ReadFails:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        async def intent_get(self, key: str) -> Intent | None:
            raise RuntimeError("connection pool exhausted")

    w.store = ReadFails(w.store)  # type: ignore[assignment]
    w.config = type(w.config)(recheck_after_s=0.0)  # re-read before every send

    # when the worker handles it
    await h.run_once(w)

    # then it was not sent and is retryable, the failure counted
    intent = await h.intent(key)
    assert intent.state is State.RETRYABLE and intent.failures == 1
    assert h.stats()["requests"] == 0 and w.held == 0
    assert (await last_event(h, key)).detail == (
        "raised before the send: RuntimeError: connection pool exhausted")


async def test_a_composer_that_raises_for_one_intent_spends_only_its_budget(
        h: Harness) -> None:
    # given three intents, the composer failing on one of them
    keys = [await h.notify(f"ship-3:c{i}", address=f"c{i}@example.com") for i in range(3)]
    bad = keys[1]
    w = h.worker()
    w.composer = ComposerFailsFor(w.composer, bad)  # type: ignore[assignment]

    # when the worker handles the batch
    await h.run_once(w)

    # then the other two are sent and accepted; the bad one is retryable, one failure
    states = {k: (await h.intent(k)).state for k in keys}
    assert states == {keys[0]: State.ACCEPTED, bad: State.RETRYABLE, keys[2]: State.ACCEPTED}
    assert (await h.intent(bad)).failures == 1
    detail = (await last_event(h, bad)).detail
    assert detail.startswith("raised before the send: ValueError: template filter failed on")
    assert_no_address(detail)
    assert w.held == 0
    stats = h.stats()
    assert (stats["requests"], stats["accepted_keys"]) == (2, 2)
    assert h.accepted_by_sandbox(bad) is None


# ---------------------------------------------------------------- once it may have left


@pytest.mark.parametrize("reached", [False, True],
                         ids=["raised-before-reaching-the-sandbox", "sandbox-accepted-then-raised"])
async def test_a_provider_that_raises_during_the_send_is_uncertain_and_settled_once(
        h: Harness, reached: bool) -> None:
    # given an adapter that raises inside send: before its request reached the sandbox,
    # or after the sandbox accepted it
    key = await h.notify("ship-4:c4", address=ADDRESS)
    w = h.worker()
    w.provider = raising(h, before=0.0 if reached else 1.0, after=1.0 if reached else 0.0)

    # when the worker handles it
    await h.run_once(w)

    # then the intent is uncertain (one failure spent), its message acked, the slot free
    intent = await h.intent(key)
    assert intent.state is State.UNCERTAIN and intent.failures == 1
    assert intent.lease_owner is None
    assert await h.queue_total() == 0
    assert w.held == 0 and w.stats.raised == 1 and w.stats.uncertain == 1
    event = await last_event(h, key)
    assert (event.type, event.state) == ("uncertain", "uncertain")
    assert "tidings.providers.faults.InjectedFault: " in event.detail
    assert_no_address(event.detail)
    assert h.stats()["accepted_keys"] == (1 if reached else 0)

    # when the adapter is healthy again and the reconciler settles the uncertain send
    w.provider = h.provider
    h.clock.advance(h.rt.settings.reconciler.uncertain_after_s + 1)
    await h.drive(w)

    # then the key was accepted exactly once: looked up if the sandbox had it, else
    # retried under the same key
    final = await h.intent(key)
    assert final.state is State.ACCEPTED and final.receipt == h.accepted_by_sandbox(key)
    types = await h.event_types(key)
    assert ("resolved_accepted" if reached else "resolved_retry") in types
    stats = h.stats()
    assert (stats["requests"], stats["accepted_keys"], stats["keys_accepted_twice"]) == (1, 1, 0)


async def test_a_provider_that_returns_no_outcome_is_uncertain(h: Harness) -> None:
    # given an adapter that answers with something that is not an outcome (decide raises)
    key = await h.notify("ship-5:c5")
    w = h.worker()

    class Garbled:
        name, supports_lookup = "garbled", True

        async def send(self, request: Any) -> Any:
            await h.provider.send(request)
            return {"status": "ok"}

    w.provider = Garbled()  # type: ignore[assignment]

    # when the worker handles it, then the intent is uncertain, and the sandbox has it
    await h.run_once(w)
    assert (await h.intent(key)).state is State.UNCERTAIN
    assert (await last_event(h, key)).detail.startswith(
        "raised during the send, which may have reached the provider: TypeError: ")
    h.clock.advance(h.rt.settings.reconciler.uncertain_after_s + 1)
    await h.reconcile()
    assert (await h.intent(key)).state is State.ACCEPTED
    assert h.stats()["requests"] == 1


async def test_a_provider_that_raises_cancelled_error_is_uncertain_not_stranded(
        h: Harness) -> None:
    # given an adapter whose send raises CancelledError though nothing cancelled it
    key = await h.notify("ship-5b:c5b")
    w = h.worker()

    class Cancelling:
        name, supports_lookup = "cancelling", True

        async def send(self, request: Any) -> Any:
            await h.provider.send(request)
            raise asyncio.CancelledError()

    w.provider = Cancelling()  # type: ignore[assignment]

    # when the worker handles it, then its outcome is queued like any raise (uncertain,
    # one failure spent), its slot is free, and the lookup settles it
    await h.run_once(w)
    intent = await h.intent(key)
    assert (intent.state, intent.failures, w.held) == (State.UNCERTAIN, 1, 0)
    assert "ProviderCancelled" in (await last_event(h, key)).detail
    h.clock.advance(h.rt.settings.reconciler.uncertain_after_s + 1)
    await h.reconcile()
    assert (await h.intent(key)).state is State.ACCEPTED
    assert h.stats()["requests"] == 1


async def test_a_send_past_its_deadline_is_cut_off_and_uncertain(h: Harness) -> None:
    # given an adapter whose call never returns (a connection the network swallowed),
    # and a send deadline that expires at the call's first wait
    key = await h.notify("ship-6:c6", address=ADDRESS)
    w = h.worker()
    w.config = dataclasses.replace(w.config, send_deadline_s=0.0)
    cancelled = asyncio.Event()

    class Swallowed:
        name, supports_lookup = "swallowed", True

        async def send(self, request: Any) -> Any:
            try:
                await asyncio.Event().wait()
            finally:
                cancelled.set()

    w.provider = Swallowed()  # type: ignore[assignment]

    # when the worker handles it, then the call was cancelled (its connection with it),
    # the intent is uncertain, the event names the deadline, and the slot is free
    await h.run_once(w)
    assert cancelled.is_set()
    assert (await h.intent(key)).state is State.UNCERTAIN
    assert w.held == 0 and w.stats.raised == 1
    detail = (await last_event(h, key)).detail
    assert detail.startswith("raised during the send, which may have reached the provider: "
                             "tidings.core.errors.SendDeadlineExceeded: no answer within "
                             "send_deadline_s (0 s)"), detail
    # and the reconciler settles it as any uncertain send: once
    w.provider = h.provider
    h.clock.advance(h.rt.settings.reconciler.uncertain_after_s + 1)
    await h.drive(w)
    assert (await h.intent(key)).state is State.ACCEPTED
    assert (h.stats()["accepted_keys"], h.stats()["keys_accepted_twice"]) == (1, 0)


# ---------------------------------------------------------------- every time


@pytest.mark.parametrize("where", ["pacer", "provider"])
async def test_a_send_that_raises_every_time_ends_dead_with_the_reason(
        make_harness: HarnessFactory, where: str) -> None:
    # given a budget of three failures, and a pacer (before the request) or an adapter
    # (inside the send) that raises on every try
    h = await make_harness(settings={"retry": {"max_failures": 3}})
    key = await h.notify("ship-6:c6", address=ADDRESS)
    w = h.worker()
    provider = raising(h, before=1.0)
    if where == "pacer":
        w.pacer = FailingPacer(w.pacer, "slot")  # type: ignore[assignment]
    else:
        w.provider = provider

    # when the worker and the reconciler run until the intent settles
    await h.drive(w)

    # then it is dead, its message dead-lettered with the reason, and never sent
    dead = await h.intent(key)
    assert dead.state is State.DEAD and dead.failures == 3
    assert dead.reason is not None
    assert_no_address(dead.reason)
    if where == "pacer":
        assert dead.reason.startswith("retry budget spent after 3 transient failures: "
                                      "raised before the send: tidings.core.errors.StoreError")
    else:
        # three uncertain tries, each settled by lookup as not accepted, then no fourth
        assert provider.counts.sends == 3
        assert dead.reason == "retry budget spent after 3 failures; not sent again"
        assert (await h.event_types(key)).count("resolved_retry") == 3
    letters = await h.rt.transport.dead_letters(EMAIL)
    assert [(d.message_id, d.reason) for d in letters] == [(key, dead.reason)]
    assert h.stats()["requests"] == 0
    assert w.held == 0


# ---------------------------------------------------------------- after the decision


@pytest.mark.parametrize(("method", "sandbox", "state"), [
    ("release", {}, State.ACCEPTED),
    ("succeeded", {}, State.ACCEPTED),
    ("pause", {"rate_limit": 1.0}, State.RETRYABLE),
], ids=["release", "succeeded", "pause-after-429"])
async def test_a_pacer_that_raises_after_the_answer_leaves_the_answer_standing(
        make_harness: HarnessFactory, method: str, sandbox: dict[str, Any], state: State
) -> None:
    # given a pacer that raises once the provider has answered
    h = await make_harness(sandbox=sandbox)
    key = await h.notify("ship-7:c7")
    w = h.worker()
    # (with a 429 streak, so that an acceptance has one to end)
    pacer = FailingPacer(w.pacer, method, streak_to_end=1)
    w.pacer = pacer  # type: ignore[assignment]

    # when the worker handles it
    await h.run_once(w)

    # then the provider's answer is what the ledger records; nothing counts as raised
    assert pacer.raised == 1
    intent = await h.intent(key)
    assert intent.state is state and intent.failures == 0
    assert w.held == 0 and w.stats.raised == 0
    assert h.stats()["requests"] == 1


# ---------------------------------------------------------------- the worker goes on


async def test_the_worker_keeps_receiving_while_every_send_raises(
        make_harness: HarnessFactory) -> None:
    # given a worker that holds at most four messages, twelve intents, and an adapter
    # that raises on every send
    h = await make_harness(settings={"worker": {"batch_size": 4}})
    keys = [await h.notify(f"ship-8:c{i}") for i in range(12)]
    w = h.worker()
    w.config = type(w.config)(batch_size=4, max_held=4)
    w.provider = raising(h, before=1.0)
    running = asyncio.create_task(w.run())

    # when it runs: each raise frees its slot, so it receives the next batch
    await h.run_until(lambda: w.stats.received == len(keys) == w.stats.uncertain)
    assert not running.done()
    w.stop()
    await h.guard(running)

    # then every intent left claimed, none is held, and the queue holds nothing
    assert {(await h.intent(k)).state for k in keys} == {State.UNCERTAIN}
    assert w.held == 0 and await h.queue_total() == 0
