"""The Store conformance suite: every adapter must pass it unchanged.

Scenarios are written given / when / then; every ``now`` is explicit.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tidings.core.errors import InvalidTransition, StoreError
from tidings.core.model import DraftPage, Event, IntentDraft, Message
from tidings.core.states import State
from tidings.runtime import open_store
from tidings.stores.base import Change, ClaimKind, OccurrenceProgress, Store

T0 = 1_000_000.0
LEASE = 30.0


def draft(key: str, *, channel: str = "email", due_at: float = T0, data: str = "{}",
          occurrence: str | None = None, expires_at: float | None = None) -> IntentDraft:
    return IntentDraft(
        key=key, channel=channel, recipient_id=f"r-{key}", address=f"{key}@example.com",
        template="digest@v1", data=data, due_at=due_at, expires_at=expires_at,
        campaign="digest" if occurrence else None, occurrence=occurrence,
    )


async def enqueued(store: Store, *keys: str, channel: str = "email") -> None:
    await store.intent_admit([draft(k, channel=channel) for k in keys], now=T0)
    await store.intent_mark_enqueued(keys, now=T0 + 1)


async def claimed(store: Store, key: str, *, owner: str = "w1", now: float = T0 + 2) -> int:
    """Given an enqueued intent claimed by ``owner``; returns its lease token."""
    await enqueued(store, key)
    [claim] = await store.intent_claim_many([key], owner=owner, lease_s=LEASE, now=now)
    assert claim.kind is ClaimKind.CLAIMED and claim.token is not None
    return claim.token


async def in_state(store: Store, key: str, state: State, *, now: float = T0 + 3,
                   next_attempt_at: float | None = None) -> None:
    """Given an intent that a worker moved from claimed to ``state``."""
    token = await claimed(store, key)
    applied = await store.intent_apply_many([Change(
        key=key, from_state=State.CLAIMED, to_state=state, event=state.value,
        lease_token=token, next_attempt_at=next_attempt_at, receipt="rcpt",
    )], now=now)
    assert applied == [key]


async def event_types(store: Store, key: str) -> list[str]:
    return [e.type for e in await store.events_for(key)]


async def state_of(store: Store, key: str) -> State | None:
    intent = await store.intent_get(key)
    return None if intent is None else intent.state


# ---------------------------------------------------------------- lifecycle


async def test_migrated_store_is_current_and_migrating_again_applies_nothing(store: Store) -> None:
    assert await store.migrate(now=T0) == []
    assert await store.schema_version() >= 1
    await store.check_schema()


async def test_the_store_clock_reads_this_hosts_time_and_never_goes_back(store: Store) -> None:
    # Both servers here run on this host: the store's clock is this host's kernel clock
    # (the SQLite file's kernel stamp is as coarse as a scheduler tick).
    readings = []
    for _ in range(20):
        before = time.time()
        readings.append(await store.reference_time())
        after = time.time()
        assert before - 0.05 <= readings[-1] <= after + 0.05
    assert readings == sorted(readings)
    assert readings[-1] > readings[0]  # it moves: not one reading cached


# ---------------------------------------------------------------- admission


async def test_admit_inserts_selected_intents_with_one_event_each(store: Store) -> None:
    keys = await store.intent_admit(
        [draft("b", data='{"n":1}', expires_at=T0 + 60), draft("a", channel="sms")], now=T0
    )

    assert keys == ["b", "a"]
    b = await store.intent_get("b")
    assert b is not None
    assert (b.state, b.channel, b.data, b.due_at, b.expires_at) == (
        State.SELECTED, "email", '{"n":1}', T0, T0 + 60)
    assert (b.created_at, b.updated_at, b.selected_at) == (T0, T0, T0)
    assert (b.attempts, b.failures, b.lease_token, b.cancel_requested) == (0, 0, 0, False)
    assert (b.enqueued_at, b.accepted_at, b.finished_at, b.lease_owner) == (None, None, None, None)
    [event] = await store.events_for("a")
    assert (event.type, event.channel, event.state, event.at) == ("selected", "sms", "selected", T0)


async def test_admitting_the_same_key_again_is_a_no_op(store: Store) -> None:
    await store.intent_admit([draft("k1", data='{"v":1}')], now=T0)

    keys = await store.intent_admit([draft("k1", data='{"v":2}'), draft("k2")], now=T0 + 5)

    assert keys == ["k2"]
    k1 = await store.intent_get("k1")
    assert k1 is not None and (k1.data, k1.created_at) == ('{"v":1}', T0)
    assert await event_types(store, "k1") == ["selected"]
    assert await store.intent_counts() == {"email": {"selected": 2}}


async def test_a_key_drafted_twice_in_one_call_is_inserted_once(store: Store) -> None:
    keys = await store.intent_admit([draft("k"), draft("k"), draft("j")], now=T0)

    assert keys == ["k", "j"]
    assert await event_types(store, "k") == ["selected"]


async def test_a_large_page_is_admitted_whole(store: Store) -> None:
    drafts = [draft(f"k{i:05d}") for i in range(2_500)]

    keys = await store.intent_admit(drafts, now=T0)

    assert keys == [d.key for d in drafts]
    assert await store.event_counts() == {"email": {"selected": 2_500}}


async def test_admit_moves_occurrence_progress_in_the_same_transaction(store: Store) -> None:
    occ = "digest/2026-08-14"
    await store.occurrence_open(id=occ, campaign="digest", logical_at=T0,
                                logical_date="2026-08-14", kind="scheduled", now=T0)
    await store.intent_admit([draft("a", occurrence=occ)], now=T0)

    await store.intent_admit(
        [draft("a", occurrence=occ), draft("b", occurrence=occ)], now=T0 + 1,
        progress=OccurrenceProgress(occurrence=occ, high_water="r-b", members=3, skipped=1),
    )

    o = await store.occurrence_get(occ)
    assert o is not None
    assert (o.high_water, o.members, o.admitted, o.skipped, o.passes) == ("r-b", 3, 1, 1, 1)


async def test_a_page_admitted_by_two_schedulers_counts_once(store: Store) -> None:
    # Given an occurrence whose first page two schedulers drafted from the same mark
    occ = "digest/2026-08-14"
    await store.occurrence_open(id=occ, campaign="digest", logical_at=T0,
                                logical_date="2026-08-14", kind="scheduled", now=T0)
    page = [draft("a", occurrence=occ), draft("b", occurrence=occ)]

    def progress(after: str | None, high_water: str) -> OccurrenceProgress:
        return OccurrenceProgress(occurrence=occ, after=after, high_water=high_water,
                                  members=2)

    # When both write it, and the first moves on to the next page before the second lands
    first = await store.intent_admit(page, now=T0, progress=progress(None, "r-b"))
    await store.intent_admit([draft("c", occurrence=occ)], now=T0,
                             progress=progress("r-b", "r-c"))
    second = await store.intent_admit(page, now=T0, progress=progress(None, "r-b"))

    # Then each page counts once and the mark never moves back
    o = await store.occurrence_get(occ)
    assert o is not None
    assert (first, second) == (["a", "b"], [])
    assert (o.high_water, o.members, o.admitted) == ("r-c", 4, 3)


async def test_admit_with_progress_for_an_unknown_occurrence_writes_nothing(store: Store) -> None:
    with pytest.raises(StoreError):
        await store.intent_admit(
            [draft("a")], now=T0,
            progress=OccurrenceProgress(occurrence="nope", high_water="x", members=1),
        )

    assert await store.intent_get("a") is None
    assert await store.events_for("a") == []


async def test_pages_written_side_by_side_move_the_mark_in_page_order(store: Store) -> None:
    # Given an occurrence and two consecutive pages, the second written while the first
    # is still being written (it waits for the first before moving the progress)
    occ = "digest/2026-08-14"
    await store.occurrence_open(id=occ, campaign="digest", logical_at=T0,
                                logical_date="2026-08-14", kind="scheduled", now=T0)
    first = asyncio.ensure_future(store.intent_admit(
        [draft("a", occurrence=occ), draft("b", occurrence=occ)], now=T0,
        progress=OccurrenceProgress(occurrence=occ, after=None, high_water="r-b", members=2)))
    second = await store.intent_admit(
        [draft("c", occurrence=occ)], now=T0, progress_after=first,
        progress=OccurrenceProgress(occurrence=occ, after="r-b", high_water="r-c", members=1))

    # Then both count, and the mark is the second page's
    assert (await first, second) == (["a", "b"], ["c"])
    o = await store.occurrence_get(occ)
    assert o is not None
    assert (o.high_water, o.members, o.admitted) == ("r-c", 3, 3)


async def test_a_page_whose_previous_page_failed_writes_nothing(store: Store) -> None:
    occ = "digest/2026-08-14"
    await store.occurrence_open(id=occ, campaign="digest", logical_at=T0,
                                logical_date="2026-08-14", kind="scheduled", now=T0)
    failed = asyncio.ensure_future(store.intent_admit(
        [draft("a")], now=T0,
        progress=OccurrenceProgress(occurrence="nope", high_water="x", members=1)))

    with pytest.raises(StoreError):
        await store.intent_admit(
            [draft("c", occurrence=occ)], now=T0, progress_after=failed,
            progress=OccurrenceProgress(occurrence=occ, after="x", high_water="r-c",
                                        members=1))

    assert failed.done() and isinstance(failed.exception(), StoreError)
    assert await store.intent_get("c") is None and await store.intent_get("a") is None
    o = await store.occurrence_get(occ)
    assert o is not None and (o.high_water, o.members, o.admitted) == (None, 0, 0)


# ---------------------------------------------------------------- the outbox relay


async def test_admit_with_enqueue_writes_intents_and_their_messages_together(
    store: Store,
) -> None:
    # Given a store whose own queue table is the transport
    # When a page is admitted with enqueue, twice (a retried pass)
    new = await store.intent_admit([draft("k1"), draft("k2", channel="sms")], now=T0,
                                   enqueue=True)
    again = await store.intent_admit([draft("k1")], now=T0 + 1, enqueue=True)
    # Then the intents are born enqueued (one transition, one event), nothing admitted twice
    assert (new, again) == (["k1", "k2"], [])
    k1 = await store.intent_get("k1")
    assert k1 is not None and k1.state == State.ENQUEUED and k1.enqueued_at == T0
    assert k1.selected_at == T0
    assert await event_types(store, "k1") == ["enqueued"]
    [claim] = await store.intent_claim_many(["k1"], owner="w", lease_s=LEASE, now=T0 + 2)
    assert claim.kind is ClaimKind.CLAIMED


def digest_page(*ids: str, occurrence: str = "digest/2026-08-14") -> DraftPage:
    """A two-channel campaign page; a member whose id starts with "m" has no phone."""
    page = DraftPage(campaign="digest", occurrence=occurrence, template="digest/v1",
                     due_at=T0 - 5, expires_at=T0 + 60,
                     channels=[("email", "digest/2026-08-14/", "/email/v1"),
                               ("sms", "digest/2026-08-14/", "/sms/v1")])
    for i in ids:
        page.rows.append((0, i, f"{i}@example.com", f'{{"i":"{i}"}}'))
        if not i.startswith("m"):
            page.rows.append((1, i, "+15550000", "{}"))
    return page


@pytest.mark.parametrize("enqueue", [False, True])
async def test_a_draft_page_is_admitted_as_the_drafts_it_stands_for(
        store: Store, enqueue: bool) -> None:
    page = digest_page("a", "b\"q", "m1")

    keys = await store.intent_admit(page, now=T0, enqueue=enqueue)

    assert keys == page.keys() == [d.key for d in page] == [
        "digest/2026-08-14/a/email/v1", "digest/2026-08-14/a/sms/v1",
        'digest/2026-08-14/b"q/email/v1', 'digest/2026-08-14/b"q/sms/v1',
        "digest/2026-08-14/m1/email/v1"]
    state = State.ENQUEUED if enqueue else State.SELECTED
    for d in page:
        intent = await store.intent_get(d.key)
        assert intent is not None
        assert (intent.channel, intent.recipient_id, intent.address, intent.template,
                intent.data, intent.due_at, intent.expires_at, intent.campaign,
                intent.occurrence, intent.state) == (
            d.channel, d.recipient_id, d.address, d.template, d.data, d.due_at,
            d.expires_at, d.campaign, d.occurrence, state)
        assert await event_types(store, d.key) == [state.value]


async def test_one_draft_page_admitted_twice_at_once_is_admitted_once(store: Store) -> None:
    """Two schedulers on the same page at the same moment: one writes it, the other
    (waiting for the first's keys, then finding them) writes nothing."""
    page = digest_page(*(f"c{i:04d}" for i in range(500)))

    results = await asyncio.gather(store.intent_admit(page, now=T0, enqueue=True),
                                   store.intent_admit(page, now=T0, enqueue=True))

    assert sorted(results, key=len) == [[], page.keys()]
    assert await store.event_counts() == {"email": {"enqueued": 500},
                                          "sms": {"enqueued": 500}}


async def test_a_draft_page_keeps_text_that_needs_escaping_as_it_is(store: Store) -> None:
    page = digest_page("plain")
    page.rows.append((0, "r\\b", "tab\there@example.com", '{"t":"a\\nb\\\\c","x":"\r\n"}'))

    keys = await store.intent_admit(page, now=T0)

    assert keys == page.keys()
    intent = await store.intent_get(page[-1].key)
    assert intent is not None
    assert (intent.recipient_id, intent.address, intent.data) == (
        "r\\b", "tab\there@example.com", '{"t":"a\\nb\\\\c","x":"\r\n"}')


async def test_a_draft_page_with_its_messages_queues_one_per_intent(
        store: Store, store_url: str) -> None:
    page = digest_page("a", "b\"q", "m1")
    await store.intent_admit(page, now=T0, enqueue=True)

    same_store, queue = await open_store(store_url)  # the store's own queue table
    try:
        bodies = {queue_name: [Message.decode(r.body).key for r in await queue.receive(
                      queue_name, max_messages=10, visibility_s=30, now=T0)]
                  for queue_name in ("email", "sms")}
    finally:
        await queue.close()
        await same_store.close()
    assert bodies == {"email": [d.key for d in page if d.channel == "email"],
                      "sms": [d.key for d in page if d.channel == "sms"]}


async def test_a_draft_page_over_admitted_keys_inserts_only_the_new_ones(
        store: Store) -> None:
    page = digest_page("a", "b", "c")
    await store.intent_admit([page[1], page[4]], now=T0)

    keys = await store.intent_admit(page, now=T0 + 1, enqueue=True)

    assert keys == [d.key for i, d in enumerate(page) if i not in (1, 4)]
    earlier = await store.intent_get(page[1].key)
    assert earlier is not None and earlier.state == State.SELECTED
    assert await event_types(store, page[1].key) == ["selected"]


async def test_claim_publish_leases_due_selected_intents_oldest_first(store: Store) -> None:
    await store.intent_admit([draft("late", due_at=T0 + 50), draft("early", due_at=T0 - 10),
                              draft("mid", due_at=T0), draft("far", due_at=T0 + 500)], now=T0)
    await store.intent_admit([draft("leased", due_at=T0 - 20)], now=T0,
                             publish_lease_until=T0 + 10)

    items = await store.intent_claim_publish(now=T0, horizon_s=60, lease_s=30, limit=2)
    assert [(i.key, i.channel, i.due_at, i.state) for i in items] == [
        ("early", "email", T0 - 10, State.SELECTED), ("mid", "email", T0, State.SELECTED)]

    # Leased ones are skipped until their lease runs out.
    rest = await store.intent_claim_publish(now=T0 + 1, horizon_s=60, lease_s=30, limit=10)
    assert [i.key for i in rest] == ["late"]
    after = await store.intent_claim_publish(now=T0 + 31, horizon_s=60, lease_s=30, limit=10)
    assert [i.key for i in after] == ["leased", "early", "mid", "late"]


async def test_extend_publish_moves_only_the_lease_the_caller_still_holds(
        store: Store) -> None:
    await store.intent_admit([draft(k, due_at=T0 - 5) for k in ("a", "b", "c", "d")], now=T0)
    page = await store.intent_claim_publish(now=T0, horizon_s=0, lease_s=30, limit=10)
    assert [i.key for i in page] == ["a", "b", "c", "d"]
    await store.intent_mark_enqueued(["a"], now=T0 + 1)
    # "c"'s lease lapsed and another relay took it under a lease of its own.
    [taken] = await store.intent_claim_publish(now=T0 + 31, horizon_s=0, lease_s=30, limit=1)
    assert taken.key == "b"
    [taken] = await store.intent_claim_publish(now=T0 + 31, horizon_s=0, lease_s=40, limit=1)
    assert taken.key == "c"

    held = await store.intent_extend_publish(["d", "a", "c", "ghost", "d"],
                                             held_until=T0 + 30, lease_until=T0 + 61)

    assert held == ["d"]
    # "b" and "d" are leased until T0 + 61, "c" stays the other relay's until T0 + 71.
    assert await store.intent_claim_publish(now=T0 + 60, horizon_s=0, lease_s=5,
                                            limit=10) == []
    later = await store.intent_claim_publish(now=T0 + 62, horizon_s=0, lease_s=5, limit=10)
    assert [i.key for i in later] == ["b", "d"]
    assert await state_of(store, "a") is State.ENQUEUED
    assert await store.intent_extend_publish([], held_until=T0, lease_until=T0 + 1) == []


async def test_mark_enqueued_moves_selected_and_retryable_only(store: Store) -> None:
    await store.intent_admit([draft("sel"), draft("sel2")], now=T0)
    await in_state(store, "retry", State.RETRYABLE, next_attempt_at=T0 + 100)
    await in_state(store, "done", State.ACCEPTED)

    count = await store.intent_mark_enqueued(["sel", "retry", "done", "ghost", "sel"], now=T0 + 9)

    assert count == 2
    sel = await store.intent_get("sel")
    assert sel is not None and (sel.state, sel.enqueued_at, sel.updated_at) == (
        State.ENQUEUED, T0 + 9, T0 + 9)
    retry = await store.intent_get("retry")
    assert retry is not None and retry.state is State.ENQUEUED
    assert await state_of(store, "sel2") is State.SELECTED
    assert await state_of(store, "done") is State.ACCEPTED
    [*_, last] = await store.events_for("retry")
    assert (last.type, last.state, last.attempt, last.at) == ("enqueued", "enqueued", 1, T0 + 9)
    assert await event_types(store, "done") == ["selected", "enqueued", "claimed", "accepted"]
    # Enqueued intents are no longer the relay's.
    relay = await store.intent_claim_publish(now=T0 + 9, horizon_s=0, lease_s=5, limit=9)
    assert [i.key for i in relay] == ["sel2"]


# ---------------------------------------------------------------- claims


async def test_claim_takes_a_lease_and_records_a_claimed_event(store: Store) -> None:
    await enqueued(store, "k")

    [claim] = await store.intent_claim_many(["k"], owner="w1", lease_s=LEASE, now=T0 + 2,
                                            message_ids=["m-1"])

    assert claim.kind is ClaimKind.CLAIMED and claim.state is State.CLAIMED
    intent = claim.intent
    assert intent is not None and claim.token == intent.lease_token == 1
    assert (intent.state, intent.attempts, intent.lease_owner, intent.lease_expires_at) == (
        State.CLAIMED, 1, "w1", T0 + 2 + LEASE)
    assert await store.intent_get("k") == intent
    [*_, event] = await store.events_for("k")
    assert (event.type, event.state, event.attempt, event.worker, event.message_id) == (
        "claimed", "claimed", 1, "w1", "m-1")


async def test_find_narrows_to_one_lease_owner(store: Store) -> None:
    for key in ("a", "b", "c"):
        await enqueued(store, key)
    await store.intent_claim_many(["a", "b"], owner="w1", lease_s=LEASE, now=T0 + 2)
    await store.intent_claim_many(["c"], owner="w2", lease_s=LEASE, now=T0 + 2)

    mine = await store.intent_find(states=[State.CLAIMED], lease_owner="w1")
    theirs = await store.intent_find(states=[State.CLAIMED], lease_owner="w2")
    everyone = await store.intent_find(states=[State.CLAIMED])

    assert sorted(i.key for i in mine) == ["a", "b"]
    assert [i.key for i in theirs] == ["c"]
    assert len(everyone) == 3
    assert await store.intent_find(states=[State.CLAIMED], lease_owner="w3") == []


async def test_claim_reports_every_kind_in_key_order(store: Store) -> None:
    await store.intent_admit([draft("selected")], now=T0)
    await enqueued(store, "enqueued")
    await in_state(store, "done", State.ACCEPTED)
    await in_state(store, "uncertain", State.UNCERTAIN)
    await in_state(store, "later", State.RETRYABLE, next_attempt_at=T0 + 100)
    await in_state(store, "due", State.RETRYABLE, next_attempt_at=T0 + 10)
    await claimed(store, "theirs", owner="w2", now=T0 + 5)
    keys = ["selected", "enqueued", "done", "uncertain", "later", "due", "theirs", "ghost",
            "enqueued"]

    claims = await store.intent_claim_many(keys, owner="w1", lease_s=LEASE, now=T0 + 20,
                                           message_ids=[f"m-{k}" for k in keys])

    assert [c.key for c in claims] == keys
    assert [c.kind for c in claims] == [
        ClaimKind.CLAIMED, ClaimKind.CLAIMED, ClaimKind.DONE, ClaimKind.HELD, ClaimKind.NOT_DUE,
        ClaimKind.CLAIMED, ClaimKind.BUSY, ClaimKind.MISSING, ClaimKind.BUSY,
    ]
    by_key = {c.key: c for c in claims[:-1]}
    assert by_key["done"].state is State.ACCEPTED
    assert by_key["uncertain"].state is State.UNCERTAIN
    assert by_key["later"].retry_at == T0 + 100
    assert by_key["theirs"].retry_at == T0 + 5 + LEASE
    assert claims[-1].retry_at == T0 + 20 + LEASE  # the copy this very call just claimed
    assert by_key["ghost"].state is None and by_key["ghost"].intent is None
    due = by_key["due"].intent
    assert due is not None and (due.attempts, due.lease_token) == (2, 2)
    [*_, dup] = await store.events_for("done")
    assert (dup.type, dup.state, dup.worker, dup.message_id) == (
        "duplicate_observed", "accepted", "w1", "m-done")
    assert await event_types(store, "uncertain") == [
        "selected", "enqueued", "claimed", "uncertain"]
    theirs = await store.intent_get("theirs")
    assert theirs is not None and (theirs.lease_owner, theirs.attempts) == ("w2", 1)
    enq = await store.intent_get("enqueued")
    assert enq is not None and (enq.attempts, enq.lease_token) == (1, 1)


async def test_a_message_for_a_cancelled_intent_is_done_and_recorded_as_discarded(
    store: Store,
) -> None:
    await enqueued(store, "k")
    await store.intent_request_cancel("k", now=T0 + 2, reason="unsubscribed")

    [claim] = await store.intent_claim_many(["k"], owner="w1", lease_s=LEASE, now=T0 + 3,
                                            message_ids=["m-1"])

    assert (claim.kind, claim.state) == (ClaimKind.DONE, State.CANCELLED)
    [*_, event] = await store.events_for("k")
    assert (event.type, event.state, event.message_id) == ("discarded", "cancelled", "m-1")


async def test_a_retryable_intent_without_next_attempt_at_is_due(store: Store) -> None:
    await in_state(store, "k", State.RETRYABLE, next_attempt_at=None)

    [claim] = await store.intent_claim_many(["k"], owner="w1", lease_s=LEASE, now=T0 + 4)

    assert claim.kind is ClaimKind.CLAIMED


async def test_an_expired_lease_is_busy_until_the_reconciler_frees_it(store: Store) -> None:
    token = await claimed(store, "k", owner="w2", now=T0)

    [claim] = await store.intent_claim_many(["k"], owner="w1", lease_s=LEASE,
                                            now=T0 + LEASE + 1)

    assert (claim.kind, claim.retry_at) == (ClaimKind.BUSY, T0 + LEASE)
    intent = await store.intent_get("k")
    assert intent is not None and (intent.lease_owner, intent.lease_token) == ("w2", token)


async def test_renew_extends_live_leases_and_reports_lost_ones(store: Store) -> None:
    live = await claimed(store, "live", now=T0)
    stale = await claimed(store, "stale", now=T0)
    expired = await claimed(store, "expired", now=T0 - LEASE)
    other = await claimed(store, "other", owner="w2", now=T0)

    lost = await store.intent_renew_leases(
        [("live", live), ("stale", stale + 1), ("expired", expired), ("other", other),
         ("ghost", 1)],
        owner="w1", lease_s=60, now=T0 + 10,
    )

    assert lost == ["stale", "expired", "other", "ghost"]
    intent = await store.intent_get("live")
    assert intent is not None and intent.lease_expires_at == T0 + 70
    other_intent = await store.intent_get("other")
    assert other_intent is not None and other_intent.lease_expires_at == T0 + LEASE


async def test_mark_started_marks_only_live_claims_of_the_caller(store: Store) -> None:
    live = await claimed(store, "live", now=T0)
    stale = await claimed(store, "stale", now=T0)
    expired = await claimed(store, "expired", now=T0 - LEASE)
    other = await claimed(store, "other", owner="w2", now=T0)

    marked = await store.intent_mark_started(
        [("live", live), ("stale", stale + 1), ("expired", expired), ("other", other),
         ("ghost", 1)], owner="w1", now=T0 + 10)

    assert marked == {"live"}


def _ends(key: str, token: int, *, by: float) -> tuple[Change, Change]:
    """The reconciler's two changes for an ended lease: released when no send started
    under it, else uncertain."""
    release = Change(key=key, from_state=State.CLAIMED, to_state=State.RETRYABLE,
                     event="released", lease_token=token, lease_expired_by=by,
                     unstarted=True, next_attempt_at=by)
    uncertain = Change(key=key, from_state=State.CLAIMED, to_state=State.UNCERTAIN,
                       event="lease_expired", lease_token=token, lease_expired_by=by)
    return release, uncertain


async def test_an_unstarted_change_applies_only_where_no_send_started(store: Store) -> None:
    # Given two expired claims, the send of one of them marked started
    idle = await claimed(store, "idle", now=T0)
    sent = await claimed(store, "sent", now=T0)
    assert await store.intent_mark_started([("sent", sent)], owner="w1",
                                           now=T0 + 1) == {"sent"}
    by = T0 + LEASE + 1
    idle_release, _ = _ends("idle", idle, by=by)
    sent_release, sent_uncertain = _ends("sent", sent, by=by)

    # When the reconciler releases what did not start
    # Then only the unstarted claim is released; the started one waits for its uncertain
    assert await store.intent_apply_many([idle_release, sent_release], now=by) == ["idle"]
    assert await state_of(store, "idle") == State.RETRYABLE
    assert await store.intent_apply_many([sent_uncertain], now=by) == ["sent"]
    assert await state_of(store, "sent") == State.UNCERTAIN


async def test_a_claim_can_mark_its_send_started_at_once(store: Store) -> None:
    # Given an intent claimed with its send marked started by the claim itself
    await enqueued(store, "k")
    [claim] = await store.intent_claim_many(["k"], owner="w1", lease_s=LEASE, now=T0,
                                            started=True)
    assert claim.kind is ClaimKind.CLAIMED and claim.token is not None
    # When its lease runs out, the release of unstarted claims leaves it alone
    release, uncertain = _ends("k", claim.token, by=T0 + LEASE + 1)
    assert await store.intent_apply_many([release], now=T0 + LEASE + 1) == []
    # Then it is uncertain: its send may have left
    assert await store.intent_apply_many([uncertain], now=T0 + LEASE + 1) == ["k"]


async def test_a_start_marked_under_an_earlier_lease_does_not_count(store: Store) -> None:
    # Given an intent whose first send started, was retried, and is claimed again
    first = await claimed(store, "k", now=T0)
    assert await store.intent_mark_started([("k", first)], owner="w1", now=T0 + 1) == {"k"}
    assert await store.intent_apply_many([Change(
        key="k", from_state=State.CLAIMED, to_state=State.RETRYABLE, event="transient",
        lease_token=first, next_attempt_at=T0 + 2)], now=T0 + 2) == ["k"]
    [claim] = await store.intent_claim_many(["k"], owner="w2", lease_s=LEASE, now=T0 + 3)
    assert claim.kind is ClaimKind.CLAIMED and claim.token is not None
    # When the second lease runs out with no send started under it
    release, _ = _ends("k", claim.token, by=T0 + 3 + LEASE + 1)
    # Then it is released: the first attempt's start is not this lease's
    assert await store.intent_apply_many([release], now=T0 + 3 + LEASE + 1) == ["k"]
    assert await event_types(store, "k") == [
        "selected", "enqueued", "claimed", "transient", "claimed", "released"]


# ---------------------------------------------------------------- outcomes


async def test_apply_accepted_stores_the_receipt_and_clears_the_lease(store: Store) -> None:
    token = await claimed(store, "k")

    applied = await store.intent_apply_many([Change(
        key="k", from_state=State.CLAIMED, to_state=State.ACCEPTED, event="accepted",
        lease_token=token, receipt="rcpt-1", provider_request_id="req-1", worker="w1",
        message_id="m-1",
    )], now=T0 + 5)

    assert applied == ["k"]
    k = await store.intent_get("k")
    assert k is not None
    assert (k.state, k.accepted_at, k.receipt, k.provider_request_id) == (
        State.ACCEPTED, T0 + 5, "rcpt-1", "req-1")
    assert (k.finished_at, k.disposition, k.updated_at) == (T0 + 5, "accepted", T0 + 5)
    assert k.lease_owner is None and k.lease_expires_at is None
    [*_, e] = await store.events_for("k")
    assert (e.type, e.channel, e.at, e.state, e.attempt, e.worker, e.message_id,
            e.provider_request_id) == (
        "accepted", "email", T0 + 5, "accepted", 1, "w1", "m-1", "req-1")


async def test_an_uncertain_intent_keeps_when_it_may_be_settled(store: Store) -> None:
    """``next_attempt_at`` on an uncertain intent: not settled before (a gone worker's
    send may still land); an uncertain episode without one clears it."""
    await in_state(store, "later", State.UNCERTAIN, next_attempt_at=T0 + 20)
    await in_state(store, "now", State.UNCERTAIN)
    later, now = await store.intent_get("later"), await store.intent_get("now")
    assert later is not None and now is not None
    assert (later.next_attempt_at, now.next_attempt_at) == (T0 + 20, None)


async def test_apply_field_effects_of_retry_failure_and_terminal(store: Store) -> None:
    token = await claimed(store, "k")

    await store.intent_apply_many([Change(
        key="k", from_state=State.CLAIMED, to_state=State.RETRYABLE, event="transient_failure",
        lease_token=token, next_attempt_at=T0 + 60, count_failure=True, reason="503",
    )], now=T0 + 5)
    retry = await store.intent_get("k")
    assert retry is not None
    assert (retry.state, retry.next_attempt_at, retry.failures) == (State.RETRYABLE, T0 + 60, 1)
    assert retry.finished_at is None and retry.disposition is None
    [*_, e] = await store.events_for("k")
    assert (e.type, e.detail) == ("transient_failure", "503")

    await store.intent_apply_many([Change(
        key="k", from_state=State.RETRYABLE, to_state=State.ENQUEUED, event="republished",
        count_attempt=True, reset_failures=True, detail="reconciler",
    )], now=T0 + 70)
    again = await store.intent_get("k")
    assert again is not None
    assert (again.state, again.enqueued_at, again.attempts, again.failures) == (
        State.ENQUEUED, T0 + 70, 2, 0)

    await store.intent_apply_many([Change(
        key="k", from_state=State.ENQUEUED, to_state=State.EXPIRED, event="expired",
        reason="too late",
    )], now=T0 + 80)
    gone = await store.intent_get("k")
    assert gone is not None
    assert (gone.state, gone.disposition, gone.reason, gone.finished_at) == (
        State.EXPIRED, "expired", "too late", T0 + 80)


@pytest.mark.parametrize("text", ["\x00", "bad\x00gateway", "lone \ud800 half", "\udfff\x00"])
async def test_text_a_provider_wrote_that_no_store_holds_is_recorded_replaced(
        store: Store, text: str) -> None:
    # A plug-in provider's reason, receipt or request id is not a caller's input that
    # can be refused: the outcome commits, with U+FFFD where the text could not be kept.
    kept = "".join("\ufffd" if c == "\x00" or "\ud800" <= c <= "\udfff" else c for c in text)
    rejected, accepted = await claimed(store, "r"), await claimed(store, "a")
    applied = await store.intent_apply_many([
        Change(key="r", from_state=State.CLAIMED, to_state=State.REJECTED, event="rejected",
               lease_token=rejected, reason=text, provider_request_id=text),
        Change(key="a", from_state=State.CLAIMED, to_state=State.ACCEPTED, event="accepted",
               lease_token=accepted, receipt=text, detail=text),
    ], now=T0 + 5)
    await store.event_append_many([Event(key="a", channel="email", type="provider_note",
                                     at=T0 + 6, detail=text, provider_request_id=text)])

    assert applied == ["r", "a"]
    r, a = await store.intent_get("r"), await store.intent_get("a")
    assert r is not None and a is not None
    assert (r.state, r.reason, r.provider_request_id) == (State.REJECTED, kept, kept)
    assert (a.state, a.receipt) == (State.ACCEPTED, kept)
    [*_, rejected_event] = await store.events_for("r")
    *_, accepted_event, note = await store.events_for("a")
    assert (rejected_event.detail, rejected_event.provider_request_id) == (kept, kept)
    assert accepted_event.detail == kept
    assert (note.detail, note.provider_request_id) == (kept, kept)


async def test_a_provider_text_of_megabytes_is_recorded_cut(store: Store) -> None:
    from tidings.stores.rows import MAX_RECORDED

    huge = "x" * 5_000_000
    token = await claimed(store, "h")
    assert await store.intent_apply_many([
        Change(key="h", from_state=State.CLAIMED, to_state=State.ACCEPTED, event="accepted",
               lease_token=token, receipt=huge, reason=huge, provider_request_id=huge)],
        now=T0 + 5) == ["h"]
    h = await store.intent_get("h")
    assert h is not None and h.receipt is not None and h.provider_request_id is not None
    assert len(h.receipt) == len(h.provider_request_id) == MAX_RECORDED
    assert h.receipt.endswith("(cut: 5,000,000 characters in all)")
    [*_, event] = await store.events_for("h")
    assert event.detail is not None and len(event.detail) == MAX_RECORDED


async def test_apply_skips_a_stale_token_or_wrong_state_without_an_event(store: Store) -> None:
    token = await claimed(store, "k")
    await enqueued(store, "e")

    applied = await store.intent_apply_many([
        Change(key="k", from_state=State.CLAIMED, to_state=State.ACCEPTED, event="accepted",
               lease_token=token + 1),
        Change(key="e", from_state=State.SELECTED, to_state=State.CANCELLED, event="cancelled"),
        Change(key="ghost", from_state=State.SELECTED, to_state=State.ENQUEUED, event="x"),
    ], now=T0 + 5)

    assert applied == []
    assert await state_of(store, "k") is State.CLAIMED
    assert await state_of(store, "e") is State.ENQUEUED
    assert await event_types(store, "k") == ["selected", "enqueued", "claimed"]
    assert await event_types(store, "e") == ["selected", "enqueued"]


async def test_apply_with_lease_expired_by_leaves_a_renewed_lease_alone(store: Store) -> None:
    # Given a claimed intent whose lease the worker renewed after the reconciler looked
    token = await claimed(store, "k1", now=T0 + 2)
    lost = await store.intent_renew_leases([("k1", token)], owner="w1", lease_s=LEASE,
                                           now=T0 + 20)
    assert lost == []
    sweep = Change(key="k1", from_state=State.CLAIMED, to_state=State.UNCERTAIN,
                   event="lease_expired", lease_token=token, lease_expired_by=T0 + 40)
    # When the reconciler applies its change guarded by "expired by now"
    # Then the renewed lease (until T0 + 50) survives; after it runs out, the change applies
    assert await store.intent_apply_many([sweep], now=T0 + 40) == []
    assert (await store.intent_get("k1")).state == State.CLAIMED  # type: ignore[union-attr]
    later = Change(key="k1", from_state=State.CLAIMED, to_state=State.UNCERTAIN,
                   event="lease_expired", lease_token=token, lease_expired_by=T0 + 60)
    assert await store.intent_apply_many([later], now=T0 + 60) == ["k1"]


async def test_a_batch_of_distinct_keys_applies_each_guarded_change_with_its_fields(
        store: Store) -> None:
    # Given three claimed intents, one of whose leases moved on (a stale token)
    tokens = {key: await claimed(store, key) for key in ("a", "b", "c")}
    # When a worker commits their outcomes in one batch (PostgreSQL: one statement)
    applied = await store.intent_apply_many([
        Change(key="a", from_state=State.CLAIMED, to_state=State.ACCEPTED, event="accepted",
               lease_token=tokens["a"], receipt="rcpt-a", provider_request_id="req-a"),
        Change(key="b", from_state=State.CLAIMED, to_state=State.ACCEPTED, event="accepted",
               lease_token=tokens["b"] + 1, receipt="rcpt-b"),
        Change(key="c", from_state=State.CLAIMED, to_state=State.RETRYABLE, event="transient",
               lease_token=tokens["c"], next_attempt_at=T0 + 60, count_failure=True,
               reason="503"),
    ], now=T0 + 5)
    # Then the two whose guard holds apply, in order, each with its own fields and event
    assert applied == ["a", "c"]
    a, b, c = [await store.intent_get(key) for key in ("a", "b", "c")]
    assert a is not None and b is not None and c is not None
    assert (a.state, a.receipt, a.accepted_at, a.finished_at, a.lease_owner) == (
        State.ACCEPTED, "rcpt-a", T0 + 5, T0 + 5, None)
    assert (b.state, b.receipt) == (State.CLAIMED, None)
    assert (c.state, c.next_attempt_at, c.failures, c.finished_at, c.lease_owner) == (
        State.RETRYABLE, T0 + 60, 1, None, None)
    assert await event_types(store, "a") == ["selected", "enqueued", "claimed", "accepted"]
    assert await event_types(store, "b") == ["selected", "enqueued", "claimed"]
    assert await event_types(store, "c") == ["selected", "enqueued", "claimed", "transient"]
    [event_a] = [e for e in await store.events_for("a") if e.type == "accepted"]
    assert event_a.provider_request_id == "req-a"


async def test_apply_runs_changes_in_order_so_a_repeat_fails_its_guard(store: Store) -> None:
    token = await claimed(store, "k")
    change = Change(key="k", from_state=State.CLAIMED, to_state=State.ACCEPTED,
                    event="accepted", lease_token=token)

    applied = await store.intent_apply_many([change, change], now=T0 + 5)

    assert applied == ["k"]
    assert (await event_types(store, "k")).count("accepted") == 1


async def test_an_invalid_transition_raises_before_anything_is_written(store: Store) -> None:
    token = await claimed(store, "k")
    await enqueued(store, "e")

    with pytest.raises(InvalidTransition):
        await store.intent_apply_many([
            Change(key="k", from_state=State.CLAIMED, to_state=State.ACCEPTED,
                   event="accepted", lease_token=token),
            Change(key="e", from_state=State.ENQUEUED, to_state=State.ACCEPTED,
                   event="accepted"),
        ], now=T0 + 5)

    assert await state_of(store, "k") is State.CLAIMED
    assert await event_types(store, "k") == ["selected", "enqueued", "claimed"]


# ---------------------------------------------------------------- cancel


@pytest.mark.parametrize("start", [State.SELECTED, State.ENQUEUED, State.RETRYABLE])
async def test_cancel_before_a_send_is_terminal_at_once(store: Store, start: State) -> None:
    if start is State.SELECTED:
        await store.intent_admit([draft("k")], now=T0)
    elif start is State.ENQUEUED:
        await enqueued(store, "k")
    else:
        await in_state(store, "k", State.RETRYABLE)

    after = await store.intent_request_cancel("k", now=T0 + 9, reason="customer asked")

    assert after is State.CANCELLED
    k = await store.intent_get("k")
    assert k is not None
    assert (k.state, k.disposition, k.reason, k.finished_at) == (
        State.CANCELLED, "cancelled", "customer asked", T0 + 9)
    [*_, e] = await store.events_for("k")
    assert (e.type, e.state, e.detail) == ("cancelled", "cancelled", "customer asked")


async def test_cancel_of_a_claimed_intent_is_a_request_the_worker_sees(store: Store) -> None:
    await claimed(store, "k")

    after = await store.intent_request_cancel("k", now=T0 + 9, reason="oops")

    assert after is State.CLAIMED
    k = await store.intent_get("k")
    assert k is not None and (k.state, k.cancel_requested) == (State.CLAIMED, True)
    assert (await event_types(store, "k"))[-1] == "cancel_requested"


async def test_cancel_leaves_terminal_and_uncertain_intents_alone(store: Store) -> None:
    await in_state(store, "done", State.ACCEPTED)
    await in_state(store, "unsure", State.UNCERTAIN)

    assert await store.intent_request_cancel("done", now=T0 + 9, reason="x") is State.ACCEPTED
    assert await store.intent_request_cancel("unsure", now=T0 + 9, reason="x") is State.UNCERTAIN
    assert await store.intent_request_cancel("ghost", now=T0 + 9, reason="x") is None
    assert "cancelled" not in await event_types(store, "done")
    unsure = await store.intent_get("unsure")
    assert unsure is not None and unsure.cancel_requested is False


# ---------------------------------------------------------------- reads and sweeps


async def test_find_filters_by_state_channel_age_and_expired_lease(store: Store) -> None:
    await store.intent_admit([draft("sms-sel", channel="sms")], now=T0)
    await enqueued(store, "old")
    await store.intent_admit([draft("new")], now=T0 + 50)
    await store.intent_mark_enqueued(["new"], now=T0 + 50)
    await claimed(store, "expired", now=T0 - LEASE - 1)
    await claimed(store, "live", now=T0)

    def keys(intents: list[Any]) -> list[str]:
        return sorted(i.key for i in intents)

    assert keys(await store.intent_find(states=[State.ENQUEUED])) == ["new", "old"]
    assert keys(await store.intent_find(states=[State.ENQUEUED], updated_before=T0 + 10)) == [
        "old"]
    assert keys(await store.intent_find(states=[State.SELECTED, State.ENQUEUED],
                                        channel="sms")) == ["sms-sel"]
    assert keys(await store.intent_find(states=[State.CLAIMED], lease_expired_at=T0)) == [
        "expired"]
    assert keys(await store.intent_find(states=[State.CLAIMED])) == ["expired", "live"]
    assert len(await store.intent_find(states=[State.ENQUEUED, State.CLAIMED], limit=3)) == 3


async def test_find_reads_only_what_is_due_by_a_bound(store: Store) -> None:
    await store.intent_admit([draft("now", due_at=T0), draft("soon", due_at=T0 + 60),
                              draft("next-week", due_at=T0 + 7 * 86_400)], now=T0)
    await store.intent_mark_enqueued(["now", "soon", "next-week"], now=T0 + 1)

    def keys(intents: list[Any]) -> list[str]:
        return [i.key for i in intents]

    assert keys(await store.intent_find(states=[State.ENQUEUED], due_before=T0 - 1)) == []
    assert keys(await store.intent_find(states=[State.ENQUEUED], due_before=T0)) == ["now"]
    assert keys(await store.intent_find(states=[State.ENQUEUED], due_before=T0 + 60)) == [
        "now", "soon"]
    assert keys(await store.intent_find(states=[State.ENQUEUED])) == ["now", "soon", "next-week"]


async def test_counts_and_latencies(store: Store) -> None:
    await store.intent_admit([draft("s1", channel="sms"), draft("s2", channel="sms")], now=T0)
    await in_state(store, "a1", State.ACCEPTED, now=T0 + 4)
    await in_state(store, "a2", State.REJECTED, now=T0 + 4)

    assert await store.intent_counts() == {
        "sms": {"selected": 2}, "email": {"accepted": 1, "rejected": 1}}
    assert await store.intent_latencies("email") == [4.0]
    assert await store.intent_latencies("sms") == []
    counts = await store.event_counts()
    assert counts["sms"] == {"selected": 2}
    assert counts["email"] == {"selected": 2, "enqueued": 2, "claimed": 2, "accepted": 1,
                               "rejected": 1}


async def test_events_append_and_read_back_in_order(store: Store) -> None:
    events = [
        Event(key="k", channel="email", type="delivered", at=T0 + 2, state="delivered",
              attempt=1, worker="webhook", message_id="m", provider_request_id="p",
              detail="250 OK"),
        Event(key="k", channel="email", type="note", at=T0 + 1),
        Event(key="other", channel="sms", type="note", at=T0),
    ]

    await store.event_append_many(events)

    assert await store.events_for("k") == events[:2]
    assert await store.event_counts() == {"email": {"delivered": 1, "note": 1},
                                          "sms": {"note": 1}}


# ---------------------------------------------------------------- occurrences and switches


async def test_occurrence_open_is_idempotent_and_counts_passes(store: Store) -> None:
    args: dict[str, Any] = dict(id="d/2026-08-14", campaign="d", logical_at=T0,
                                logical_date="2026-08-14")

    first = await store.occurrence_open(**args, kind="scheduled", now=T0)
    second = await store.occurrence_open(**args, kind="scheduled", now=T0 + 60)

    assert (first.status, first.kind, first.passes, first.created_at) == (
        "admitting", "scheduled", 1, T0)
    assert (second.status, second.passes, second.created_at) == ("admitting", 2, T0)
    assert await store.occurrence_get("d/2026-08-14") == second
    assert await store.occurrence_get("ghost") is None


async def test_replay_reopens_a_skipped_occurrence_but_not_a_done_one(store: Store) -> None:
    for occ in ("skipped", "done"):
        await store.occurrence_open(id=occ, campaign="d", logical_at=T0, logical_date=occ,
                                    kind="scheduled", now=T0)
    await store.occurrence_finish("skipped", now=T0 + 1, status="skipped", reason="paused")
    await store.occurrence_finish("done", now=T0 + 2)

    replayed = await store.occurrence_open(id="skipped", campaign="d", logical_at=T0,
                                           logical_date="skipped", kind="replay", now=T0 + 9)
    kept = await store.occurrence_open(id="done", campaign="d", logical_at=T0,
                                       logical_date="done", kind="replay", now=T0 + 9)

    assert (replayed.status, replayed.kind, replayed.finished_at, replayed.reason) == (
        "admitting", "replay", None, None)
    assert (kept.status, kept.kind, kept.finished_at, kept.passes) == (
        "done", "scheduled", T0 + 2, 1)
    with pytest.raises(StoreError):
        await store.occurrence_finish("ghost", now=T0)


async def test_occurrence_list_filters_by_campaign(store: Store) -> None:
    for occ, campaign, at in (("a2", "a", T0 + 2), ("a1", "a", T0 + 1), ("b1", "b", T0)):
        await store.occurrence_open(id=occ, campaign=campaign, logical_at=at,
                                    logical_date=occ, kind="scheduled", now=T0)

    assert [o.id for o in await store.occurrence_list("a")] == ["a1", "a2"]
    assert sorted(o.id for o in await store.occurrence_list()) == ["a1", "a2", "b1"]


async def test_switches_are_upserted_and_listed(store: Store) -> None:
    await store.switch_set(scope="channel", name="sms", paused=True, now=T0, reason="429 storm")
    switch = await store.switch_set(scope="channel", name="sms", paused=False, now=T0 + 1)
    await store.switch_set(scope="campaign", name="digest", paused=True, now=T0 + 2)

    assert (switch.paused, switch.changed_at, switch.reason) == (False, T0 + 1, None)
    assert [(s.scope, s.name, s.paused) for s in await store.switch_all()] == [
        ("campaign", "digest", True), ("channel", "sms", False)]


# ---------------------------------------------------------------- pacer state


def _increment(state: dict[str, Any] | None) -> tuple[dict[str, Any], int]:
    count = (state or {}).get("count", 0) + 1
    return {"count": count}, count


async def test_pacer_transact_is_an_atomic_read_modify_write(store: Store) -> None:
    assert await store.pacer_read("sms") is None

    results = await asyncio.gather(*(store.pacer_transact("sms", _increment) for _ in range(40)))

    assert sorted(results) == list(range(1, 41))
    assert await store.pacer_read("sms") == {"count": 40}
    assert await store.pacer_read("email") is None


async def test_pacer_transact_writes_nothing_when_fn_raises(store: Store) -> None:
    await store.pacer_transact("sms", _increment)

    def broken(state: dict[str, Any] | None) -> tuple[dict[str, Any], None]:
        raise ValueError("bug")

    with pytest.raises(ValueError, match="bug"):
        await store.pacer_transact("sms", broken)
    assert await store.pacer_read("sms") == {"count": 1}


async def test_pacer_pause_keeps_the_latest_end_per_channel(store: Store) -> None:
    assert await store.pacer_paused_until("sms") == 0.0

    await asyncio.gather(*(store.pacer_pause("sms", until) for until in (105.0, 130.0, 110.0)))
    await store.pacer_pause("sms", 120.0)  # a shorter pause never ends a longer one early

    assert await store.pacer_paused_until("sms") == 130.0
    assert await store.pacer_paused_until("email") == 0.0
    assert await store.pacer_read("sms") is None  # the state is the pacer's own business


# ---------------------------------------------------------------- several processes


def _claim_everything(opener: Callable[[str], Awaitable[Store]], url: str, owner: str,
                      keys: list[str], start: Any, results: Any) -> None:
    """Child process: claim every key in its own order, report what it won."""

    async def run() -> list[str]:
        store = await opener(url)
        try:
            won: list[str] = []
            order = keys[:]
            random.Random(owner).shuffle(order)
            start.wait()
            for i in range(0, len(order), 25):
                claims = await store.intent_claim_many(order[i:i + 25], owner=owner,
                                                       lease_s=600, now=T0 + 10)
                won += [c.key for c in claims if c.kind is ClaimKind.CLAIMED]
            for _ in range(25):
                await store.pacer_transact("shared", _increment)
            return won
        finally:
            await store.close()

    results.put((owner, asyncio.run(run())))


@pytest.mark.slow
async def test_four_processes_claim_each_intent_exactly_once(
    store: Store, store_backend: Any, store_url: str
) -> None:
    keys = [f"k{i:05d}" for i in range(2_000)]
    await store.intent_admit([draft(k) for k in keys], now=T0)
    await store.intent_mark_enqueued(keys, now=T0 + 1)
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_claim_everything,
                         args=(store_backend.open, store_url, f"w{n}", keys, start, results))
             for n in range(4)]

    for p in procs:
        p.start()
    won = dict(await asyncio.to_thread(lambda: [results.get(timeout=120) for _ in procs]))
    for p in procs:
        p.join(timeout=30)

    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert sum(1 for ks in won.values() if ks) >= 2  # they really raced
    claims = Counter(k for ks in won.values() for k in ks)
    assert set(claims) == set(keys)
    assert max(claims.values()) == 1  # no double claims
    assert await store.intent_counts() == {"email": {"claimed": 2_000}}
    assert (await store.event_counts())["email"]["claimed"] == 2_000
    assert await store.pacer_read("shared") == {"count": 100}
