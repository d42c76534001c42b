"""Retention's queries on every store: what a prune batch deletes, and what it never does.

Given intents finished at chosen times (every ``now`` explicit), a batch removes only
terminal intents finished before the cutoff, their events and finished occurrences;
non-terminal intents, recent ones, audit events of no intent and occurrences still
admitting stay.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tidings.core.model import Event, IntentDraft
from tidings.core.retention import PARTITIONS_AHEAD
from tidings.core.states import State
from tidings.recovery.retention import AUDIT_KEY, DAY_S, PruneCounts, RetentionConfig, prune
from tidings.stores.base import Change, Store

#: A UTC midnight (2027-01-15), so a day of the ledger is one day partition.
D0 = 1_799_971_200.0
CUTOFF = D0 + 10 * DAY_S


def draft(key: str, *, occurrence: str | None = None) -> IntentDraft:
    return IntentDraft(key=key, channel="email", recipient_id=f"r-{key}",
                       address=f"{key}@example.com", template="digest@v1", data="{}",
                       due_at=D0, expires_at=None,
                       campaign="digest" if occurrence else None, occurrence=occurrence)


async def finished(store: Store, key: str, at: float, state: State = State.ACCEPTED) -> None:
    """Given an intent admitted at ``at`` and moved by a worker to ``state`` a minute on."""
    await store.intent_admit([draft(key)], now=at)
    await store.intent_mark_enqueued([key], now=at + 1)
    [claim] = await store.intent_claim_many([key], owner="w", lease_s=30, now=at + 2)
    assert claim.token is not None
    assert await store.intent_apply_many([Change(
        key=key, from_state=State.CLAIMED, to_state=state, event=state.value,
        lease_token=claim.token, receipt="r")], now=at + 60) == [key]


async def pending(store: Store, key: str, at: float) -> None:
    """Given an intent admitted and enqueued at ``at``, never sent."""
    await store.intent_admit([draft(key)], now=at)
    await store.intent_mark_enqueued([key], now=at + 1)


async def occurrence(store: Store, id: str, at: float, *, finish: bool) -> None:
    await store.occurrence_open(id=id, campaign="digest", logical_at=at,
                                logical_date=id, kind="scheduled", now=at)
    if finish:
        await store.occurrence_finish(id, now=at + 60)


async def prune_all(store: Store, *, limit: int = 100) -> PruneCounts:
    total = PruneCounts()
    while True:
        batch = await store.retention_prune_batch(
            intent_cutoff=CUTOFF, occurrence_cutoff=CUTOFF, limit=limit)
        total += batch
        if batch.intents < limit and batch.occurrences < limit:
            return total


async def test_a_batch_prunes_only_terminal_intents_finished_before_the_cutoff(
        store: Store) -> None:
    # given old finished intents of each kind of ending, old unfinished ones, new ones
    await finished(store, "old-accepted", D0)
    await finished(store, "old-rejected", D0 + DAY_S, State.REJECTED)
    await finished(store, "old-dead", D0 + DAY_S, State.DEAD)
    await pending(store, "old-pending", D0)
    await finished(store, "old-uncertain", D0, State.UNCERTAIN)
    await finished(store, "recent", CUTOFF + 1)
    # ... and audit events of no intent, old too
    await store.event_append_many([
        Event(key="admission/channel/email", channel="email", type="guardrail_tripped",
              at=D0, state="paused", detail="x"),
        Event(key="old-accepted", channel="email", type="provider_delivered", at=D0 + 100)])

    # when every batch runs
    pruned = await prune_all(store)

    # then the three finished ones went, with every event of theirs
    assert pruned.intents == 3
    assert pruned.events == 4 * 2 + 4 + 1  # selected, enqueued, claimed, outcome (+1)
    for key in ("old-accepted", "old-rejected", "old-dead"):
        assert await store.intent_get(key) is None
        assert await store.events_for(key) == []
    # and nothing else was touched
    for key in ("old-pending", "old-uncertain", "recent"):
        assert await store.intent_get(key) is not None
        assert len(await store.events_for(key)) >= 2
    assert [e.type for e in await store.events_for("admission/channel/email")] == [
        "guardrail_tripped"]


async def test_a_batch_is_bounded_and_takes_the_oldest_first(store: Store) -> None:
    for i in range(5):
        await finished(store, f"k{i}", D0 + i * 3600)

    batch = await store.retention_prune_batch(intent_cutoff=CUTOFF, occurrence_cutoff=CUTOFF,
                                              limit=2)

    assert batch.intents == 2 and batch.events == 8
    assert [await store.intent_get(f"k{i}") is None for i in range(5)] == [
        True, True, False, False, False]


async def test_an_intent_updated_after_the_cutoff_is_kept(store: Store) -> None:
    # given an accepted intent whose provider said "delivered" after the cutoff
    await finished(store, "late-webhook", D0)
    await store.intent_apply_many([Change(key="late-webhook", from_state=State.ACCEPTED,
                                          to_state=State.DELIVERED, event="delivered")],
                                  now=CUTOFF + 5)

    assert await prune_all(store) == PruneCounts()
    assert await store.intent_get("late-webhook") is not None


async def test_finished_occurrences_before_the_cutoff_go_and_admitting_ones_stay(
        store: Store) -> None:
    await occurrence(store, "digest/old-done", D0, finish=True)
    await occurrence(store, "digest/old-admitting", D0, finish=False)
    await occurrence(store, "digest/recent-done", CUTOFF + 1, finish=True)

    pruned = await prune_all(store)

    assert pruned.occurrences == 1
    assert await store.occurrence_get("digest/old-done") is None
    assert await store.occurrence_get("digest/old-admitting") is not None
    assert await store.occurrence_get("digest/recent-done") is not None


async def test_a_finished_occurrence_with_an_intent_still_pending_is_kept(
        store: Store) -> None:
    # an occurrence held for weeks: its parked intents need it for their release
    await occurrence(store, "digest/held", D0, finish=True)
    await occurrence(store, "digest/sent", D0, finish=True)
    await store.intent_admit([draft("p1", occurrence="digest/held")], now=D0)
    await store.intent_mark_enqueued(["p1"], now=D0 + 1)

    counts, _ = await store.retention_count(intent_cutoff=CUTOFF, occurrence_cutoff=CUTOFF)
    pruned = await prune_all(store)

    assert (counts.occurrences, pruned.occurrences) == (1, 1)
    assert await store.occurrence_get("digest/held") is not None
    assert await store.occurrence_get("digest/sent") is None


async def test_a_dry_run_counts_what_a_prune_removes_and_names_the_oldest_kept(
        store: Store) -> None:
    await finished(store, "old", D0)
    await pending(store, "stuck", D0 + DAY_S)
    await finished(store, "recent", CUTOFF + 1)
    await occurrence(store, "digest/old", D0, finish=True)

    counts, oldest_kept = await store.retention_count(intent_cutoff=CUTOFF,
                                                      occurrence_cutoff=CUTOFF)

    assert counts == PruneCounts(intents=1, events=4, occurrences=1)
    assert oldest_kept == D0 + DAY_S
    assert await prune_all(store) == counts


async def test_the_age_span_is_the_oldest_and_newest_creation(store: Store) -> None:
    assert await store.intent_age_span() is None
    await pending(store, "b", D0 + 50)
    await pending(store, "a", D0)

    assert await store.intent_age_span() == (D0, D0 + 50)


@pytest.mark.parametrize("limit", [1, 3])
async def test_batches_add_up_to_one_unbounded_prune(store: Store, limit: int) -> None:
    for i in range(4):
        await finished(store, f"k{i}", D0 + i)
    await occurrence(store, "digest/a", D0, finish=True)
    await occurrence(store, "digest/b", D0, finish=True)

    pruned = await prune_all(store, limit=limit)

    assert pruned == PruneCounts(intents=4, events=16, occurrences=2)
    assert await store.intent_age_span() is None


# ---------------------------------------------------------------- the pruner on each store

CONFIG = RetentionConfig(intents_s=10 * DAY_S, occurrences_s=10 * DAY_S, batch_size=2,
                         max_batches=50)


async def test_a_prune_leaves_an_audit_event_with_its_counts(store: Store) -> None:
    for i in range(3):
        await finished(store, f"old{i}", D0 + i)
    await pending(store, "kept", D0 + 5)

    report = await prune(store, CONFIG, now=CUTOFF + 10 * DAY_S - DAY_S, worker="r1")

    assert report.pruned.intents == 3 and report.batches >= 2
    assert report.oldest_kept == D0 + 5 and report.bound_days == 10
    [audit] = await store.events_for(AUDIT_KEY)
    assert audit.type == "retention_pruned" and audit.worker == "r1"
    assert audit.detail is not None and audit.detail.startswith("intents=3 events=12 ")


async def test_a_dry_run_prunes_nothing_and_a_prune_with_nothing_old_records_nothing(
        store: Store) -> None:
    await finished(store, "old", D0)

    dry = await prune(store, CONFIG, now=D0 + 20 * DAY_S, dry_run=True)
    assert dry.as_dict()["pruned"]["intents"] == 1 and dry.dry_run
    assert await store.intent_get("old") is not None

    early = await prune(store, CONFIG, now=D0 + DAY_S)
    assert not early.pruned.any()
    assert await store.events_for(AUDIT_KEY) == []


# ---------------------------------------------------------------- PostgreSQL partitions


@pytest.fixture
async def pg_store(pg_url: str) -> AsyncIterator[Any]:
    from tidings.stores.postgres import PostgresStore

    opened = await PostgresStore.open(pg_url)
    await opened.migrate(now=D0)
    yield opened
    await opened.close()


async def partition_of(store: Any, key: str) -> list[str]:
    async def fn(conn: Any) -> list[str]:
        cur = await conn.execute(
            "SELECT tableoid::regclass::text FROM events WHERE key = %s ORDER BY id", (key,))
        return [name.rsplit(".", 1)[-1] for (name,) in await cur.fetchall()]

    result: list[str] = await store.db.read(fn)
    return result


async def test_postgres_partitions_are_created_ahead_and_dropped_once_nothing_older_is_kept(
        pg_store: Any) -> None:
    # given partitions made by a first prune, and a week of finished intents
    first = await prune(pg_store, CONFIG, now=D0)
    assert first.created_partitions == PARTITIONS_AHEAD + 1
    for day in range(3):
        await finished(pg_store, f"d{day}", D0 + day * DAY_S + 3600)
    await pg_store.event_append_many([Event(
        key="occurrence/digest/x", channel="-", type="occurrence_restarted", at=D0 + 7200)])
    assert await partition_of(pg_store, "d1") == ["events_p20270116"] * 4

    # when a prune runs after two of the days are older than the bound
    report = await prune(pg_store, CONFIG, now=D0 + 12 * DAY_S + 1800)

    # then their intents went, their partitions were dropped whole, and new ones made
    assert report.pruned.intents == 2 and report.pruned.partitions == 2
    assert report.pruned.events == 8  # four each, in their partitions
    names = {p.name for p in await pg_store.event_partitions()}
    assert "events_p20270115" not in names and "events_p20270116" not in names
    assert "events_p20270117" in names and "events_p20270203" in names
    assert await pg_store.events_for("d0") == [] and await pg_store.intent_get("d2")
    # and the audit event of no intent was kept (now in the default partition)
    assert await partition_of(pg_store, "occurrence/digest/x") == ["events_default"]


async def test_postgres_keeps_a_non_terminal_intents_events_and_sweeps_around_it(
        pg_store: Any) -> None:
    await prune(pg_store, CONFIG, now=D0)
    await pending(pg_store, "stuck", D0 + 600)  # enqueued on day 0, never sent
    await finished(pg_store, "done0", D0 + 1200)
    await finished(pg_store, "done1", D0 + DAY_S + 1200)

    report = await prune(pg_store, CONFIG, now=D0 + 14 * DAY_S)

    # nothing dropped: an intent created on day 0 is still in the ledger
    assert report.pruned.partitions == 0
    assert {"events_p20270115", "events_p20270116"} <= {
        p.name for p in await pg_store.event_partitions()}
    assert [e.type for e in await pg_store.events_for("stuck")] == ["selected", "enqueued"]
    # the finished intents went, and their events with them (row-wise)
    assert report.pruned.intents == 2 and report.pruned.events == 8
    assert await pg_store.events_for("done0") == [] and await pg_store.events_for("done1") == []

    # once the stuck intent finishes and ages out too, its day is dropped
    await pg_store.intent_request_cancel("stuck", now=D0 + 14 * DAY_S, reason="old")
    later = await prune(pg_store, CONFIG, now=D0 + 25 * DAY_S)
    assert later.pruned.intents == 1 and later.pruned.partitions >= 2
    assert "events_p20270115" not in {p.name for p in await pg_store.event_partitions()}


async def test_postgres_rows_in_the_default_partition_are_pruned_by_key(pg_store: Any) -> None:
    # given intents written before any partition existed (the default took them)
    await finished(pg_store, "early", D0)
    assert set(await partition_of(pg_store, "early")) == {"events_default"}
    await prune(pg_store, CONFIG, now=D0 + DAY_S)  # makes partitions; day 0 stays default

    report = await prune(pg_store, CONFIG, now=D0 + 20 * DAY_S)

    assert report.pruned.intents == 1 and report.pruned.events == 4
    assert await pg_store.events_for("early") == []


async def test_postgres_finishes_a_partition_a_stopped_prune_left_detached(
        pg_store: Any) -> None:
    # given day 0's partition, holding events of an intent already pruned and an audit
    # event, detached by a prune that stopped before dropping it
    await prune(pg_store, CONFIG, now=D0)
    await pg_store.event_append_many([
        *(Event(key="gone", channel="email", type=t, at=D0 + 600 + i)
          for i, t in enumerate(["selected", "enqueued", "claimed", "accepted"])),
        Event(key="admission/channel/email", channel="email", type="guardrail_tripped",
              at=D0 + 700)])
    await pg_store.db.write(lambda conn: conn.execute(
        "ALTER TABLE events DETACH PARTITION events_p20270115"))
    assert await pg_store.event_partitions_detached() == ["events_p20270115"]

    # when the next prune runs (day 0 still within the bound: only the leftover goes)
    report = await prune(pg_store, CONFIG, now=D0 + 2 * DAY_S)

    # then it is dropped, its audit event kept in the table
    assert await pg_store.event_partitions_detached() == []
    assert report.pruned.partitions == 1 and report.pruned.events == 4
    assert [e.type for e in await pg_store.events_for("admission/channel/email")] == [
        "guardrail_tripped"]


@pytest.mark.parametrize("seed", [1, 2])
async def test_a_random_ledger_loses_exactly_its_prunable_intents_and_their_events(
        store: Store, seed: int) -> None:
    import random

    rng = random.Random(seed)
    # given intents of every ending (or none yet), created and finished around the cutoff
    expected_gone: set[str] = set()
    kept: set[str] = set()
    endings = [State.ACCEPTED, State.REJECTED, State.DEAD, State.UNCERTAIN, State.RETRYABLE,
               None]
    for i in range(40):
        key = f"k{i:02d}"
        at = CUTOFF + rng.uniform(-3 * DAY_S, DAY_S)
        ending = rng.choice(endings)
        if ending is None:
            await pending(store, key, at)
        else:
            await finished(store, key, at, ending)
        finishes_at = at + 60
        prunable = ending in (State.ACCEPTED, State.REJECTED, State.DEAD) \
            and finishes_at < CUTOFF
        (expected_gone if prunable else kept).add(key)

    # when batches of a random size run to the end
    pruned = await prune_all(store, limit=rng.randint(1, 7))

    # then exactly the prunable intents went, each with all of its events
    assert pruned.intents == len(expected_gone)
    for key in expected_gone:
        assert await store.intent_get(key) is None and await store.events_for(key) == []
    for key in kept:
        assert await store.intent_get(key) is not None and await store.events_for(key)
