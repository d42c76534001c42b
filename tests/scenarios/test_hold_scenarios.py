"""Delivery holds and bulk actions: given, when, then — judged by the sandbox's counts.

A hold parks what it covers with no send and no message left to churn; a release
delivers every parked intent once; expiry goes on while held and is reported; bulk
actions count first, move only unsent intents, and never delete one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.admission.audience import GeneratorAudience
from tidings.admission.campaign import Campaign
from tidings.admission.rollout import declare_paused
from tidings.core.cron import Schedule
from tidings.core.errors import InvalidInput
from tidings.core.model import IntentDraft, Recipient
from tidings.core.states import State
from tidings.delivery import hold_gate
from tidings.operate import bulk, holds
from tidings.stores.base import Change

if TYPE_CHECKING:
    from conftest import Harness, HarnessFactory

EMAIL = "email"
OPERATOR = "cli:ada"


async def admit(h: Harness, campaign: str | None, n: int, *, occurrence: str | None = None,
                expires_in_s: float | None = 3600.0, prefix: str | None = None) -> list[str]:
    """``n`` intents of ``campaign`` admitted due now, their messages on the queue."""
    now = h.clock.now()
    tag = prefix or campaign or "one-off"
    drafts = [IntentDraft(
        key=f"{tag}/{i:03d}/email", channel=EMAIL, recipient_id=f"c{i:03d}",
        address=f"c{i:03d}@example.com", template="t", due_at=now,
        expires_at=None if expires_in_s is None else now + expires_in_s,
        campaign=campaign, occurrence=occurrence) for i in range(n)]
    return await h.rt.store.intent_admit(drafts, now=now, enqueue=h.rt.enqueue_in_store)


async def states(h: Harness, keys: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in keys:
        state = (await h.intent(key)).state.value
        counts[state] = counts.get(state, 0) + 1
    return counts


async def drain(h: Harness, *, rounds: int = 5) -> None:
    worker = h.worker()
    for _ in range(rounds):
        await h.run_once(worker)


# ---------------------------------------------------------------- holds


async def test_a_held_campaign_is_parked_unsent_and_release_delivers_it_once(
    h: Harness,
) -> None:
    # given two campaigns queued, and one of them held
    digest = await admit(h, "digest", 30)
    other = await admit(h, "other", 5)
    made = await holds.hold(h.rt.store, scope="campaign", name="digest", by=OPERATOR,
                            now=h.clock.now(), reason="template bug")
    assert made is not None and made.held_by == OPERATOR

    # when workers run
    await drain(h)

    # then only the other campaign was sent; the held one is parked, its messages acked
    stats = h.stats()
    assert (stats["requests"], stats["accepted_keys"]) == (5, 5)
    assert await states(h, digest) == {"parked": 30}
    assert await states(h, other) == {"accepted": 5}
    assert await h.queue_total() == 0

    # and neither time nor the reconciler's lost-message sweep undoes the hold
    h.clock.advance(h.rt.settings.reconciler.lost_after_s * 3)
    await h.reconcile()
    await drain(h)
    assert await h.queue_total() == 0
    assert h.stats()["requests"] == 5
    assert await states(h, digest) == {"parked": 30}

    # when the hold is released (in batches smaller than the campaign)
    done = await holds.release(h.rt.store, h.rt.transport, scope="campaign", name="digest",
                               by="cli:grace", now=h.clock.now(), batch=7)

    # then every parked intent is delivered exactly once
    assert (done.republished, done.expired, done.still_held) == (30, 0, 0)
    await h.drive(h.worker())
    stats = h.stats()
    assert (stats["accepted_keys"], stats["keys_accepted_twice"]) == (35, 0)
    assert await states(h, digest) == {"accepted": 30}
    # and the hold and its release are audit events naming who did them
    trail = await h.rt.store.events_for("hold/campaign/digest")
    assert [(e.type, e.worker, e.detail) for e in trail] == [
        ("hold", OPERATOR, "template bug"), ("hold_released", "cli:grace", None)]
    types = await h.event_types(digest[0])
    assert types.index("parked") < types.index("released") < types.index("accepted")


async def test_holding_twice_is_one_hold_and_releasing_nothing_is_harmless(h: Harness) -> None:
    first = await holds.hold(h.rt.store, scope="channel", name=EMAIL, by=OPERATOR,
                             now=h.clock.now())
    again = await holds.hold(h.rt.store, scope="channel", name=EMAIL, by="cli:other",
                             now=h.clock.now() + 1)
    assert first is not None and again is None
    assert [x.held_by for x in await h.rt.store.hold_all()] == [OPERATOR]
    assert [e.type for e in await h.rt.store.events_for("hold/channel/email")] == ["hold"]
    await holds.release(h.rt.store, h.rt.transport, scope="channel", name=EMAIL, by=OPERATOR,
                        now=h.clock.now())
    done = await holds.release(h.rt.store, h.rt.transport, scope="channel", name=EMAIL,
                               by=OPERATOR, now=h.clock.now())
    assert done.released is None and done.republished == 0
    assert await h.rt.store.hold_all() == []
    with pytest.raises(InvalidInput) as refused:
        await holds.hold(h.rt.store, scope="tenant", name="x", by=OPERATOR, now=h.clock.now())
    assert refused.value.field == "scope"


async def test_an_intent_expiring_while_held_becomes_expired_and_is_reported(
    h: Harness,
) -> None:
    # given a held campaign, some of whose intents go stale in 10 minutes
    stale = await admit(h, "digest", 4, expires_in_s=600.0, prefix="stale")
    fresh = await admit(h, "digest", 3, expires_in_s=86_400.0, prefix="fresh")
    await holds.hold(h.rt.store, scope="campaign", name="digest", by=OPERATOR,
                     now=h.clock.now())
    await drain(h)
    assert await states(h, stale + fresh) == {"parked": 7}

    # when the deadline passes while held and the holds sweep runs
    h.clock.advance(601.0)
    assert await holds.expire_parked(h.rt.store, now=h.clock.now(), limit=3) == 3
    assert await holds.expire_parked(h.rt.store, now=h.clock.now()) == 1
    assert await holds.expire_parked(h.rt.store, now=h.clock.now()) == 0

    # then they are expired with their reason, and status counts them
    assert await states(h, stale) == {"expired": 4}
    assert (await h.intent(stale[0])).reason == "its freshness deadline passed while held"
    report = await holds.report(h.rt.store, await h.rt.store.event_counts())
    assert report.expired_while_held == 4
    assert [(a.scope, a.name, a.parked) for a in report.active] == [("campaign", "digest", 3)]

    # and the release delivers the fresh ones only, once
    done = await holds.release(h.rt.store, h.rt.transport, scope="campaign", name="digest",
                               by=OPERATOR, now=h.clock.now())
    assert (done.republished, done.expired) == (3, 0)
    await h.drive(h.worker())
    assert h.stats()["accepted_keys"] == 3
    assert sorted(k for k in stale if h.accepted_by_sandbox(k)) == []


async def test_an_intent_stale_before_any_worker_saw_it_held_is_expired_while_held(
    h: Harness,
) -> None:
    keys = await admit(h, "digest", 2, expires_in_s=10.0)
    await holds.hold(h.rt.store, scope="campaign", name="digest", by=OPERATOR,
                     now=h.clock.now())
    h.clock.advance(11.0)
    await drain(h)
    assert await states(h, keys) == {"expired": 2}
    assert "expired_while_held" in await h.event_types(keys[0])
    assert (await h.queue_total(), h.stats()["requests"]) == (0, 0)
    report = await holds.report(h.rt.store, await h.rt.store.event_counts())
    assert report.expired_while_held == 2


async def test_a_release_expires_what_went_stale_before_any_sweep(h: Harness) -> None:
    keys = await admit(h, "digest", 2, expires_in_s=60.0)
    await holds.hold(h.rt.store, scope="campaign", name="digest", by=OPERATOR,
                     now=h.clock.now())
    await drain(h)
    h.clock.advance(61.0)
    done = await holds.release(h.rt.store, h.rt.transport, scope="campaign", name="digest",
                               by=OPERATOR, now=h.clock.now())
    assert (done.republished, done.expired) == (0, 2)
    assert await states(h, keys) == {"expired": 2}
    assert h.stats()["requests"] == 0


async def test_an_intent_under_two_holds_stays_parked_until_both_are_released(
    h: Harness,
) -> None:
    occ = "digest/2026-06-01"
    keys = await admit(h, "digest", 4, occurrence=occ)
    loose = await admit(h, None, 2)
    await holds.hold(h.rt.store, scope="occurrence", name=occ, by=OPERATOR, now=h.clock.now())
    await drain(h)
    assert await states(h, keys) == {"parked": 4}
    assert await states(h, loose) == {"accepted": 2}
    await holds.hold(h.rt.store, scope="channel", name=EMAIL, by=OPERATOR, now=h.clock.now())

    done = await holds.release(h.rt.store, h.rt.transport, scope="occurrence", name=occ,
                               by=OPERATOR, now=h.clock.now())
    assert (done.republished, done.still_held) == (0, 4)
    await drain(h)
    assert await states(h, keys) == {"parked": 4}

    done = await holds.release(h.rt.store, h.rt.transport, scope="channel", name=EMAIL,
                               by=OPERATOR, now=h.clock.now())
    assert done.republished == 4
    await h.drive(h.worker())
    assert (h.stats()["accepted_keys"], h.stats()["keys_accepted_twice"]) == (6, 0)


async def test_an_intent_parked_as_its_hold_was_released_is_resumed_by_the_sweep(
    h: Harness,
) -> None:
    # given a worker that read a hold, and a release that ran before its park landed
    keys = await admit(h, "digest", 3)
    covered = await admit(h, "other", 2)
    await holds.hold(h.rt.store, scope="campaign", name="other", by=OPERATOR,
                     now=h.clock.now())
    claims = await h.rt.store.intent_claim_many(keys + covered, owner="w", lease_s=30.0,
                                                now=h.clock.now())
    await h.rt.store.intent_apply_many([Change(
        key=c.key, from_state=State.CLAIMED, to_state=State.PARKED, event="parked",
        lease_token=c.token) for c in claims], now=h.clock.now())
    # when the holds sweep runs
    h.clock.advance(5.0)
    done = await holds.sweep(h.rt.store, h.rt.transport, now=h.clock.now(), worker="w")
    # then what no hold covers is back on its way, and the held campaign stays parked
    assert (done.expired, done.resumed) == (0, 3)
    assert await states(h, keys) == {"enqueued": 3}
    assert await states(h, covered) == {"parked": 2}
    again = await holds.sweep(h.rt.store, h.rt.transport, now=h.clock.now(), worker="w")
    assert again.resumed == 0
    # and is delivered once (the claims above never acked their messages: they come back
    # too, and are acked as held or as duplicates)
    h.clock.advance(h.rt.settings.worker.visibility_s + 1)
    await drain(h)
    assert (h.stats()["accepted_keys"], h.stats()["keys_accepted_twice"]) == (3, 0)
    assert await states(h, keys) == {"accepted": 3}
    h.clock.advance(h.rt.settings.worker.lease_s + 1)  # a copy met in one batch waits
    await drain(h)
    assert await h.queue_total() == 0
    assert h.stats()["requests"] == 3
    assert await states(h, covered) == {"parked": 2}


async def test_a_worker_about_to_park_reads_the_holds_again(h: Harness) -> None:
    # given a worker whose cached holds still show a hold just released
    await holds.hold(h.rt.store, scope="campaign", name="digest", by=OPERATOR,
                     now=h.clock.now())
    worker = h.worker()
    assert worker.holds is not None
    assert len(await worker.holds.holds()) == 1
    await holds.release(h.rt.store, h.rt.transport, scope="campaign", name="digest",
                        by=OPERATOR, now=h.clock.now())
    keys = await admit(h, "digest", 2)
    # when it claims the campaign's intents within the cache's lifetime
    await h.run_once(worker)
    # then it sends them: the fresh read saw the release
    assert await states(h, keys) == {"accepted": 2}


async def test_a_hold_reaches_a_running_worker_within_the_gate_ttl(h: Harness) -> None:
    # given a worker that read the holds (none) just now
    worker = h.worker()
    first = await admit(h, "digest", 1, prefix="before")
    await h.run_once(worker)
    assert await states(h, first) == {"accepted": 1}
    # when a hold lands and more work arrives
    await holds.hold(h.rt.store, scope="campaign", name="digest", by=OPERATOR,
                     now=h.clock.now())
    later = await admit(h, "digest", 3, prefix="after")
    h.clock.advance(hold_gate.GATE_TTL_S)
    await h.run_once(worker)
    # then the same worker parks it
    assert await states(h, later) == {"parked": 3}
    assert h.stats()["requests"] == 1


# ---------------------------------------------------------------- bulk actions


async def test_a_dry_run_counts_and_changes_nothing(h: Harness) -> None:
    keys = await admit(h, "digest", 6)
    result = await bulk.run(h.rt.store, bulk.BulkRequest(
        action="dead-letter", by=OPERATOR, campaign="digest"), now=h.clock.now(),
        dry_run=True)
    assert (result.selected, result.changed, result.dry_run) == ({"enqueued": 6}, 0, True)
    assert await states(h, keys) == {"enqueued": 6}
    assert await h.rt.store.events_for("bulk/dead-letter/digest") == []


async def test_bulk_cancel_and_dead_letter_keep_every_intent_and_name_who(h: Harness) -> None:
    doomed = await admit(h, "digest", 5)
    kept = await admit(h, "other", 2)
    done = await bulk.run(h.rt.store, bulk.BulkRequest(
        action="cancel", by=OPERATOR, campaign="digest", reason="wrong audience"),
        now=h.clock.now(), batch=2)
    assert (done.selected, done.changed) == ({"enqueued": 5}, 5)
    assert await states(h, doomed) == {"cancelled": 5}
    intent = await h.intent(doomed[0])
    assert intent.reason == "wrong audience"
    (summary,) = await h.rt.store.events_for("bulk/cancel/digest")
    assert (summary.type, summary.worker) == ("bulk_cancel", OPERATOR)
    assert summary.detail == ("5 changed: campaign digest; states selected,enqueued,"
                              "retryable,parked,claimed; reason: wrong audience")
    # a message left on the queue is discarded, not a duplicate, and nothing is sent
    await h.drive(h.worker())
    assert (h.stats()["requests"], h.stats()["accepted_keys"]) == (2, 2)
    assert "duplicate_observed" not in await h.event_types(doomed[0])
    assert "discarded" in await h.event_types(doomed[0])
    assert await states(h, kept) == {"accepted": 2}
    # a second run finds nothing left to move
    again = await bulk.run(h.rt.store, bulk.BulkRequest(
        action="dead-letter", by=OPERATOR, campaign="digest"), now=h.clock.now())
    assert (again.selected, again.changed) == ({}, 0)


async def test_a_bulk_cancel_tells_claimed_intents_asked_apart_from_cancelled(
        h: Harness) -> None:
    keys = await admit(h, "digest", 3)
    [claim] = await h.rt.store.intent_claim_many([keys[0]], owner="w9", lease_s=30.0,
                                                 now=h.clock.now())
    assert claim.token is not None
    done = await bulk.run(h.rt.store, bulk.BulkRequest(
        action="cancel", by=OPERATOR, campaign="digest"), now=h.clock.now())
    # the claimed one is in a worker's hands: asked, not (yet) cancelled
    assert (done.changed, done.cancel_requested) == (2, 1)
    assert await states(h, keys) == {"cancelled": 2, "claimed": 1}
    assert (await h.intent(keys[0])).cancel_requested


async def test_a_bulk_action_on_an_occurrence_that_does_not_exist_is_refused(
        h: Harness) -> None:
    # checked where the selection is named (CLI, API, dashboard) with the hold check
    with pytest.raises(InvalidInput) as caught:
        await holds.check_target(h.rt.store, "occurrence", "digest/2099-01-01T00:00",
                                 channels=h.rt.channels, campaigns=[])
    assert caught.value.field == "occurrence"


async def test_bulk_dead_letter_of_a_held_campaign_reaches_its_parked_intents(
    h: Harness,
) -> None:
    keys = await admit(h, "digest", 4)
    await holds.hold(h.rt.store, scope="campaign", name="digest", by=OPERATOR,
                     now=h.clock.now())
    await drain(h)
    done = await bulk.run(h.rt.store, bulk.BulkRequest(
        action="dead-letter", by=OPERATOR, campaign="digest", states=("parked",)),
        now=h.clock.now())
    assert (done.selected, done.changed) == ({"parked": 4}, 4)
    assert await states(h, keys) == {"dead": 4}
    released = await holds.release(h.rt.store, h.rt.transport, scope="campaign",
                                   name="digest", by=OPERATOR, now=h.clock.now())
    assert released.republished == 0
    assert h.stats()["requests"] == 0


async def test_bulk_delay_holds_delivery_until_the_time_then_sends_once(h: Harness) -> None:
    keys = await admit(h, "digest", 3, expires_in_s=86_400.0)
    until = h.clock.now() + 3600.0
    done = await bulk.run(h.rt.store, bulk.BulkRequest(
        action="delay", by=OPERATOR, campaign="digest", until=until), now=h.clock.now())
    assert done.changed == 3
    assert {(await h.intent(k)).next_attempt_at for k in keys} == {until}
    await drain(h)
    h.clock.advance(1800.0)
    await h.reconcile()
    await drain(h)
    assert h.stats()["requests"] == 0
    h.clock.advance(1801.0)
    await h.drive(h.worker())
    assert (h.stats()["accepted_keys"], h.stats()["keys_accepted_twice"]) == (3, 0)


async def test_bulk_selects_by_age_and_state(h: Harness) -> None:
    old = await admit(h, "digest", 3, prefix="old")
    h.clock.advance(7200.0)
    new = await admit(h, "digest", 2, prefix="new")
    done = await bulk.run(h.rt.store, bulk.BulkRequest(
        action="cancel", by=OPERATOR, campaign="digest", older_than_s=3600.0,
        states=("enqueued",)), now=h.clock.now())
    assert done.changed == 3
    assert await states(h, old) == {"cancelled": 3}
    assert await states(h, new) == {"enqueued": 2}


@pytest.mark.parametrize(("request_", "field"), [
    (bulk.BulkRequest(action="purge", by=OPERATOR, campaign="d"), "action"),
    (bulk.BulkRequest(action="cancel", by=OPERATOR), "campaign"),
    (bulk.BulkRequest(action="cancel", by=OPERATOR, campaign="d", states=("accepted",)),
     "state"),
    (bulk.BulkRequest(action="delay", by=OPERATOR, campaign="d", states=("claimed",),
                      until=2e9), "state"),
    (bulk.BulkRequest(action="cancel", by=OPERATOR, campaign="d", states=("nope",)), "state"),
    (bulk.BulkRequest(action="delay", by=OPERATOR, campaign="d"), "until"),
    (bulk.BulkRequest(action="delay", by=OPERATOR, campaign="d", until=1.0), "until"),
    (bulk.BulkRequest(action="cancel", by=OPERATOR, campaign="d", until=2e9), "until"),
    (bulk.BulkRequest(action="cancel", by=OPERATOR, campaign="d", older_than_s=-1), "older_than"),
], ids=["unknown-action", "no-scope", "finished-state", "delay-claimed", "not-a-state",
        "delay-without-time", "delay-into-the-past", "time-on-a-cancel", "negative-age"])
async def test_bulk_refuses_a_request_naming_the_field(
    h: Harness, request_: bulk.BulkRequest, field: str,
) -> None:
    keys = await admit(h, "d", 2)
    with pytest.raises(InvalidInput) as refused:
        await bulk.run(h.rt.store, request_, now=h.clock.now())
    assert refused.value.field == field
    assert await states(h, keys) == {"enqueued": 2}


# ---------------------------------------------------------------- rollout


def _campaign(**kw: bool) -> Campaign:
    def source() -> list[Recipient]:
        return [Recipient(id="c1", email="c1@example.com")]

    return Campaign(name="digest", schedule=Schedule("0 9 * * *", "UTC"), channels=(EMAIL,),
                    template="digest", version=1,
                    audience=GeneratorAudience(lambda: iter(source())), **kw)


async def test_a_start_paused_campaign_starts_paused_once(make_harness: HarnessFactory) -> None:
    # given a campaign declared start_paused, seen for the first time
    h = await make_harness(campaigns=[_campaign(start_paused=True)])
    (switch,) = await h.rt.store.switch_all()
    assert (switch.scope, switch.name, switch.paused) == ("campaign", "digest", True)
    assert [e.type for e in await h.rt.store.events_for("admission/campaign/digest")] == [
        "start_paused"]
    # when an operator resumes it and a process starts again
    await h.rt.store.switch_set(scope="campaign", name="digest", paused=False,
                                now=h.clock.now(), reason="rollout checks passed")
    assert await declare_paused(h.rt.store, h.rt.campaigns, now=h.clock.now()) == []
    # then it stays resumed
    (switch,) = await h.rt.store.switch_all()
    assert not switch.paused
    # and a campaign not declared paused gets no switch at all
    other = await make_harness(campaigns=[_campaign()])
    assert await other.rt.store.switch_all() == []


async def test_the_rollout_runbook_delivers_one_per_recipient(
    make_harness: HarnessFactory,
) -> None:
    # given a campaign declared paused, seen for the first time
    people = [Recipient(id=f"c{i}", email=f"c{i}@example.com") for i in range(4)]
    campaign = Campaign(name="digest", schedule=Schedule("0 9 * * *", "UTC"),
                        channels=(EMAIL,), template="digest", version=1,
                        audience=GeneratorAudience(lambda: iter(people)), start_paused=True,
                        expires_after_s=7 * 86_400.0)
    h = await make_harness(campaigns=[campaign])
    scheduler = h.rt.scheduler()
    date = "2026-05-27"
    # when the operator holds delivery and replays a date twice (a duplicate on purpose)
    await holds.hold(h.rt.store, scope="campaign", name="digest", by=OPERATOR,
                     now=h.clock.now(), reason="rollout check")
    first = await scheduler.replay("digest", date, now=h.clock.now())
    second = await scheduler.replay("digest", date, now=h.clock.now())
    assert (first.admitted, second.admitted) == (4, 0)
    await drain(h)
    assert h.stats()["requests"] == 0
    # and releases it
    done = await holds.release(h.rt.store, h.rt.transport, scope="campaign", name="digest",
                               by=OPERATOR, now=h.clock.now())
    assert done.republished == 4
    await h.drive(h.worker())
    # then each recipient got one delivery, and the scheduled passes stay paused until
    # the operator resumes
    stats = h.stats()
    assert (stats["accepted_keys"], stats["keys_accepted_twice"]) == (4, 0)
    (switch,) = await h.rt.store.switch_all()
    assert switch.paused


# ---------------------------------------------------------------- any order of operations

TARGETS = [("campaign", "a"), ("campaign", "b"), ("channel", EMAIL), ("occurrence", "a/1")]
OPS = st.lists(st.one_of(
    st.tuples(st.sampled_from(["hold", "release"]), st.sampled_from(TARGETS)),
    st.tuples(st.sampled_from(["work", "sweep", "admit"]), st.none())), max_size=14)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
async def test_whatever_the_order_no_held_intent_is_sent_and_each_is_sent_once(
    make_harness: HarnessFactory, ops: list[tuple[str, tuple[str, str] | None]],
) -> None:
    h = await make_harness()  # one store per example
    try:
        keys = (await admit(h, "a", 3, occurrence="a/1", prefix="a1")
                + await admit(h, "a", 3, occurrence="a/2", prefix="a2")
                + await admit(h, "b", 3) + await admit(h, None, 2))
        worker = h.worker()
        active: set[tuple[str, str]] = set()
        for op, target in ops:
            if op == "hold" and target is not None:
                await holds.hold(h.rt.store, scope=target[0], name=target[1], by=OPERATOR,
                                 now=h.clock.now())
                active.add(target)
            elif op == "release" and target is not None:
                await holds.release(h.rt.store, h.rt.transport, scope=target[0],
                                    name=target[1], by=OPERATOR, now=h.clock.now())
                active.discard(target)
            elif op == "work":
                h.clock.advance(hold_gate.GATE_TTL_S)  # every worker has seen every hold
                before = len(h.provider.sent)
                await h.run_once(worker)
                for sent in h.provider.sent[before:]:
                    intent = await h.intent(sent.key)
                    names = {("channel", intent.channel), ("campaign", intent.campaign),
                             ("occurrence", intent.occurrence)}
                    assert not names & active, (sent.key, active)
            elif op == "sweep":
                h.clock.advance(h.rt.settings.reconciler.lost_after_s * 2)
                await h.reconcile()
                await holds.sweep(h.rt.store, h.rt.transport, now=h.clock.now())
            elif op == "admit":
                keys += await admit(h, "a", 1, occurrence="a/1", prefix=f"late{len(keys)}")
        for scope, name in sorted(active):
            await holds.release(h.rt.store, h.rt.transport, scope=scope, name=name,
                                by=OPERATOR, now=h.clock.now())
        await h.drive(h.worker())
        stats = h.stats()
        assert (stats["accepted_keys"], stats["keys_accepted_twice"]) == (len(keys), 0)
        assert await states(h, keys) == {"accepted": len(keys)}
    finally:
        await h.close()


async def test_a_bulk_delay_past_the_freshness_deadline_expires_them_at_the_deadline(
    h: Harness,
) -> None:
    # given intents that must go within the hour, delayed by an operator for a day
    keys = await admit(h, "digest", 3, expires_in_s=3600.0)
    deadline = h.clock.now() + 3600.0
    done = await bulk.run(h.rt.store, bulk.BulkRequest(
        action="delay", by=OPERATOR, campaign="digest", until=h.clock.now() + 86_400),
        now=h.clock.now())
    assert done.changed == 3
    # then each is due again at its deadline, not a day later
    assert {(await h.intent(k)).next_attempt_at for k in keys} == {deadline}

    # and once the deadline passes, they end expired, unsent, without waiting the day out
    h.clock.set(deadline + 1)
    await h.drive(h.worker())
    assert await states(h, keys) == {"expired": 3}
    assert h.stats()["requests"] == 0


async def test_a_bulk_dead_letter_is_undone_by_a_bulk_reopen_and_sent_once(h: Harness) -> None:
    keys = await admit(h, "digest", 4)
    await bulk.run(h.rt.store, bulk.BulkRequest(
        action="dead-letter", by=OPERATOR, campaign="digest"), now=h.clock.now())
    await h.drive(h.worker())  # the queued messages are discarded: their intents are dead
    assert await states(h, keys) == {"dead": 4} and h.stats()["requests"] == 0

    with pytest.raises(InvalidInput):  # a reopen publishes: no transport, no reopen
        await bulk.run(h.rt.store, bulk.BulkRequest(
            action="reopen", by=OPERATOR, campaign="digest"), now=h.clock.now())
    done = await bulk.run(h.rt.store, bulk.BulkRequest(
        action="reopen", by=OPERATOR, campaign="digest"), now=h.clock.now(),
        transport=h.rt.transport)
    assert (done.selected, done.changed) == ({"dead": 4}, 4)
    await h.drive(h.worker())
    assert await states(h, keys) == {"accepted": 4}
    assert (h.stats()["requests"], h.stats()["accepted_keys"]) == (4, 4)
