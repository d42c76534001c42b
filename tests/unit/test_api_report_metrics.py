"""``/metrics`` counts what providers report per campaign, on both stores: accepted
sends, hard (and unclassified) bounces and complaints against them, and their rates
once ``guardrails.min_sends`` sends were accepted; soft bounces are not counted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from apikit import T0, Api, open_api

from tidings.core.model import IntentDraft
from tidings.core.states import State
from tidings.stores.base import Change, ClaimKind, ProviderEvent, ProviderEventType


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'api.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
async def api(tmp_path: Path, store_url: str) -> AsyncIterator[Api]:
    async with open_api(tmp_path, store=store_url) as opened:
        yield opened


async def accepted(api: Api, campaign: str | None, channel: str, n: int) -> list[str]:
    """Given ``n`` intents of ``campaign`` on ``channel`` the provider accepted."""
    store, now = api.runtime.store, api.clock.now()
    keys = [f"{campaign or 'order'}:{channel}:{i}" for i in range(n)]
    await store.intent_admit([IntentDraft(
        key=key, channel=channel, recipient_id=f"c{i}", address=f"c{i}@example.com",
        template="weekly-digest/v3", due_at=now, campaign=campaign,
        occurrence=f"{campaign}/2026-08-14" if campaign else None)
        for i, key in enumerate(keys)], now=now)
    claims = await store.intent_claim_many(keys, owner="w1", lease_s=30, now=now)
    assert all(c.kind is ClaimKind.CLAIMED for c in claims)
    await store.intent_apply_many([Change(
        key=c.key, from_state=State.CLAIMED, to_state=State.ACCEPTED, event="accepted",
        lease_token=c.token, receipt=f"{c.key}@sg") for c in claims], now=now + 1)
    return keys


def report(key: str, type: ProviderEventType, bounce: str | None = None) -> ProviderEvent:
    return ProviderEvent(provider="sendgrid", message_id=f"{key}@sg", type=type, at=T0,
                         bounce=bounce)


async def test_metrics_count_bounces_and_complaints_per_campaign(api: Api) -> None:
    email = await accepted(api, "weekly-digest", "email", 40)
    sms = await accepted(api, "weekly-digest", "sms", 5)
    orders = await accepted(api, None, "email", 20)
    bounced, complained = ProviderEventType.BOUNCED, ProviderEventType.COMPLAINED
    await api.runtime.store.provider_events_record([
        report(email[0], bounced, "hard"), report(email[1], bounced),
        report(email[2], bounced, "soft"), report(email[3], bounced, "soft"),
        report(email[4], complained),
        report(sms[0], bounced, "hard"),
        report(orders[0], complained),
    ], now=T0 + 10)
    api.clock.advance(60)  # past the metrics' cache

    answer = await api.client.get("/metrics", headers=api.auth("viewer"))

    assert answer.status_code == 200
    lines = set(answer.text.splitlines())
    digest_email = 'campaign="weekly-digest",channel="email"'
    digest_sms = 'campaign="weekly-digest",channel="sms"'
    one_off = 'campaign="",channel="email"'
    for line in (
        f"tidings_campaign_accepted_total{{{digest_email}}} 40.0",
        f"tidings_campaign_bounced_total{{{digest_email}}} 2.0",  # soft ones left out
        f"tidings_campaign_complained_total{{{digest_email}}} 1.0",
        f"tidings_campaign_bounce_rate{{{digest_email}}} 0.05",
        f"tidings_campaign_complaint_rate{{{digest_email}}} 0.025",
        f"tidings_campaign_accepted_total{{{digest_sms}}} 5.0",
        f"tidings_campaign_bounced_total{{{digest_sms}}} 1.0",
        f"tidings_campaign_complained_total{{{digest_sms}}} 0.0",
        f"tidings_campaign_accepted_total{{{one_off}}} 20.0",
        f"tidings_campaign_complaint_rate{{{one_off}}} 0.05",
        f"tidings_campaign_bounce_rate{{{one_off}}} 0.0",
    ):
        assert line in lines, line
    # 5 accepted sms sends are under min_sends (20): no rate to alert on.
    assert not [line for line in lines if line.startswith("tidings_campaign_")
                and "_rate{" in line and digest_sms in line]


async def test_metrics_with_nothing_reported_count_the_accepted_sends(api: Api) -> None:
    await accepted(api, "weekly-digest", "email", 20)

    text = (await api.client.get("/metrics", headers=api.auth("viewer"))).text

    lines = set(text.splitlines())
    assert ('tidings_campaign_bounced_total{campaign="weekly-digest",channel="email"} 0.0'
            in lines)
    assert ('tidings_campaign_complaint_rate{campaign="weekly-digest",channel="email"} 0.0'
            in lines)
