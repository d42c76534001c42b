"""The release checklist, one scenario per item: given, when, then.

Every scenario runs the real core (worker, scheduler, relay, reconciler) on a SQLite
file with the SQL transport, a fake clock and the in-process sandbox, and is judged by
the sandbox's own counts: what it was asked (``requests``, per 1-second window) and
what it accepted (``accepted_keys``, ``keys_accepted_twice``; ``dedupe`` is off, so a
second send of a key would be counted, not absorbed).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from tidings.admission.audience import GeneratorAudience
from tidings.admission.campaign import Campaign
from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.cron import Schedule
from tidings.core.errors import ConfigurationError, InvalidInput, StoreError
from tidings.core.model import (
    MAX_PAYLOAD_BYTES,
    IntentDraft,
    Message,
    OutgoingMessage,
    Received,
    Recipient,
    SendRequest,
)
from tidings.core.outcomes import RateLimited, Uncertain
from tidings.core.states import State
from tidings.runtime import build_runtime
from tidings.stores.base import Change, ClaimKind

if TYPE_CHECKING:
    from conftest import Harness, HarnessFactory

EMAIL = "email"


def at(text: str) -> float:
    """``"2026-06-02 09:00:30"`` (UTC) as epoch seconds."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def windows(h: Harness) -> dict[int, int]:
    """The sandbox's requests per 1-second window, by window start."""
    return {int(w): n for w, n in h.stats()["requests_per_window"].items()}


async def abandon_claim(h: Harness, owner: str) -> list[Received]:
    """A worker receives a batch and claims it, then dies: it never sends or commits."""
    settings = h.rt.settings.worker
    batch = await h.rt.transport.receive(EMAIL, max_messages=settings.batch_size,
                                         visibility_s=settings.visibility_s, now=h.clock.now())
    keys = [Message.decode(r.body).key for r in batch]
    claims = await h.rt.store.intent_claim_many(
        keys, owner=owner, lease_s=settings.lease_s, now=h.clock.now(),
        message_ids=[r.message_id for r in batch])
    assert [c.kind for c in claims] == [ClaimKind.CLAIMED] * len(batch)
    return batch


class TransportProxy:
    """Delegates every Transport call; subclasses override the one that misbehaves."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class LostAcks(TransportProxy):
    """Acks vanish on the way to the broker while ``losing`` is set."""

    #: A broker's queue, not the store's own table: its acks are sent apart from the
    #: outcomes' commit (``Ledger.acks_commit_with``), so one can be lost.
    db = None

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.losing = True
        self.lost: list[str] = []

    async def ack(self, queue: str, receipts: Sequence[str]) -> None:
        if self.losing:
            self.lost.extend(receipts)
            return
        await self.inner.ack(queue, receipts)


class PublishTimesOutOnce(TransportProxy):
    """The first publish really reaches the queue, then its caller sees a timeout."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.timed_out = 0

    async def publish(self, queue: str, messages: Sequence[OutgoingMessage], *,
                      now: float) -> None:
        await self.inner.publish(queue, messages, now=now)
        if self.timed_out == 0:
            self.timed_out += 1
            raise TimeoutError("publish timed out (after the broker stored the messages)")


def digest(recipients: Sequence[Recipient], **kw: Any) -> Campaign:
    """A daily 09:00 UTC campaign over ``recipients`` on email."""
    def source() -> Iterator[Recipient]:
        yield from recipients

    options: dict[str, Any] = {"expires_after_s": 7 * 24 * 3600.0, "grace_s": 3600.0}
    options.update(kw)
    return Campaign(name="digest", schedule=Schedule("0 9 * * *", "UTC"), channels=(EMAIL,),
                    template="digest", version=1, audience=GeneratorAudience(source), **options)


def people(n: int) -> list[Recipient]:
    return [Recipient(id=f"c{i:03d}", email=f"c{i:03d}@example.com") for i in range(n)]


# ---------------------------------------------------------------- duplicates and crashes


@pytest.mark.parametrize("same_batch", [True, False], ids=["same-batch", "after-completion"])
async def test_duplicate_publication_sends_once(h: Harness, same_batch: bool) -> None:
    # given an intent whose message is on the queue twice
    key = await h.notify("ship-1:c1")
    duplicate = OutgoingMessage(message_id=key, body=Message(key=key).encode())
    first, second = h.worker("w1"), h.worker("w2")
    if same_batch:
        await h.rt.transport.publish(EMAIL, [duplicate], now=h.clock.now())

    # when workers handle both copies
    received = await h.run_once(first)
    if not same_batch:
        await h.rt.transport.publish(EMAIL, [duplicate], now=h.clock.now())
    else:
        # the copy that met a live lease comes back once that lease would have ended
        h.clock.advance(h.rt.settings.worker.lease_s + 1)
    await h.run_once(second)

    # then the sandbox was asked once and accepted once; the ledger saw the duplicate
    assert received == (2 if same_batch else 1)
    stats = h.stats()
    assert (stats["requests"], stats["accepted_keys"], stats["keys_accepted_twice"]) == (1, 1, 0)
    types = await h.event_types(key)
    assert types.count("duplicate_observed") == 1
    assert types.count("claimed") == 1
    assert (await h.intent(key)).state is State.ACCEPTED
    assert second.stats.sent == 0 and second.stats.duplicates == 1
    assert await h.queue_total() == 0


@pytest.mark.parametrize(("a_started", "a_sent"), [(False, False), (True, False), (True, True)],
                         ids=["died-before-start", "died-after-start", "died-after-send"])
async def test_lease_expiry_hands_the_message_to_another_worker_once(
    h: Harness, a_started: bool, a_sent: bool
) -> None:
    # given worker A claimed an intent and then died (it never finishes)
    key = await h.notify("ship-2:c1")
    assert len(await abandon_claim(h, owner="worker-A")) == 1
    if a_started:
        # ... once it had marked its send started (right before a request leaves)
        claimed = await h.intent(key)
        assert await h.rt.store.intent_mark_started(
            [(key, claimed.lease_token)], owner="worker-A", now=h.clock.now()) == {key}
    if a_sent:
        # ... after its request reached the provider, before it could record the answer
        intent = await h.intent(key)
        await h.provider.send(SendRequest(key=key, channel=EMAIL, to=intent.address,
                                          template=intent.template, data_json=intent.data,
                                          recipient_id=intent.recipient_id))
    settings = h.rt.settings.worker
    assert settings.visibility_s > settings.lease_s

    # when the lease and the message's visibility run out, the reconciler sweeps and
    # worker B handles the redelivered message
    h.clock.advance(settings.visibility_s + 1)
    await h.reconcile()
    swept = await h.intent(key)
    b = h.worker("worker-B")
    await h.drive(b)

    # then the provider accepted the key exactly once: a send that started is uncertain
    # (settled by lookup), a claim whose send never started is simply released
    assert swept.state is (State.UNCERTAIN if a_started else State.RETRYABLE)
    assert swept.lease_owner is None
    assert ("lease_expired" if a_started else "released") in await h.event_types(key)
    stats = h.stats()
    assert (stats["requests"], stats["accepted_keys"], stats["keys_accepted_twice"]) == (1, 1, 0)
    final = await h.intent(key)
    assert final.state is State.ACCEPTED
    assert final.receipt == h.accepted_by_sandbox(key)
    # A's send (if any) is found by lookup; otherwise B is the one that sends
    assert b.stats.sent == (0 if a_sent else 1)


# ---------------------------------------------------------------- rate limiting


@pytest.mark.parametrize("as_date", [False, True], ids=["seconds", "http-date"])
async def test_429_retry_after_pauses_the_whole_channel_until_then(
    make_harness: HarnessFactory, as_date: bool
) -> None:
    # given a provider that answers 429 with Retry-After: 5 s (or the HTTP-date 5 s ahead)
    h = await make_harness(sandbox={"rate_limit": 1.0, "retry_after_s": 5.0,
                                    "retry_after_date_share": 1.0 if as_date else 0.0})
    first = await h.notify("a")
    second = await h.notify("b", due_at=h.t0 + 2)

    # when worker 1 is refused at T0, the provider recovers, and worker 2 picks up work
    # that became due during the pause
    await h.run_once(h.worker("w1"))
    (refused,) = h.provider.sent
    assert refused.at == h.t0 and isinstance(refused.outcome, RateLimited)
    assert refused.outcome.retry_after_s == pytest.approx(5.0)
    h.configure()
    h.clock.set(h.t0 + 2)
    w2 = h.worker("w2")
    task = asyncio.create_task(w2.run_once())
    await h.guard(h.clock.sleeping.wait())

    # then worker 2 waits for the Retry-After: nothing reaches the provider before it
    assert h.clock.next_wake() == pytest.approx(h.t0 + 5)
    h.clock.set(h.t0 + 5 - 0.001)
    await asyncio.sleep(0)
    assert not task.done()
    assert h.stats()["requests"] == 1
    h.clock.set(h.t0 + 5)
    assert await h.guard(task) == 1
    await h.run_once(h.worker("w3"))  # the refused intent's own retry, due at T0 + 5

    assert windows(h) == {int(h.t0): 1, int(h.t0) + 5: 2}
    assert [s.at for s in h.provider.sent] == [h.t0, h.t0 + 5, h.t0 + 5]
    stats = h.stats()
    assert (stats["accepted_keys"], stats["keys_accepted_twice"]) == (2, 0)
    assert h.accepted_by_sandbox(first) and h.accepted_by_sandbox(second)
    assert (await h.intent(first)).failures == 0  # a 429 never spends the retry budget


async def test_429_without_retry_after_backs_off_with_jitter_not_a_tight_loop(
    make_harness: HarnessFactory,
) -> None:
    # given a provider that answers every request 429 without Retry-After
    h = await make_harness(sandbox={"rate_limit": 1.0, "retry_after_missing_share": 1.0})
    key = await h.notify("a")
    policy = h.rt.policy

    # when workers keep trying for a fake minute, each as soon as the intent is due
    pauses: list[float] = []
    while h.clock.now() < h.t0 + 60:
        before = len(h.provider.sent)
        await h.run_once(h.worker())
        assert len(h.provider.sent) == before + 1
        intent = await h.intent(key)
        assert intent.state is State.RETRYABLE and intent.next_attempt_at is not None
        pauses.append(intent.next_attempt_at - h.provider.sent[-1].at)
        h.clock.set(intent.next_attempt_at + 0.001)

    # then every pause is full-jitter backoff on the 429 streak, within [floor, cap]
    for streak, pause in enumerate(pauses, start=1):
        bound = min(policy.rate_limit_cap_s, 2 * policy.rate_limit_floor_s * 2 ** (streak - 1))
        assert policy.rate_limit_floor_s <= pause <= max(bound, policy.rate_limit_floor_s)
    assert len(set(pauses)) == len(pauses)  # jittered, not a fixed step
    times = [s.at for s in h.provider.sent]
    assert all(b - a >= policy.rate_limit_floor_s for a, b in itertools.pairwise(times))
    stats = h.stats()
    assert stats["requests"] == stats["refused_injected"] == len(pauses)
    # no tight loop: never more than 1/floor a second, and the streak makes it sparse
    assert max(windows(h).values()) <= 1 / policy.rate_limit_floor_s
    assert stats["requests"] <= 20
    assert (await h.intent(key)).failures == 0
    state = await h.rt.store.pacer_read(EMAIL)
    assert state is not None and state["streak"] == len(pauses)


async def test_other_recipients_keep_progressing_while_one_backs_off(
    make_harness: HarnessFactory,
) -> None:
    # given one address the provider keeps failing (503) and four good ones
    h = await make_harness(sandbox={"fail_addresses": ["stuck@example.com"]})
    stuck = await h.notify("stuck", address="stuck@example.com")
    good = [await h.notify(f"ok-{i}") for i in range(4)]
    w = h.worker()

    # when one batch handles them all
    await h.run_once(w)

    # then the good ones are accepted while the stuck one backs off
    assert h.stats()["accepted_keys"] == 4
    assert all(h.accepted_by_sandbox(k) for k in good)
    backing_off = await h.intent(stuck)
    assert backing_off.state is State.RETRYABLE and backing_off.failures == 1
    assert backing_off.next_attempt_at is not None and backing_off.next_attempt_at > h.clock.now()

    # and new work keeps flowing while it waits
    late = [await h.notify(f"late-{i}") for i in range(3)]
    await h.run_once(w)
    assert all(h.accepted_by_sandbox(k) for k in late)
    assert h.stats()["server_errors"] == 1  # the stuck one was not asked again before due

    # finally the stuck one spends its budget; nobody else was held back
    await h.drive(w)
    stats = h.stats()
    max_failures = h.rt.policy.max_failures
    assert (stats["accepted_keys"], stats["keys_accepted_twice"]) == (7, 0)
    assert stats["server_errors"] == max_failures
    assert stats["requests"] == 7 + max_failures
    assert (await h.intent(stuck)).state is State.DEAD


async def test_spent_retry_budget_dead_letters_with_the_reason(
    make_harness: HarnessFactory,
) -> None:
    # given an address the provider always answers 503, and a budget of 3 failures
    h = await make_harness(sandbox={"fail_addresses": ["down@example.com"]},
                           settings={"retry": {"max_failures": 3}})
    key = await h.notify("a", address="down@example.com")
    w = h.worker()

    # when the worker tries each time the intent is due
    for attempt in range(1, 4):
        await h.run_once(w)
        intent = await h.intent(key)
        assert intent.failures == attempt
        if attempt < 3:
            assert intent.state is State.RETRYABLE and intent.next_attempt_at is not None
            h.clock.set(intent.next_attempt_at + 0.001)

    # then it is dead, with the reason, in the ledger and in the dead-letter list
    dead = await h.intent(key)
    assert dead.state is State.DEAD and dead.disposition == "dead"
    assert dead.reason == ("retry budget spent after 3 transient failures: "
                           "HTTP 503: service unavailable for this recipient")
    letters = await h.rt.transport.dead_letters(EMAIL)
    assert [(d.message_id, d.reason) for d in letters] == [(key, dead.reason)]
    assert (await h.events(key))[-1].type == "dead"
    stats = h.stats()
    assert (stats["requests"], stats["server_errors"], stats["accepted_keys"]) == (3, 3, 0)

    # and nothing sends it again: an hour of sweeps and polls later the count is the same
    for _ in range(6):
        h.clock.advance(600)
        await h.reconcile()
        await h.run_once(w)
    assert h.stats()["requests"] == 3
    assert h.accepted_by_sandbox(key) is None


# ---------------------------------------------------------------- schedules


@pytest.mark.parametrize("pass_while_paused", [True, False],
                         ids=["pass-ran-while-paused", "no-pass-until-resume"])
async def test_paused_schedule_does_not_backfill_and_replay_admits_the_missed_date(
    make_harness: HarnessFactory, pass_while_paused: bool
) -> None:
    # given a daily 09:00 UTC digest for three recipients, admitted and sent on day 1
    h = await make_harness(campaigns=[digest(people(3))])
    scheduler = h.rt.scheduler()
    store = h.rt.store
    w = h.worker()
    h.clock.set(at("2026-06-01 09:00:30"))
    assert (await scheduler.run_pass(now=h.clock.now())).admitted == 3
    await h.drive(w)

    # when the campaign is paused across day 2's 09:00 and resumed afterwards
    h.clock.set(at("2026-06-01 18:00:00"))
    await store.switch_set(scope="campaign", name="digest", paused=True, now=h.clock.now(),
                           reason="maintenance")
    if pass_while_paused:
        h.clock.set(at("2026-06-02 09:00:30"))
        paused = await scheduler.run_pass(now=h.clock.now())
        assert paused.paused == ["digest"] and paused.admitted == 0
    h.clock.set(at("2026-06-02 09:20:00"))
    await store.switch_set(scope="campaign", name="digest", paused=False, now=h.clock.now())
    resumed = [await scheduler.run_pass(now=h.clock.now() + s) for s in (60, 600, 1800)]

    # then day 2 is not backfilled
    assert sum(r.admitted for r in resumed) == 0
    day2 = await store.occurrence_get("digest/2026-06-02")
    assert day2 is not None and day2.status == "skipped" and day2.admitted == 0

    # when an operator replays exactly that date (twice: the second is a no-op)
    h.clock.set(at("2026-06-02 12:00:00"))
    replayed = await scheduler.replay("digest", "2026-06-02", now=h.clock.now())
    again = await scheduler.replay("digest", "2026-06-02", now=h.clock.now() + 60)
    # and day 3 runs on schedule
    h.clock.set(at("2026-06-03 09:00:30"))
    day3 = await scheduler.run_pass(now=h.clock.now())
    await h.drive(w)

    # then the missed date was admitted once, as a replay, and nothing else changed
    assert (replayed.admitted, again.admitted, day3.admitted) == (3, 0, 3)
    per_occurrence = Counter(i.occurrence for i in await h.all_intents())
    assert per_occurrence == {"digest/2026-06-01": 3, "digest/2026-06-02": 3,
                              "digest/2026-06-03": 3}
    replay_occurrence = await store.occurrence_get("digest/2026-06-02")
    assert replay_occurrence is not None
    assert (replay_occurrence.kind, replay_occurrence.status) == ("replay", "done")
    stats = h.stats()
    assert (stats["accepted_keys"], stats["keys_accepted_twice"], stats["requests"]) == (9, 0, 9)
    assert all(h.accepted_by_sandbox(f"digest/2026-06-02/{p.id}/email/v1") for p in people(3))


# ---------------------------------------------------------------- cancellation, provider events


async def test_cancel_after_publication_sends_nothing(h: Harness) -> None:
    # given a published intent (its message is on the queue)
    key = await h.notify("ship-9:c1")
    assert (await h.intent(key)).state is State.ENQUEUED
    assert await h.queue_total() == 1

    # when the caller cancels it by its notify key, then workers run
    cancelled = await h.rt.cancel("ship-9:c1")
    w = h.worker()
    await h.drive(w)

    # then the provider was never asked, and the message was consumed and discarded
    assert cancelled == {key: State.CANCELLED}
    assert h.stats()["requests"] == 0
    assert h.accepted_by_sandbox(key) is None
    final = await h.intent(key)
    assert (final.state, final.disposition) == (State.CANCELLED, "cancelled")
    types = await h.event_types(key)
    assert "enqueued" in types and "claimed" not in types
    assert types[-2:] == ["cancelled", "discarded"]


@pytest.mark.parametrize("stop", ["cancel", "expire"])
async def test_no_send_after_cancel_or_expiry_while_waiting_for_the_pacer(
    make_harness: HarnessFactory, stop: str
) -> None:
    # given the channel paused for 10 s by a 429, and an intent a worker has claimed and
    # holds while it waits for the pause to end
    h = await make_harness(sandbox={"rate_limit": 1.0, "retry_after_s": 10.0})
    await h.notify("first")
    await h.run_once(h.worker("w1"))
    h.configure()
    key = await h.notify("second", expires_at=h.t0 + 5)
    task = asyncio.create_task(h.worker("w2").run_once())
    await h.guard(h.clock.sleeping.wait())
    assert (await h.intent(key)).state is State.CLAIMED
    assert h.clock.next_wake() == pytest.approx(h.t0 + 10)

    # when the caller cancels it (or its freshness deadline at T0 + 5 passes) before the
    # send has started
    if stop == "cancel":
        assert await h.rt.cancel(key) == {key: State.CLAIMED}
    h.clock.set(h.t0 + 10)
    await h.guard(task)

    # then the send never starts (the store promises the worker sees a cancel first; an
    # expired intent is one whose deadline passed before a send started)
    assert h.accepted_by_sandbox(key) is None
    assert h.stats()["requests"] == 1
    await h.drive(h.worker("w3"))
    wanted = State.CANCELLED if stop == "cancel" else State.EXPIRED
    assert (await h.intent(key)).state is wanted


class StalledReads:
    """A worker's store whose next ``intent_get`` is stuck (e.g. its database thread waits
    behind a write on the busy timeout) while ``meanwhile`` runs elsewhere."""

    def __init__(self, inner: Any, meanwhile: Any) -> None:
        self.inner = inner
        self.meanwhile = meanwhile

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def intent_get(self, key: str) -> Any:
        meanwhile, self.meanwhile = self.meanwhile, None
        if meanwhile is not None:
            await meanwhile()
        return await self.inner.intent_get(key)


async def test_a_stalled_recheck_before_the_send_does_not_outlive_the_lease(
    make_harness: HarnessFactory,
) -> None:
    # given the channel paused for 10 s by a 429, and worker 2 holding a claim while it
    # waits for the pause (lease until T0 + 30)
    h = await make_harness(sandbox={"rate_limit": 1.0, "retry_after_s": 10.0})
    await h.notify("first")
    await h.run_once(h.worker("w1"))
    h.configure()
    key = await h.notify("second")
    lease_s = h.rt.settings.worker.lease_s
    w2, other = h.worker("w2"), h.worker("other-process")

    async def other_processes_take_over() -> None:
        # w2's read is stuck past its lease; the reconciler and another worker go on
        h.clock.set(h.t0 + lease_s + 1)
        await h.reconcile()
        h.clock.advance(h.rt.settings.reconciler.uncertain_after_s + 1)
        await h.reconcile()
        await h.run_once(other)

    w2.store = StalledReads(w2.store, other_processes_take_over)
    task = asyncio.create_task(w2.run_once())
    await h.guard(h.clock.sleeping.wait())

    # when the pause ends and w2 re-reads the intent before its send
    h.clock.set(h.t0 + 10)
    await h.guard(task)
    # (its send had not started, so the reconciler released the claim; w2 found the
    # lease gone at its start mark, sent nothing and handed the message back)
    assert w2.stats.sent == 0
    await h.run_once(other)

    # then only the worker that holds the lease sent it: the sandbox accepted it once
    assert (await h.intent(key)).state is State.ACCEPTED
    assert [s.key for s in h.provider.sent].count(key) == 1
    stats = h.stats()
    assert (stats["accepted_keys"], stats["keys_accepted_twice"]) == (2, 0)


async def test_bounce_after_acceptance_keeps_the_acceptance(h: Harness) -> None:
    # given an intent the provider accepted
    key = await h.notify("ship-3:c1")
    await h.drive(h.worker())
    accepted = await h.intent(key)
    assert accepted.state is State.ACCEPTED and accepted.receipt == h.accepted_by_sandbox(key)

    # when the provider reports a bounce an hour later
    h.clock.advance(3600)
    applied = await h.rt.store.intent_apply_many(
        [Change(key=key, from_state=State.ACCEPTED, to_state=State.BOUNCED, event="bounced",
                reason="mailbox does not exist")], now=h.clock.now())

    # then both are recorded: accepted_at and the receipt are kept beside the bounce
    assert applied == [key]
    bounced = await h.intent(key)
    assert bounced.state is State.BOUNCED
    assert bounced.accepted_at == accepted.accepted_at
    assert bounced.receipt == accepted.receipt == h.accepted_by_sandbox(key)
    events = await h.events(key)
    types = [e.type for e in events]
    assert types.index("accepted") < types.index("bounced")
    assert events[-1].at == h.clock.now() and events[-1].state == "bounced"
    assert await h.rt.store.intent_counts() == {EMAIL: {"bounced": 1}}
    # and a second copy of the same report is not applied twice
    assert await h.rt.store.intent_apply_many(
        [Change(key=key, from_state=State.ACCEPTED, to_state=State.BOUNCED, event="bounced")],
        now=h.clock.now()) == []
    stats = h.stats()
    assert (stats["requests"], stats["accepted_keys"], stats["keys_accepted_twice"]) == (1, 1, 0)


async def test_lost_ack_after_acceptance_redelivers_as_a_duplicate(h: Harness) -> None:
    # given acks that never reach the queue
    lossy = LostAcks(h.rt.transport)
    h.rt.transport = lossy
    key = await h.notify("ship-4:c1")

    # when a worker sends, commits the acceptance, and its ack is lost
    await h.run_once(h.worker("w1"))
    assert lossy.lost and (await h.intent(key)).state is State.ACCEPTED
    assert h.stats()["requests"] == 1
    # and the message comes back after its visibility timeout
    lossy.losing = False
    h.clock.advance(h.rt.settings.worker.visibility_s + 1)
    w2 = h.worker("w2")
    assert await h.run_once(w2) == 1

    # then the redelivery is recorded as a duplicate and acked, with no provider call
    assert (await h.event_types(key)).count("duplicate_observed") == 1
    assert w2.stats.sent == 0
    stats = h.stats()
    assert (stats["requests"], stats["accepted_keys"], stats["keys_accepted_twice"]) == (1, 1, 0)
    assert await h.queue_total() == 0


async def test_a_publish_whose_answer_is_lost_is_published_again_under_its_key(
    make_harness: HarnessFactory,
) -> None:
    # given a campaign of five, and a transport (a broker, not the store's own queue
    # table) whose first publish times out after the broker stored the messages
    h = await make_harness(campaigns=[digest(people(5))])
    flaky = PublishTimesOutOnce(h.rt.transport)
    h.rt.transport = flaky
    scheduler = h.rt.scheduler()
    scheduler.config = dataclasses.replace(scheduler.config, enqueue_in_store=False)
    h.clock.set(at("2026-06-01 09:00:30"))

    # when the pass admits them to the outbox and the relay publishes
    first = await scheduler.run_pass(now=h.clock.now())

    # then the relay published the page again under the same keys: enqueued once each,
    # and the duplicate copies are on the queue beside the first ones
    assert (first.admitted, first.published, flaky.timed_out) == (5, 5, 1)
    keys = sorted(i.key for i in await h.all_intents())
    assert {i.state for i in await h.all_intents()} == {State.ENQUEUED}
    for key in keys:
        assert (await h.event_types(key)).count("enqueued") == 1
    assert await h.queue_total() == 10

    # and a rerun creates no second intent; the workers deliver each once, judged by
    # the sandbox (the copies are duplicates observed, never sent)
    rerun = await scheduler.run_pass(now=h.clock.now() + 1)
    assert (rerun.admitted, rerun.published) == (0, 0)
    await h.drive(h.worker())
    stats = h.stats()
    assert (stats["requests"], stats["accepted_keys"], stats["keys_accepted_twice"]) == (5, 5, 0)
    observed = [(await h.event_types(k)).count("duplicate_observed") for k in keys]
    assert observed == [1] * 5
    assert len(await h.all_intents()) == 5


class PublishFailsWhileDown(TransportProxy):
    """Every publish reaches the broker, and its answer is lost, while ``down``."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.down = True
        self.attempts = 0

    async def publish(self, queue: str, messages: Sequence[OutgoingMessage], *,
                      now: float) -> None:
        await self.inner.publish(queue, messages, now=now)
        self.attempts += 1
        if self.down:
            raise TimeoutError("publish timed out (after the broker stored the messages)")


async def test_a_relay_that_cannot_publish_leaves_the_outbox_for_a_later_pass(
    make_harness: HarnessFactory,
) -> None:
    # given a campaign of five and a broker whose answers are lost for a while
    h = await make_harness(campaigns=[digest(people(5))])
    flaky = PublishFailsWhileDown(h.rt.transport)
    h.rt.transport = flaky
    scheduler = h.rt.scheduler()
    scheduler.config = dataclasses.replace(scheduler.config, enqueue_in_store=False)
    relay_lease = h.rt.settings.scheduler.relay_lease_s
    h.clock.set(at("2026-06-01 09:00:30"))

    # when the pass fails after its attempts, and is run again within the relay lease
    with pytest.raises(TimeoutError):
        await scheduler.run_pass(now=h.clock.now())
    first = sorted(i.key for i in await h.all_intents())
    attempts = flaky.attempts
    flaky.down = False
    h.clock.advance(1)
    rerun = await scheduler.run_pass(now=h.clock.now())

    # then the intents wait in the outbox, selected, with no second intent
    assert len(first) == 5 and attempts > 1 and rerun.admitted == 0
    assert sorted(i.key for i in await h.all_intents()) == first
    assert {i.state for i in await h.all_intents()} == {State.SELECTED}
    assert rerun.published == 0  # the publish lease of the failed pass still holds

    # when the relay lease runs out, the relay publishes them: enqueued exactly once
    h.clock.advance(relay_lease)
    relayed = await scheduler.run_pass(now=h.clock.now())
    later = await scheduler.run_pass(now=h.clock.now() + relay_lease + 1)
    assert (relayed.published, later.published) == (5, 0)
    for key in first:
        assert (await h.event_types(key)).count("enqueued") == 1
    assert await h.queue_total() == 5 * (attempts + 1)  # every lost answer had landed

    # and the workers deliver each once, judged by the sandbox
    await h.drive(h.worker())
    stats = h.stats()
    assert (stats["requests"], stats["accepted_keys"], stats["keys_accepted_twice"]) == (5, 5, 0)
    assert len(await h.all_intents()) == 5


@pytest.mark.parametrize("accepted", [True, False], ids=["lost-response", "timed-out"])
async def test_uncertain_is_resolved_by_lookup_without_a_resend(
    make_harness: HarnessFactory, accepted: bool
) -> None:
    # given a provider that accepts the message but whose reply is lost (or that times
    # out without accepting)
    fault = {"lost_response": 1.0} if accepted else {"timeout": 1.0}
    h = await make_harness(sandbox=fault, auto_advance=not accepted)
    key = await h.notify("ship-5:c1")
    w = h.worker()

    # when the worker sends and records the uncertain outcome
    await h.run_once(w)
    uncertain = await h.intent(key)
    assert uncertain.state is State.UNCERTAIN
    assert isinstance(h.provider.sent[0].outcome, Uncertain)
    assert h.stats()["accepted_keys"] == (1 if accepted else 0)
    h.configure()
    # and the reconciler looks the key up once the outcome is old enough
    h.clock.advance(h.rt.settings.reconciler.uncertain_after_s + 1)
    await h.reconcile()
    resolved = await h.intent(key)
    await h.drive(w)

    # then a lost response resolves to accepted with no re-send; a timeout is retried
    # under the same key; either way the sandbox accepted the key once
    final = await h.intent(key)
    stats = h.stats()
    if accepted:
        assert resolved.state is State.ACCEPTED
        assert "resolved_accepted" in await h.event_types(key)
        assert stats["requests"] == 1
    else:
        assert resolved.state is State.RETRYABLE
        assert "resolved_retry" in await h.event_types(key)
        assert stats["requests"] == 2
    assert final.state is State.ACCEPTED
    assert final.receipt == h.accepted_by_sandbox(key)
    assert (stats["accepted_keys"], stats["keys_accepted_twice"]) == (1, 0)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(("cron", "timezone", "field"), [
    ("61 * * * *", "UTC", "cron"),
    ("0 9 * *", "UTC", "cron"),
    ("every monday", "UTC", "cron"),
    ("0 9 * * *", "Mars/Olympus", "timezone"),
    ("0 9 * * *", "", "timezone"),
])
def test_bad_schedule_names_the_field(cron: str, timezone: str, field: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Schedule(cron, timezone)
    assert caught.value.field == field


@pytest.mark.parametrize(("override", "field"), [
    ({"cron": "61 * * * *"}, "campaigns.digest.cron"),
    ({"timezone": "Mars/Olympus"}, "campaigns.digest.timezone"),
])
def test_bad_campaign_settings_name_the_campaign_field(
    override: dict[str, str], field: str
) -> None:
    campaign = {"cron": "0 9 * * *", "channels": [EMAIL], "template": "t",
                "audience": {"python": "os:getcwd"}, **override}
    with pytest.raises(ConfigurationError) as caught:
        Settings.parse({"channels": {EMAIL: {}}, "campaigns": {"digest": campaign}})
    assert caught.value.field == field


async def test_a_bad_campaign_is_refused_before_the_store_is_opened(tmp_path: Any) -> None:
    # Given settings whose campaign audience cannot be imported (only build_runtime sees it)
    url = f"sqlite:///{tmp_path}/bad.db"
    settings = Settings.parse({
        "store": url, "channels": {EMAIL: {"provider": {"kind": "sandbox-twin"}}},
        "campaigns": {"digest": {"cron": "0 9 * * *", "channels": [EMAIL], "template": "t",
                                 "audience": {"python": "no_such_module_here:gen"}}}})
    # When the runtime is built, then the error names the campaign's field
    with pytest.raises(ConfigurationError) as caught:
        await build_runtime(settings)
    assert caught.value.field.startswith("campaigns.digest.audience")
    # and no database was opened (so none is left open)
    assert not (tmp_path / "bad.db").exists()


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"channels": ["pigeon"]}, "channels[0]"),
    ({"channels": [EMAIL, "pigeon"]}, "channels[1]"),
    ({"recipient": {"id": "c1", "phone": "+15550001"}}, "recipient.email"),
    ({"recipient": {"email": "a@example.com"}}, "recipient.id"),
    ({"data": {"blob": "x" * MAX_PAYLOAD_BYTES}}, "data"),
    ({"key": "has space"}, "key"),
    ({"template": ""}, "template"),
])
async def test_bad_notify_names_the_field_and_writes_nothing(
    h: Harness, kwargs: dict[str, Any], field: str
) -> None:
    # given an intent already accepted
    kept = await h.notify("kept")
    await h.drive(h.worker())
    request: dict[str, Any] = {"key": "bad-1", "recipient": {"id": "c1", "email": "a@x.example"},
                               "channels": [EMAIL], "template": "t"}
    request.update(kwargs)

    # when a bad notify arrives
    with pytest.raises(InvalidInput) as caught:
        await h.rt.notify(**request)

    # then the error names the field, nothing was written, nothing accepted is lost
    assert caught.value.field == field
    assert [i.key for i in await h.all_intents()] == [kept]
    assert (await h.intent(kept)).state is State.ACCEPTED
    assert await h.queue_total() == 0
    assert h.stats()["accepted_keys"] == 1


async def test_one_bad_request_in_a_batch_admits_none(h: Harness) -> None:
    good = NotifyRequest(key="ok", recipient={"id": "c1", "email": "c1@example.com"},
                         channels=[EMAIL], template="t")
    bad = NotifyRequest(key="bad", recipient={"id": "c2"}, channels=[EMAIL], template="t")
    with pytest.raises(InvalidInput) as caught:
        await h.rt.notify_many([good, bad])
    assert caught.value.field == "requests[1].recipient.email"
    assert await h.all_intents() == []
    assert await h.queue_total() == 0


async def test_poison_messages_are_dead_lettered_and_the_batch_goes_on(h: Harness) -> None:
    # given good intents, a non-JSON message and an unknown-version message, in one batch
    good = [await h.notify(f"ok-{i}") for i in range(3)]
    junk = [OutgoingMessage(message_id="junk-1", body="not json {"),
            OutgoingMessage(message_id="junk-2", body='{"v":99,"key":"ok-0:email"}'),
            OutgoingMessage(message_id="junk-3", body='["v", 1]')]
    await h.rt.transport.publish(EMAIL, junk, now=h.clock.now())
    w = h.worker()

    # when one worker batch takes all six
    assert await h.run_once(w) == 6

    # then the poison is dead-lettered with a reason naming the problem
    letters = {d.message_id: d.reason for d in await h.rt.transport.dead_letters(EMAIL)}
    assert set(letters) == {"junk-1", "junk-2", "junk-3"}
    assert "not JSON" in letters["junk-1"]
    assert "v: unknown message version 99" in letters["junk-2"]
    assert "not an object" in letters["junk-3"]
    # and the good ones in the same batch were delivered, once each
    assert all(h.accepted_by_sandbox(k) for k in good)
    stats = h.stats()
    assert (stats["requests"], stats["accepted_keys"], stats["keys_accepted_twice"]) == (3, 3, 0)
    assert w.stats.poison == 3
    assert await h.queue_total() == 0


async def test_an_intent_whose_only_message_is_poison_is_not_lost(h: Harness) -> None:
    # given an intent whose one message on the queue has a version this worker cannot read
    key = "orphan:email"
    now = h.clock.now()
    draft = IntentDraft(key=key, channel=EMAIL, recipient_id="c1", address="c1@example.com",
                        template="t", due_at=now)
    await h.rt.store.intent_admit([draft], now=now, publish_lease_until=now + 30)
    await h.rt.transport.publish(
        EMAIL, [OutgoingMessage(message_id=key, body=f'{{"v":2,"key":"{key}"}}')], now=now)
    await h.rt.store.intent_mark_enqueued([key], now=now)
    w = h.worker()

    # when the worker dead-letters it and time passes
    await h.run_once(w)
    (letter,) = await h.rt.transport.dead_letters(EMAIL)
    assert letter.message_id == key and "unknown message version 2" in letter.reason
    assert (await h.intent(key)).state is State.ENQUEUED
    h.clock.advance(h.rt.settings.reconciler.lost_after_s + 1)
    await h.drive(w)

    # then the reconciler republished it and the sandbox accepted it once
    assert "republished" in await h.event_types(key)
    assert (await h.intent(key)).state is State.ACCEPTED
    stats = h.stats()
    assert (stats["requests"], stats["accepted_keys"], stats["keys_accepted_twice"]) == (1, 1, 0)


async def test_a_scheduled_intent_whose_message_was_lost_comes_back_once_due(
        h: Harness) -> None:
    # given an intent due in an hour whose message never reached the queue
    key = "later:email"
    now = h.clock.now()
    draft = IntentDraft(key=key, channel=EMAIL, recipient_id="c1", address="c1@example.com",
                        template="t", due_at=now + 3600)
    await h.rt.store.intent_admit([draft], now=now, publish_lease_until=now + 30)
    await h.rt.store.intent_mark_enqueued([key], now=now)
    w = h.worker()

    # when the reconciler passes long after it went missing, but before it is due
    h.clock.advance(h.rt.settings.reconciler.lost_after_s * 5)
    await h.run_once(w)
    await h.reconcile()

    # then it is left alone: nothing is on the queue, nothing was sent
    assert "republished" not in await h.event_types(key)
    assert await h.queue_total() == 0
    # and once it is due the next pass republishes it, and it is sent once
    h.clock.advance(3600)
    await h.drive(w)
    assert "republished" in await h.event_types(key)
    assert (await h.intent(key)).state is State.ACCEPTED
    stats = h.stats()
    assert (stats["requests"], stats["accepted_keys"], stats["keys_accepted_twice"]) == (1, 1, 0)


class CommitFailsOnce:
    """A store whose first outcome commit fails (briefly locked); all else passes through."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def intent_apply_many(self, changes: Any, **kw: Any) -> list[str]:
        self.calls += 1
        if self.calls == 1:
            raise StoreError("database is locked")
        result: list[str] = await self.inner.intent_apply_many(changes, **kw)
        return result


async def test_a_failed_outcome_commit_is_kept_and_retried_not_lost(h: Harness) -> None:
    # given a sent message whose outcome commit fails once (the store is briefly locked)
    key = await h.notify("ship-9:c9")
    worker = h.worker("w1")
    worker.store = CommitFailsOnce(worker.store)  # type: ignore[assignment]

    # when the worker handles it, the commit fails, and nothing is acked
    with pytest.raises(StoreError):
        await h.run_once(worker)
    assert await h.queue_total() == 1

    # then the kept outcome is committed by the next flush: one send, accepted, acked
    await worker.flush()
    assert (await h.intent(key)).state is State.ACCEPTED
    assert await h.queue_total() == 0
    stats = h.stats()
    assert (stats["requests"], stats["accepted_keys"]) == (1, 1)


class CommitLandsThenStalls:
    """A store whose first outcome commit lands, then keeps the caller waiting (the
    answer is still on its way back) until ``answer`` is set."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.landed = asyncio.Event()
        self.answer = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def intent_apply_many(self, changes: Any, **kw: Any) -> list[str]:
        result: list[str] = await self.inner.intent_apply_many(changes, **kw)
        if not self.landed.is_set():
            self.landed.set()
            await self.answer.wait()
        return result


async def test_a_stop_during_an_outcome_commit_lets_it_finish(
        make_harness: HarnessFactory) -> None:
    # given a worker whose outcome commit has landed but not yet answered
    h = await make_harness()
    key = await h.notify("ship-10:c10")
    worker = h.worker("w1")
    store = CommitLandsThenStalls(worker.store)
    worker.store = store  # type: ignore[assignment]
    running = asyncio.create_task(worker.run())

    await h.run_until(store.landed.is_set)

    # when the worker is stopped right then, and the answer arrives afterwards
    worker.stop()
    for _ in range(20):
        await asyncio.sleep(0)
    store.answer.set()
    await h.guard(running)

    # then the commit counts: no "lease lost", the message is acked, one send
    assert "lease_lost" not in await h.event_types(key)
    assert worker.stats.lease_lost == 0
    assert (await h.intent(key)).state is State.ACCEPTED
    assert await h.queue_total() == 0
    assert h.stats()["requests"] == 1
