"""Store conformance: the suppression list, and what provider reports add to it.

An address (normalised) is suppressed once per channel kind, the first suppression
standing; reads come in one batch; removal returns what it removed. A hard bounce or a
complaint recorded by ``provider_events_record`` suppresses its intent's address in the
same transaction, soft bounces count toward the threshold within the window, and a
replayed report adds nothing. Runs unchanged on every store backend (see conftest.py).
"""

from __future__ import annotations

import asyncio

from tidings.core.model import IntentDraft
from tidings.core.states import State
from tidings.core.suppression import Reason, Suppression, SuppressionRules
from tidings.stores.base import (
    Change,
    ClaimKind,
    OccurrenceProgress,
    ProviderEvent,
    ProviderEventType,
    Store,
)

T0 = 1_000_000.0
BOUNCED = ProviderEventType.BOUNCED


def entry(address: str, kind: str = "email", reason: Reason = Reason.MANUAL, *,
          source: str = "operator:ops", key: str | None = None, at: float = T0,
          detail: str | None = None) -> Suppression:
    return Suppression(address=address, kind=kind, reason=reason, source=source,
                       created_at=at, key=key, detail=detail)


async def accepted(store: Store, key: str, receipt: str, *, address: str = "Ann@Example.COM",
                   channel: str = "email", now: float = T0) -> None:
    """Given an intent to ``address`` its provider accepted under ``receipt``."""
    await store.intent_admit([IntentDraft(key=key, channel=channel, recipient_id="c1",
                                          address=address, template="t/v1", due_at=now)],
                             now=now)
    [claim] = await store.intent_claim_many([key], owner="w1", lease_s=30, now=now)
    assert claim.kind is ClaimKind.CLAIMED
    await store.intent_apply_many([Change(
        key=key, from_state=State.CLAIMED, to_state=State.ACCEPTED, event="accepted",
        lease_token=claim.token, receipt=receipt)], now=now)


def report(message_id: str, type: ProviderEventType = BOUNCED, *, bounce: str | None = None,
           at: float = T0 + 5, provider: str = "sendgrid") -> ProviderEvent:
    return ProviderEvent(provider=provider, message_id=message_id, type=type, at=at,
                         detail="550 mailbox unknown", bounce=bounce)


# ---------------------------------------------------------------- the list itself


async def test_an_address_is_suppressed_once_the_first_entry_standing(store: Store) -> None:
    first = entry("ann@example.com", reason=Reason.HARD_BOUNCE, source="webhook:x:1")

    added = await store.suppression_add_many([first], now=T0)
    again = await store.suppression_add_many(
        [entry("ann@example.com", reason=Reason.MANUAL)], now=T0 + 1)

    assert added == [first] and again == []
    assert await store.suppressions_for([("ann@example.com", "email")]) == {
        ("ann@example.com", "email"): first}


async def test_the_same_address_on_another_kind_is_another_entry(store: Store) -> None:
    added = await store.suppression_add_many(
        [entry("+15550001111", "sms"), entry("+15550001111", "email"),
         entry("+15550001111", "sms", Reason.SMS_STOP)], now=T0)

    assert [(e.kind, e.reason) for e in added] == [("sms", Reason.MANUAL),
                                                  ("email", Reason.MANUAL)]


async def test_a_batch_read_answers_many_pairs_and_skips_the_rest(store: Store) -> None:
    await store.suppression_add_many([entry(f"r{i}@example.com") for i in range(0, 300, 3)],
                                     now=T0)

    found = await store.suppressions_for(
        [(f"r{i}@example.com", "email") for i in range(300)] + [("r0@example.com", "sms"),
                                                                ("r0@example.com", "email")])

    assert sorted(found) == sorted((f"r{i}@example.com", "email") for i in range(0, 300, 3))
    assert await store.suppressions_for([]) == {}


async def test_removal_returns_what_it_removed_and_then_nothing(store: Store) -> None:
    kept = entry("ann@example.com", detail="asked by phone")
    await store.suppression_add_many([kept], now=T0)

    removed = await store.suppression_remove("ann@example.com", "email")
    again = await store.suppression_remove("ann@example.com", "email")

    assert (removed, again) == (kept, None)
    assert await store.suppressions_for([("ann@example.com", "email")]) == {}
    # Removed, it may be suppressed again (a new bounce, say).
    assert await store.suppression_add_many([kept], now=T0 + 9) == [kept]


async def test_the_list_pages_in_address_order_narrowed_by_kind_and_reason(
    store: Store,
) -> None:
    await store.suppression_add_many([
        entry("b@example.com", reason=Reason.COMPLAINT), entry("a@example.com"),
        entry("+15550002222", "sms", Reason.SMS_STOP), entry("c@example.com"),
        entry("a@example.com", "sms")], now=T0)

    every = await store.suppression_list()
    first = await store.suppression_list(limit=2)
    rest = await store.suppression_list(after=(first[-1].address, first[-1].kind))

    assert [(e.address, e.kind) for e in every] == [
        ("+15550002222", "sms"), ("a@example.com", "email"), ("a@example.com", "sms"),
        ("b@example.com", "email"), ("c@example.com", "email")]
    assert first + rest == every
    assert [e.address for e in await store.suppression_list(kind="sms")] == [
        "+15550002222", "a@example.com"]
    assert [e.address for e in await store.suppression_list(reason=Reason.MANUAL)] == [
        "a@example.com", "a@example.com", "c@example.com"]
    assert await store.suppression_counts() == {
        ("email", "complaint"): 1, ("email", "manual"): 2, ("sms", "manual"): 1,
        ("sms", "sms_stop"): 1}


async def test_an_entry_naming_an_intent_leaves_an_event_on_its_timeline(
    store: Store,
) -> None:
    await accepted(store, "k1", "m-1")

    await store.suppression_add_many([entry("ann@example.com", reason=Reason.SMS_STOP,
                                            key="k1", detail="Twilio error 21610")],
                                     now=T0 + 3)
    await store.suppression_add_many([entry("ann@example.com", key="k1")], now=T0 + 4)

    [event] = [e for e in await store.events_for("k1") if e.type == "address_suppressed"]
    assert (event.at, event.state, event.detail) == (T0 + 3, "accepted",
                                                     "sms_stop: Twilio error 21610")


async def test_concurrent_additions_of_one_address_add_it_once(store: Store) -> None:
    results = await asyncio.gather(*(
        store.suppression_add_many([entry("ann@example.com", source=f"operator:{i}")],
                                   now=T0) for i in range(6)))

    assert sum(len(r) for r in results) == 1


async def test_odd_addresses_round_trip(store: Store) -> None:
    odd = ["o'brien@example.com", "ünï@exämple.com", '"a b"@example.com', "+4930123456"]
    await store.suppression_add_many([entry(a) for a in odd], now=T0)

    found = await store.suppressions_for([(a, "email") for a in odd])

    assert sorted(found) == sorted((a, "email") for a in odd)


# ---------------------------------------------------------------- from provider reports


async def test_a_hard_bounce_suppresses_the_intents_address_normalised(store: Store) -> None:
    await accepted(store, "k1", "m-1", address="  Ann@Example.COM ")

    result = await store.provider_events_record([report("m-1", bounce="hard")], now=T0 + 10)

    assert result.suppressed == 1
    found = await store.suppressions_for([("ann@example.com", "email")])
    assert found == {("ann@example.com", "email"): Suppression(
        address="ann@example.com", kind="email", reason=Reason.HARD_BOUNCE,
        source="webhook:sendgrid:m-1", created_at=T0 + 10, key="k1",
        detail="550 mailbox unknown")}
    assert [e.type for e in await store.events_for("k1")][-2:] == [
        "provider_bounced", "address_suppressed"]


async def test_a_complaint_suppresses_and_a_delivery_or_failure_does_not(store: Store) -> None:
    await accepted(store, "k1", "m-1", address="a@example.com")
    await accepted(store, "k2", "m-2", address="b@example.com")

    await store.provider_events_record([
        report("m-1", ProviderEventType.DELIVERED), report("m-1", ProviderEventType.FAILED),
        report("m-2", ProviderEventType.COMPLAINED)], now=T0 + 10)

    assert [(e.address, e.reason) for e in await store.suppression_list()] == [
        ("b@example.com", Reason.COMPLAINT)]


async def test_a_replayed_bounce_adds_nothing(store: Store) -> None:
    await accepted(store, "k1", "m-1")
    await store.provider_events_record([report("m-1")], now=T0 + 10)

    replay = await store.provider_events_record([report("m-1")], now=T0 + 20)

    assert replay.suppressed == 0
    [only] = await store.suppression_list()
    assert only.created_at == T0 + 10


async def test_the_channel_kind_comes_from_the_rules(store: Store) -> None:
    await accepted(store, "k1", "SM1", address="+1 (555) 000-1111", channel="texts")
    rules = SuppressionRules(kinds={"texts": "sms"})

    await store.provider_events_record([report("SM1", provider="twilio")], now=T0 + 10,
                                       rules=rules)

    assert [(e.address, e.kind) for e in await store.suppression_list()] == [
        ("+15550001111", "sms")]


async def test_soft_bounces_suppress_once_they_reach_the_limit_in_the_window(
    store: Store,
) -> None:
    rules = SuppressionRules(soft_bounce_limit=3, soft_bounce_window_s=100.0)
    for i in range(4):
        await accepted(store, f"k{i}", f"m-{i}", address="ann@example.com")

    # An old soft bounce, past the window by the time the others come.
    await store.provider_events_record([report("m-0", bounce="soft", at=T0)], now=T0,
                                       rules=rules)
    later = T0 + 500
    second = await store.provider_events_record(
        [report("m-1", bounce="soft", at=later)], now=later, rules=rules)
    third = await store.provider_events_record(
        [report("m-2", bounce="soft", at=later + 1)], now=later + 1, rules=rules)
    assert (second.suppressed, third.suppressed) == (0, 0)
    assert await store.suppression_list() == []

    fourth = await store.provider_events_record(
        [report("m-3", bounce="soft", at=later + 2)], now=later + 2, rules=rules)

    assert fourth.suppressed == 1
    [made] = await store.suppression_list()
    assert (made.reason, made.source, made.key) == (Reason.SOFT_BOUNCES,
                                                    "webhook:sendgrid:m-3", "k3")
    assert made.detail == "3 soft bounces within 100 s"


async def test_soft_bounces_of_one_batch_count_together_and_a_replay_counts_once(
    store: Store,
) -> None:
    rules = SuppressionRules(soft_bounce_limit=2, soft_bounce_window_s=3600.0)
    await accepted(store, "k1", "m-1")
    await accepted(store, "k2", "m-2")
    await store.provider_events_record([report("m-1", bounce="soft")], now=T0 + 10,
                                       rules=rules)
    again = await store.provider_events_record([report("m-1", bounce="soft")], now=T0 + 11,
                                               rules=rules)
    assert again.suppressed == 0

    both = await store.provider_events_record(
        [report("m-2", bounce="soft"), report("m-2", bounce="soft", provider="generic")],
        now=T0 + 12, rules=rules)

    assert both.suppressed == 1


async def test_a_limit_of_zero_never_suppresses_on_soft_bounces(store: Store) -> None:
    rules = SuppressionRules(soft_bounce_limit=0)
    for i in range(5):
        await accepted(store, f"k{i}", f"m-{i}")
        await store.provider_events_record([report(f"m-{i}", bounce="soft")],
                                           now=T0 + 10 + i, rules=rules)

    assert await store.suppression_list() == []


async def test_a_bounce_that_says_nothing_about_the_address_neither(store: Store) -> None:
    await accepted(store, "k1", "m-1")

    await store.provider_events_record([report("m-1", bounce="other")], now=T0 + 10)

    assert await store.suppression_list() == []


async def test_an_adopted_orphan_suppresses_as_it_would_have_on_arrival(store: Store) -> None:
    await store.provider_events_record([report("m-1", bounce="hard")], now=T0 + 1)
    await accepted(store, "k1", "m-1", now=T0 + 2)

    assert await store.provider_events_adopt(since=T0, now=T0 + 3) == 1

    [made] = await store.suppression_list()
    assert (made.reason, made.key, made.created_at) == (Reason.HARD_BOUNCE, "k1", T0 + 3)


# ---------------------------------------------------------------- what the rest reads


async def test_a_page_counts_its_suppressed_members_on_its_occurrence_once(
    store: Store,
) -> None:
    await store.occurrence_open(id="weekly/2026-09-16", campaign="weekly", logical_at=T0,
                                logical_date="2026-09-16", kind="scheduled", now=T0)
    page = [IntentDraft(key=f"weekly/2026-09-16/c{i}/email/v1", channel="email",
                        recipient_id=f"c{i}", address=f"c{i}@example.com", template="w/v1",
                        due_at=T0) for i in range(2)]
    progress = OccurrenceProgress(occurrence="weekly/2026-09-16", high_water="c4", members=4,
                                  skipped=1, suppressed=1)

    await store.intent_admit(page, now=T0, progress=progress)
    await store.intent_admit(page, now=T0, progress=progress)  # a second scheduler, late

    occurrence = await store.occurrence_get("weekly/2026-09-16")
    assert occurrence is not None
    assert (occurrence.members, occurrence.admitted, occurrence.skipped,
            occurrence.suppressed) == (4, 2, 1, 1)


async def test_a_suppressed_intent_is_terminal_and_counted_apart(store: Store) -> None:
    await store.intent_admit([IntentDraft(key="k1", channel="email", recipient_id="c1",
                                          address="a@example.com", template="t/v1",
                                          due_at=T0)], now=T0)
    [claim] = await store.intent_claim_many(["k1"], owner="w1", lease_s=30, now=T0)

    await store.intent_apply_many([Change(
        key="k1", from_state=State.CLAIMED, to_state=State.SUPPRESSED, event="suppressed",
        lease_token=claim.token, reason="hard_bounce")], now=T0 + 1)
    [again] = await store.intent_claim_many(["k1"], owner="w2", lease_s=30, now=T0 + 2)

    intent = await store.intent_get("k1")
    assert intent is not None
    assert (intent.state, intent.reason, intent.finished_at) == (State.SUPPRESSED,
                                                                 "hard_bounce", T0 + 1)
    assert again.kind is ClaimKind.DONE  # a redelivery sends nothing
    [summary] = await store.intent_summary(now=T0 + 3, since=T0)
    assert (summary.suppressed, summary.rejected, summary.cancelled) == (1, 0, 0)
