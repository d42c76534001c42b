"""What the runbook needs of every store: outcome counts per window bucket and a pause
that only one caller wins (guardrails), an occurrence admitted again from its start (a
replay under a new version). Runs unchanged on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from tidings.core.errors import StoreError
from tidings.core.model import Event, IntentDraft
from tidings.stores.base import Store


def draft(key: str, campaign: str | None) -> IntentDraft:
    return IntentDraft(key=key, channel="email", recipient_id=key, address=f"{key}@example.com",
                       template="t/v1", due_at=0.0, campaign=campaign,
                       occurrence=None if campaign is None else f"{campaign}/2026-08-10")


async def test_outcome_counts_per_channel_campaign_type_and_bucket(store: Store) -> None:
    await store.intent_admit([draft("a1", "alpha"), draft("b1", "beta"), draft("n1", None)],
                             now=0.0)
    events = [
        Event(key="a1", channel="email", type="accepted", at=100.0),
        Event(key="a1", channel="email", type="rejected", at=105.0),
        Event(key="a1", channel="email", type="rejected", at=125.0),
        Event(key="b1", channel="email", type="accepted", at=101.0),
        Event(key="n1", channel="email", type="dead", at=102.0),
        Event(key="a1", channel="email", type="claimed", at=103.0),   # not an outcome
        Event(key="a1", channel="email", type="accepted", at=50.0),   # before the window
    ]
    await store.event_append_many(events)

    counts = await store.outcome_counts(since=100.0, bucket_s=10.0)

    got = sorted((c.campaign or "", c.type, c.bucket, c.count) for c in counts)
    assert got == [("", "dead", 10, 1), ("alpha", "accepted", 10, 1),
                   ("alpha", "rejected", 10, 1), ("alpha", "rejected", 12, 1),
                   ("beta", "accepted", 10, 1)]
    assert {c.channel for c in counts} == {"email"}


async def test_a_trip_pauses_once_and_leaves_an_operator_pause_alone(store: Store) -> None:
    first = await store.switch_trip(scope="campaign", name="alpha", now=10.0,
                                    reason="guardrail: rejection_rate 0.3 > 0.2")
    again = await store.switch_trip(scope="campaign", name="alpha", now=11.0,
                                    reason="guardrail: later")

    assert first is not None and first.paused and first.changed_at == 10.0
    assert again is None
    [switch] = await store.switch_all()
    assert switch.reason == "guardrail: rejection_rate 0.3 > 0.2"

    await store.switch_set(scope="channel", name="sms", paused=True, now=12.0,
                           reason="maintenance")
    assert await store.switch_trip(scope="channel", name="sms", now=13.0,
                                   reason="guardrail: x") is None
    await store.switch_set(scope="campaign", name="alpha", paused=False, now=14.0)
    resumed = await store.switch_trip(scope="campaign", name="alpha", now=15.0,
                                      reason="guardrail: again")
    assert resumed is not None and resumed.changed_at == 15.0


async def test_an_occurrence_restarts_from_its_first_member(store: Store) -> None:
    occ = await store.occurrence_open(id="alpha/2026-08-10", campaign="alpha",
                                      logical_at=1.0, logical_date="2026-08-10",
                                      kind="scheduled", now=2.0)
    await store.occurrence_finish(occ.id, now=3.0)

    await store.occurrence_restart(occ.id, reason="replayed under v2")

    again = await store.occurrence_get(occ.id)
    assert again is not None
    assert (again.status, again.kind, again.high_water, again.members, again.reason) == (
        "admitting", "replay", None, 0, "replayed under v2")
    assert again.passes == occ.passes + 1 and again.finished_at is None
    with pytest.raises(StoreError):
        await store.occurrence_restart("nope/2026-08-10", reason="x")
