"""The Store conformance suite, provider reports part: what the guardrails
(``outcome_counts``) and ``/metrics`` (``campaign_report_counts``) count of the
providers' bounces and complaints, against their intents' campaign and channel.

A hard bounce, and a bounce the provider did not class, counts as ``bounced``; a soft
bounce and one saying nothing of the address do not; a complaint counts as
``complained``. The guardrails read them by when they were received; an orphaned
report counts once adopted. Runs unchanged on every store adapter, every ``now``
explicit.
"""

from __future__ import annotations

from collections import Counter

from tidings.core.model import IntentDraft
from tidings.core.states import State
from tidings.stores.base import (
    CampaignReports,
    Change,
    ClaimKind,
    OutcomeCount,
    ProviderEvent,
    ProviderEventType,
    Store,
)

T0 = 1_000_000.0
BUCKET = 10.0
BOUNCED = ProviderEventType.BOUNCED
COMPLAINED = ProviderEventType.COMPLAINED


async def accepted(store: Store, campaign: str | None, channel: str, n: int, *,
                   now: float = T0) -> list[str]:
    """Given ``n`` intents of ``campaign`` on ``channel`` accepted at ``now``, each under
    the receipt ``<key>@provider``; their keys."""
    keys = [f"{campaign or 'notify'}:{channel}:{i}" for i in range(n)]
    await store.intent_admit([IntentDraft(
        key=key, channel=channel, recipient_id=f"r{i}", address=f"r{i}@example.com",
        template="t/v1", due_at=now - 10, campaign=campaign,
        occurrence=f"{campaign}/2026-08-10" if campaign else None)
        for i, key in enumerate(keys)], now=now - 10)
    claims = await store.intent_claim_many(keys, owner="w1", lease_s=60, now=now - 5)
    assert all(c.kind is ClaimKind.CLAIMED for c in claims)
    applied = await store.intent_apply_many([Change(
        key=c.key, from_state=State.CLAIMED, to_state=State.ACCEPTED, event="accepted",
        lease_token=c.token, receipt=f"{c.key}@provider") for c in claims], now=now)
    assert sorted(applied) == sorted(keys)
    return keys


def report(key: str, type: ProviderEventType, bounce: str | None = None, *,
           provider: str = "sendgrid") -> ProviderEvent:
    return ProviderEvent(provider=provider, message_id=f"{key}@provider", type=type,
                         at=T0 + 1, bounce=bounce)


def totals(counts: list[OutcomeCount]) -> Counter[tuple[str | None, str, str]]:
    """(campaign, channel, type) -> count, over every bucket."""
    found: Counter[tuple[str | None, str, str]] = Counter()
    for c in counts:
        found[(c.campaign, c.channel, c.type)] += c.count
    return found


async def test_outcome_counts_count_hard_bounces_and_complaints_per_campaign_and_channel(
    store: Store,
) -> None:
    digest = await accepted(store, "digest", "email", 6)
    alerts = await accepted(store, "alerts", "sms", 3)
    one_off = await accepted(store, None, "email", 2)
    await store.provider_events_record([
        report(digest[0], BOUNCED, "hard"),
        report(digest[1], BOUNCED),  # unclassified: taken as hard
        report(digest[2], BOUNCED, "soft"),  # a strike toward suppression, no more
        report(digest[3], BOUNCED, "other"),  # an auto-reply: nothing of the address
        report(digest[4], COMPLAINED),
        report(digest[4], COMPLAINED),  # a replay counts once
        report(digest[5], ProviderEventType.DELIVERED),
        report(alerts[0], BOUNCED, "hard", provider="twilio"),
        report(one_off[0], COMPLAINED),
    ], now=T0 + 30)

    counts = await store.outcome_counts(since=T0 - 100, bucket_s=BUCKET)

    found = totals(counts)
    assert found[("digest", "email", "accepted")] == 6
    assert found[("digest", "email", "bounced")] == 2
    assert found[("digest", "email", "complained")] == 1
    assert found[("alerts", "sms", "bounced")] == 1
    assert found[("alerts", "sms", "complained")] == 0
    assert found[(None, "email", "complained")] == 1
    assert not {t for (_, _, t) in found} & {"delivered", "provider_bounced"}
    # A report's bucket is when it was received, not when the provider says it happened.
    assert {c.bucket for c in counts if c.type in ("bounced", "complained")} == {
        int((T0 + 30) // BUCKET)}


async def test_outcome_counts_read_reports_by_when_they_were_received(store: Store) -> None:
    keys = await accepted(store, "digest", "email", 3)
    await store.provider_events_record([report(keys[0], COMPLAINED)], now=T0 + 10)
    await store.provider_events_record([report(keys[1], COMPLAINED)], now=T0 + 500)

    late = totals(await store.outcome_counts(since=T0 + 100, bucket_s=BUCKET))

    assert late[("digest", "email", "complained")] == 1
    assert late[("digest", "email", "accepted")] == 0  # accepted before the window


async def test_an_orphaned_report_counts_once_adopted(store: Store) -> None:
    await store.provider_events_record([ProviderEvent(
        provider="sendgrid", message_id="digest:email:0@provider", type=BOUNCED,
        at=T0 - 1)], now=T0 - 1)
    assert totals(await store.outcome_counts(since=T0 - 100, bucket_s=BUCKET))[
        ("digest", "email", "bounced")] == 0

    await accepted(store, "digest", "email", 1)
    assert await store.provider_events_adopt(since=T0 - 100, now=T0 + 5) == 1

    found = totals(await store.outcome_counts(since=T0 - 100, bucket_s=BUCKET))
    assert found[("digest", "email", "bounced")] == 1


async def test_campaign_report_counts_per_campaign_and_channel(store: Store) -> None:
    digest = await accepted(store, "digest", "email", 4)
    alerts = await accepted(store, "alerts", "sms", 2)
    one_off = await accepted(store, None, "email", 1)
    await accepted(store, "quiet", "email", 2)  # nothing reported: no row
    await store.provider_events_record([
        report(digest[0], BOUNCED, "hard"), report(digest[1], BOUNCED, "soft"),
        report(digest[2], BOUNCED), report(digest[2], COMPLAINED),
        report(alerts[1], BOUNCED, "hard", provider="twilio"),
        report(one_off[0], COMPLAINED),
        ProviderEvent(provider="sendgrid", message_id="nobody", type=COMPLAINED, at=T0),
    ], now=T0 + 30)

    assert await store.campaign_report_counts() == [
        CampaignReports(campaign=None, channel="email", bounced=0, complained=1),
        CampaignReports(campaign="alerts", channel="sms", bounced=1, complained=0),
        CampaignReports(campaign="digest", channel="email", bounced=2, complained=1),
    ]
