"""Guardrails on what providers report: a campaign whose hard bounces or complaints per
*accepted* send cross the threshold has its admission paused; soft bounces are not
counted, ``min_sends`` counts accepted sends, and a report received before the
switch's last change is not read again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from support.crm import QUERY
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.errors import ConfigurationError
from tidings.core.model import IntentDraft
from tidings.core.states import State
from tidings.operate.guardrails import (
    BUCKETS,
    GuardrailConfig,
    Reading,
    Thresholds,
    enforce,
    readings,
    tripped_by_guardrail,
)
from tidings.runtime import Runtime, build_runtime
from tidings.stores.base import (
    Change,
    ClaimKind,
    OutcomeCount,
    ProviderEvent,
    ProviderEventType,
    Store,
    Switch,
)

WINDOW = 300.0
WIDTH = WINDOW / BUCKETS
NOW = 100_000.0


def config(min_sends: int = 20, **limits: float) -> GuardrailConfig:
    return GuardrailConfig(window_s=WINDOW, min_sends=min_sends,
                           channels={"email": Thresholds()},
                           campaigns={"alpha": Thresholds(**limits)})


def count(kind: str, n: int, at: float = NOW, campaign: str = "alpha") -> OutcomeCount:
    return OutcomeCount(channel="email", campaign=campaign, type=kind,
                        bucket=int(at // WIDTH), count=n)


def reading(found: list[Reading], measure: str) -> Reading:
    [only] = [r for r in found if r.scope == "campaign" and r.measure == measure]
    return only


# ---------------------------------------------------------------- the rule (pure)


def test_a_complaint_rate_is_a_share_of_accepted_sends_only() -> None:
    # Rejections are sends with an answer, but nobody can complain about them.
    counts = [count("accepted", 100), count("rejected", 100), count("complained", 1)]

    found = readings(counts, {}, config(complaint_rate=0.003), [], NOW)

    complaints = reading(found, "complaint_rate")
    assert complaints.tripped
    assert (complaints.events, complaints.sends, complaints.value) == (1, 100, 0.01)
    assert complaints.reason(WINDOW) == (
        "guardrail: complaint_rate 0.010 > 0.003 over 300s (1 of 100 accepted sends)")


def test_min_sends_counts_accepted_sends_for_the_reports() -> None:
    # 40 sends with an answer, but only 19 of them accepted: too few to judge.
    counts = [count("accepted", 19), count("rejected", 21), count("complained", 5),
              count("bounced", 5)]

    found = readings(counts, {}, config(complaint_rate=0.003, bounce_rate=0.05,
                                        rejection_rate=0.9), [], NOW)

    assert not [r for r in found if r.tripped]
    assert reading(found, "complaint_rate").value == 0.0
    assert reading(found, "rejection_rate").sends == 40


def test_a_report_rate_is_capped_at_one() -> None:
    # Bounces of an earlier window's sends arrive beside fewer sends of this one.
    counts = [count("accepted", 20), count("bounced", 30)]

    bounces = reading(readings(counts, {}, config(bounce_rate=0.05), [], NOW), "bounce_rate")

    assert (bounces.value, bounces.events, bounces.sends) == (1.0, 30, 20)
    assert bounces.tripped


def test_reports_before_the_switch_changed_are_not_read_again() -> None:
    old = NOW - 120.0
    counts = [count("accepted", 100, old), count("complained", 3, old),
              count("accepted", 100, NOW)]
    resumed = Switch(scope="campaign", name="alpha", paused=False, changed_at=NOW - 60.0,
                     reason=None)

    assert reading(readings(counts, {}, config(complaint_rate=0.003), [], NOW),
                   "complaint_rate").tripped
    after = reading(readings(counts, {}, config(complaint_rate=0.003), [resumed], NOW),
                    "complaint_rate")
    assert (after.tripped, after.events, after.sends) == (False, 0, 100)


def test_the_settings_bound_the_report_rates() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.parse({"guardrails": {"complaint_rate": 0}})
    assert caught.value.field == "guardrails.complaint_rate"
    with pytest.raises(ConfigurationError) as caught:
        Settings.parse({"guardrails": {"campaigns": {"x": {"bounce_rate": 1.5}}}})
    assert caught.value.field == "guardrails.campaigns.x.bounce_rate"


# ---------------------------------------------------------------- enforced on a store


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    settings = Settings.parse({
        "store": f"sqlite:///{tmp_path / 't.db'}",
        "channels": {"email": {"provider": {"kind": "sandbox-twin"}}},
        "guardrails": {"min_sends": 20, "complaint_rate": 0.003, "bounce_rate": 0.05,
                       # the channel as a whole (both campaigns) is judged loosely
                       "channels": {"email": {"complaint_rate": 0.9, "bounce_rate": 0.9}}},
        "campaigns": {name: {"cron": "0 9 * * *", "channels": ["email"], "template": "t",
                             "audience": {"sql": {"url": f"sqlite:///{tmp_path / 'crm.db'}",
                                                 "query": QUERY}}}
                      for name in ("alpha", "beta")}})
    built = await build_runtime(settings, clock=FakeClock(NOW))
    async with built:
        yield built


async def accepted(store: Store, campaign: str, n: int, *, now: float,
                   first: int = 0) -> list[str]:
    """Given ``n`` intents of ``campaign`` accepted at ``now`` (receipt ``<key>@sg``)."""
    keys = [f"{campaign}/k{i}" for i in range(first, first + n)]
    await store.intent_admit([
        IntentDraft(key=key, channel="email", recipient_id=key, address="x@example.com",
                    template="t/v1", due_at=0.0, campaign=campaign,
                    occurrence=f"{campaign}/2026-08-10") for key in keys], now=now - 2)
    claims = await store.intent_claim_many(keys, owner="w1", lease_s=30, now=now - 1)
    assert all(c.kind is ClaimKind.CLAIMED for c in claims)
    await store.intent_apply_many([
        Change(key=c.key, from_state=State.CLAIMED, to_state=State.ACCEPTED, event="accepted",
               lease_token=c.token, receipt=f"{c.key}@sg") for c in claims], now=now)
    return keys


async def reported(store: Store, keys: list[str], type: ProviderEventType, *,
                   now: float, bounce: str | None = None) -> None:
    await store.provider_events_record([
        ProviderEvent(provider="sendgrid", message_id=f"{key}@sg", type=type, at=now,
                      bounce=bounce) for key in keys], now=now)


async def test_one_complaint_in_a_hundred_accepted_sends_pauses_that_campaign(
        runtime: Runtime) -> None:
    store, clock = runtime.store, runtime.clock
    alpha = await accepted(store, "alpha", 100, now=clock.now())
    await accepted(store, "beta", 400, now=clock.now())
    clock.advance(5)
    await reported(store, alpha[:1], ProviderEventType.COMPLAINED, now=clock.now())

    tripped = await enforce(store, runtime.transport, runtime.guardrails(), now=clock.now())

    assert [(r.scope, r.name, r.measure) for r in tripped] == [
        ("campaign", "alpha", "complaint_rate")]
    switches = {s.name: s for s in await store.switch_all()}
    assert tripped_by_guardrail(switches["alpha"]) and "beta" not in switches
    reason = ("guardrail: complaint_rate 0.010 > 0.003 over 300s "
              "(1 of 100 accepted sends)")
    assert switches["alpha"].reason == reason
    [trail] = await store.events_for("admission/campaign/alpha")
    assert (trail.type, trail.detail) == ("guardrail_tripped", reason)


async def test_too_few_accepted_sends_are_not_judged(runtime: Runtime) -> None:
    store, clock = runtime.store, runtime.clock
    alpha = await accepted(store, "alpha", 19, now=clock.now())
    clock.advance(5)
    await reported(store, alpha[:5], ProviderEventType.COMPLAINED, now=clock.now())
    await reported(store, alpha[5:10], ProviderEventType.BOUNCED, now=clock.now())

    assert await enforce(store, runtime.transport, runtime.guardrails(), now=clock.now()) == []
    assert await store.switch_all() == []


async def test_soft_bounces_are_not_counted_hard_and_unclassified_ones_are(
        runtime: Runtime) -> None:
    store, clock = runtime.store, runtime.clock
    alpha = await accepted(store, "alpha", 100, now=clock.now())
    clock.advance(5)
    await reported(store, alpha[:40], ProviderEventType.BOUNCED, now=clock.now(),
                   bounce="soft")
    await reported(store, alpha[40:50], ProviderEventType.BOUNCED, now=clock.now(),
                   bounce="other")
    await reported(store, alpha[50:53], ProviderEventType.BOUNCED, now=clock.now(),
                   bounce="hard")
    await reported(store, alpha[53:55], ProviderEventType.BOUNCED, now=clock.now())

    # 5 of 100: at the threshold, not over it.
    assert await enforce(store, runtime.transport, runtime.guardrails(), now=clock.now()) == []

    clock.advance(1)
    await reported(store, alpha[55:56], ProviderEventType.BOUNCED, now=clock.now(),
                   bounce="hard")
    [trip] = await enforce(store, runtime.transport, runtime.guardrails(), now=clock.now())
    assert trip.reason(WINDOW) == ("guardrail: bounce_rate 0.060 > 0.05 over 300s "
                                   "(6 of 100 accepted sends)")


async def test_a_report_older_than_the_switch_change_is_not_counted(runtime: Runtime) -> None:
    store, clock = runtime.store, runtime.clock
    cfg = runtime.guardrails()
    alpha = await accepted(store, "alpha", 100, now=clock.now())
    clock.advance(5)
    await reported(store, alpha[:2], ProviderEventType.COMPLAINED, now=clock.now())
    assert len(await enforce(store, runtime.transport, cfg, now=clock.now())) == 1

    # An operator resumes; a complaint about a send before the resume, received before
    # it, is not read again, and the sends since are too few to judge.
    clock.advance(20)
    await store.switch_set(scope="campaign", name="alpha", paused=False, now=clock.now())
    clock.advance(20)
    assert await enforce(store, runtime.transport, cfg, now=clock.now()) == []

    # Fresh evidence is: 100 sends accepted after the resume, one complaint.
    fresh = await accepted(store, "alpha", 100, now=clock.now(), first=100)
    await reported(store, fresh[:1], ProviderEventType.COMPLAINED, now=clock.now())
    [trip] = await enforce(store, runtime.transport, cfg, now=clock.now())
    assert (trip.measure, trip.events, trip.sends) == ("complaint_rate", 1, 100)
