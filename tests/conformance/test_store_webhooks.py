"""The Store conformance suite, provider webhooks part: provider events recorded once per
(provider, message id, type) on the intent's timeline beside ``accepted``, moving the
intent accepted -> delivered -> bounced or complained (never out of another state, a
replay moving nothing), orphans kept and adopted later, and the counts behind the
metrics.

Runs unchanged on every store adapter; scenarios are given / when / then with every
``now`` explicit.
"""

from __future__ import annotations

import asyncio

from tidings.core.model import IntentDraft
from tidings.core.states import State
from tidings.stores.base import (
    Change,
    ClaimKind,
    ProviderEvent,
    ProviderEventCount,
    ProviderEventType,
    RecordResult,
    Store,
)

T0 = 1_000_000.0
DELIVERED = ProviderEventType.DELIVERED
BOUNCED = ProviderEventType.BOUNCED
COMPLAINED = ProviderEventType.COMPLAINED


def draft(key: str, *, channel: str = "sms") -> IntentDraft:
    return IntentDraft(key=key, channel=channel, recipient_id="cust_1", address="+15550001111",
                       template="reminder/v1", due_at=T0)


async def accepted(store: Store, key: str, receipt: str, *, now: float = T0 + 1,
                   channel: str = "sms") -> None:
    """Given an intent accepted by its provider under ``receipt`` at ``now``."""
    await store.intent_admit([draft(key, channel=channel)], now=now - 1)
    [claim] = await store.intent_claim_many([key], owner="w1", lease_s=30, now=now - 1)
    assert claim.kind is ClaimKind.CLAIMED
    applied = await store.intent_apply_many([Change(
        key=key, from_state=State.CLAIMED, to_state=State.ACCEPTED, event="accepted",
        lease_token=claim.token, receipt=receipt)], now=now)
    assert applied == [key]


def event(message_id: str, type: ProviderEventType = DELIVERED, *, provider: str = "twilio",
          at: float = T0 + 5, detail: str | None = None) -> ProviderEvent:
    return ProviderEvent(provider=provider, message_id=message_id, type=type, at=at,
                         detail=detail)


async def timeline(store: Store, key: str) -> list[str]:
    return [e.type for e in await store.events_for(key)]


# ---------------------------------------------------------------- recording


async def test_a_delivery_report_joins_the_timeline_and_moves_the_intent_on(
    store: Store,
) -> None:
    await accepted(store, "remind:c1:sms", "SM0001")

    result = await store.provider_events_record(
        [event("SM0001", detail="delivered")], now=T0 + 10)

    assert result == RecordResult(recorded=1, moved=1)
    events = await store.events_for("remind:c1:sms")
    assert [e.type for e in events][-2:] == ["accepted", "provider_delivered"]
    report = events[-1]
    assert (report.channel, report.at, report.detail) == ("sms", T0 + 5, "twilio: delivered")
    assert report.state == "delivered"  # the intent's state after the report
    intent = await store.intent_get("remind:c1:sms")
    assert intent is not None
    # The acceptance is kept: its time, its receipt, when it finished.
    assert (intent.state, intent.receipt, intent.accepted_at, intent.finished_at) == (
        State.DELIVERED, "SM0001", T0 + 1, T0 + 1)
    assert intent.disposition == "delivered"


async def test_a_report_is_recorded_once_however_often_it_arrives(store: Store) -> None:
    await accepted(store, "k1", "SM0001")

    first = await store.provider_events_record([event("SM0001"), event("SM0001")], now=T0)
    again = await store.provider_events_record([event("SM0001", at=T0 + 9)], now=T0 + 60)

    assert first == RecordResult(recorded=1, duplicates=1, moved=1)
    assert again == RecordResult(duplicates=1)
    assert (await timeline(store, "k1")).count("provider_delivered") == 1


async def test_each_type_of_report_on_a_message_is_its_own_event(store: Store) -> None:
    await accepted(store, "k1", "msg-1")

    result = await store.provider_events_record(
        [event("msg-1", DELIVERED, provider="sendgrid"),
         event("msg-1", COMPLAINED, provider="sendgrid", at=T0 + 50)], now=T0 + 60)

    assert result == RecordResult(recorded=2, moved=2, suppressed=1)
    events = [e for e in await store.events_for("k1") if e.type.startswith("provider_")]
    assert [(e.type, e.state) for e in events] == [("provider_delivered", "delivered"),
                                                   ("provider_complained", "complained")]
    assert (await intent_state(store, "k1")) is State.COMPLAINED


async def test_the_same_message_id_from_another_provider_is_another_event(
    store: Store,
) -> None:
    await accepted(store, "k1", "m-1")

    result = await store.provider_events_record(
        [event("m-1", provider="generic"), event("m-1", provider="twilio")], now=T0)

    assert result == RecordResult(recorded=2, moved=1)  # delivered once is delivered
    assert (await timeline(store, "k1")).count("provider_delivered") == 2


# ---------------------------------------------------------------- state moves


async def intent_state(store: Store, key: str) -> State:
    intent = await store.intent_get(key)
    assert intent is not None
    return intent.state


async def test_a_bounce_after_delivery_moves_delivered_to_bounced(store: Store) -> None:
    await accepted(store, "k1", "SM0001")
    await store.provider_events_record([event("SM0001")], now=T0 + 10)

    later = await store.provider_events_record([event("SM0001", BOUNCED)], now=T0 + 20)

    assert later == RecordResult(recorded=1, moved=1, suppressed=1)
    assert await intent_state(store, "k1") is State.BOUNCED


async def test_a_report_out_of_order_records_but_never_moves_back(store: Store) -> None:
    # Given a bounce, then the delivery report the provider sent before it.
    await accepted(store, "k1", "SM0001")
    await store.provider_events_record([event("SM0001", BOUNCED)], now=T0 + 10)

    late = await store.provider_events_record([event("SM0001", DELIVERED)], now=T0 + 20)
    complaint = await store.provider_events_record([event("SM0001", COMPLAINED)], now=T0 + 30)

    assert late == complaint == RecordResult(recorded=1)
    assert await intent_state(store, "k1") is State.BOUNCED
    assert (await store.events_for("k1"))[-1].type == "provider_complained"
    assert (await store.events_for("k1"))[-1].state == "bounced"


async def test_a_replayed_report_changes_nothing(store: Store) -> None:
    await accepted(store, "k1", "SM0001")
    await store.provider_events_record([event("SM0001", BOUNCED)], now=T0 + 10)
    before = await store.intent_get("k1")
    timeline_before = await timeline(store, "k1")

    replay = await store.provider_events_record([event("SM0001", BOUNCED)], now=T0 + 99)

    assert replay == RecordResult(duplicates=1)
    assert await store.intent_get("k1") == before
    assert await timeline(store, "k1") == timeline_before


async def test_a_failed_report_records_without_moving(store: Store) -> None:
    await accepted(store, "k1", "SM0001")

    result = await store.provider_events_record(
        [event("SM0001", ProviderEventType.FAILED)], now=T0 + 10)

    assert result == RecordResult(recorded=1)
    assert await intent_state(store, "k1") is State.ACCEPTED


async def test_a_report_never_moves_an_intent_outside_the_accepted_family(
    store: Store,
) -> None:
    # Given an intent the provider refused, whose message id a report names anyway.
    await store.intent_admit([draft("k1")], now=T0)
    [claim] = await store.intent_claim_many(["k1"], owner="w1", lease_s=30, now=T0)
    await store.intent_apply_many([Change(
        key="k1", from_state=State.CLAIMED, to_state=State.UNCERTAIN, event="uncertain",
        lease_token=claim.token)], now=T0 + 1)
    await store.intent_apply_many([Change(
        key="k1", from_state=State.UNCERTAIN, to_state=State.DEAD, event="dead",
        receipt="SM0001")], now=T0 + 2)

    result = await store.provider_events_record([event("SM0001", BOUNCED)], now=T0 + 10)

    assert result.moved == 0
    assert await intent_state(store, "k1") is State.DEAD


async def test_reports_of_many_intents_in_one_batch_each_move_their_own(store: Store) -> None:
    for i in range(4):
        await accepted(store, f"k{i}", f"m{i}")

    result = await store.provider_events_record(
        [event("m3", BOUNCED), event("m0"), event("m1", COMPLAINED), event("m0", BOUNCED),
         event("m2")], now=T0 + 10)

    # (one number: its first bounce or complaint suppresses it, the rest add nothing)
    assert result == RecordResult(recorded=5, moved=5, suppressed=1)
    assert [await intent_state(store, f"k{i}") for i in range(4)] == [
        State.BOUNCED, State.COMPLAINED, State.DELIVERED, State.BOUNCED]


async def test_concurrent_reports_on_one_intent_end_where_the_table_leads(
    store: Store,
) -> None:
    await accepted(store, "k1", "SM0001")

    await asyncio.gather(*(store.provider_events_record([e], now=T0 + 10) for e in (
        event("SM0001", DELIVERED), event("SM0001", BOUNCED), event("SM0001", DELIVERED))))

    # Whichever came first, a bounce is where the intent ends.
    assert await intent_state(store, "k1") is State.BOUNCED


async def test_an_empty_batch_records_nothing(store: Store) -> None:
    assert await store.provider_events_record([], now=T0) == RecordResult()
    assert await store.provider_event_counts() == []


async def test_concurrent_deliveries_of_one_webhook_record_it_once(store: Store) -> None:
    await accepted(store, "k1", "SM0001")
    batch = [event("SM0001"), event("SM0001", BOUNCED)]

    results = await asyncio.gather(*(
        store.provider_events_record(batch, now=T0 + 10) for _ in range(6)))

    assert sum(r.recorded for r in results) == 2
    assert sum(r.duplicates for r in results) == 10
    assert (await timeline(store, "k1")).count("provider_delivered") == 1
    assert (await timeline(store, "k1")).count("provider_bounced") == 1


# ---------------------------------------------------------------- orphans


async def test_a_report_for_an_unknown_message_is_kept_as_an_orphan(store: Store) -> None:
    await accepted(store, "k1", "SM0001")

    result = await store.provider_events_record(
        [event("SM9999", BOUNCED, detail="ErrorCode 30003"), event("SM0001")], now=T0 + 10)
    again = await store.provider_events_record([event("SM9999", BOUNCED)], now=T0 + 20)

    assert result == RecordResult(recorded=1, orphaned=1, moved=1)
    assert again == RecordResult(duplicates=1)
    [orphan] = await store.provider_events_orphaned()
    assert (orphan.provider, orphan.message_id, orphan.type) == ("twilio", "SM9999", BOUNCED)
    assert (orphan.key, orphan.at, orphan.received_at) == (None, T0 + 5, T0 + 10)
    assert orphan.detail == "ErrorCode 30003"


async def test_orphans_are_listed_oldest_first_up_to_the_limit(store: Store) -> None:
    for i in range(3):
        await store.provider_events_record([event(f"gone-{i}")], now=T0 + i)

    listed = await store.provider_events_orphaned(limit=2)

    assert [o.message_id for o in listed] == ["gone-0", "gone-1"]


async def test_an_orphan_is_adopted_once_its_receipt_is_stored(store: Store) -> None:
    # Given a report that arrived before the worker committed the acceptance.
    await store.provider_events_record([event("SM0001", at=T0 + 2)], now=T0 + 3)
    await accepted(store, "k1", "SM0001", now=T0 + 4)

    adopted = await store.provider_events_adopt(since=T0, now=T0 + 5)
    again = await store.provider_events_adopt(since=T0, now=T0 + 6)

    assert (adopted, again) == (1, 0)
    assert await store.provider_events_orphaned() == []
    assert (await timeline(store, "k1"))[-2:] == ["accepted", "provider_delivered"]
    # Adopted, the report moves its intent as it would have on arrival.
    assert await intent_state(store, "k1") is State.DELIVERED
    assert (await store.events_for("k1"))[-1].state == "delivered"
    # Adopted, it is a duplicate like any event seen before.
    repeat = await store.provider_events_record([event("SM0001")], now=T0 + 9)
    assert repeat == RecordResult(duplicates=1)


async def test_adoption_looks_only_at_orphans_received_since_the_window_start(
    store: Store,
) -> None:
    await store.provider_events_record([event("old")], now=T0)
    await store.provider_events_record([event("new")], now=T0 + 100)
    await accepted(store, "k-old", "old", now=T0 + 200)
    await accepted(store, "k-new", "new", now=T0 + 200)

    assert await store.provider_events_adopt(since=T0 + 50) == 1

    assert [o.message_id for o in await store.provider_events_orphaned()] == ["old"]
    assert "provider_delivered" in await timeline(store, "k-new")
    assert "provider_delivered" not in await timeline(store, "k-old")


async def test_concurrent_adoptions_attach_each_orphan_once(store: Store) -> None:
    await store.provider_events_record([event(f"m{i}") for i in range(5)], now=T0)
    for i in range(5):
        await accepted(store, f"k{i}", f"m{i}", now=T0 + 10)

    adopted = await asyncio.gather(*(store.provider_events_adopt(since=T0) for _ in range(4)))

    assert sum(adopted) == 5
    for i in range(5):
        assert (await timeline(store, f"k{i}")).count("provider_delivered") == 1


# ---------------------------------------------------------------- metrics


async def test_counts_per_provider_and_type_say_how_many_are_orphaned(store: Store) -> None:
    await accepted(store, "k1", "a")
    await accepted(store, "k2", "b", channel="email")
    await store.provider_events_record([
        event("a"), event("a", BOUNCED), event("zzz", BOUNCED),
        event("b", provider="sendgrid"), event("nope", COMPLAINED, provider="sendgrid"),
    ], now=T0 + 10)

    counts = await store.provider_event_counts()

    assert counts == [
        ProviderEventCount(provider="sendgrid", type="complained", total=1, orphaned=1),
        ProviderEventCount(provider="sendgrid", type="delivered", total=1, orphaned=0),
        ProviderEventCount(provider="twilio", type="bounced", total=2, orphaned=1),
        ProviderEventCount(provider="twilio", type="delivered", total=1, orphaned=0),
    ]
    assert (await store.event_counts())["sms"]["provider_bounced"] == 1


# ---------------------------------------------------------------- the guardrails' counts


async def test_outcome_counts_carry_hard_bounces_and_complaints_by_when_recorded(
        store: Store) -> None:
    for n in range(4):
        await accepted(store, f"k{n}", f"SM{n}")
    await store.provider_events_record([
        ProviderEvent(provider="twilio", message_id="SM0", type=BOUNCED, at=T0 + 2,
                      bounce="hard"),
        ProviderEvent(provider="twilio", message_id="SM1", type=BOUNCED, at=T0 + 2),
        ProviderEvent(provider="twilio", message_id="SM2", type=BOUNCED, at=T0 + 2,
                      bounce="soft"),
        ProviderEvent(provider="twilio", message_id="SM3", type=COMPLAINED, at=T0 + 2),
        ProviderEvent(provider="twilio", message_id="nobody", type=COMPLAINED, at=T0 + 2),
    ], now=T0 + 50)

    counts = await store.outcome_counts(since=T0 + 40, bucket_s=10.0)
    late = {(c.channel, c.type): c.count for c in counts}
    # recorded at T0 + 50, whatever time the provider gave; soft bounces and orphans not
    assert late == {("sms", "bounced"): 2, ("sms", "complained"): 1}
    assert {c.bucket for c in counts} == {int((T0 + 50) // 10)}
    assert await store.outcome_counts(since=T0 + 60, bucket_s=10.0) == []
    everything = await store.outcome_counts(since=0.0, bucket_s=10.0)
    assert sum(c.count for c in everything if c.type == "accepted") == 4
