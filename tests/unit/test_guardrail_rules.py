"""Guardrails: the readings are pure; enforcement pauses admission once, on evidence
newer than the switch's last change, and only an operator resumes."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.crm import QUERY
from tidings.config.settings import Settings
from tidings.core.errors import ConfigurationError
from tidings.core.model import Event, IntentDraft
from tidings.operate.guardrails import (
    BUCKETS,
    GuardrailConfig,
    Thresholds,
    enforce,
    readings,
    tripped_by_guardrail,
)
from tidings.runtime import build_runtime
from tidings.stores.base import OutcomeCount, Switch

WINDOW = 300.0
WIDTH = WINDOW / BUCKETS
NOW = 100_000.0


def config(**limits: float) -> GuardrailConfig:
    return GuardrailConfig(window_s=WINDOW, min_sends=20,
                           channels={"email": Thresholds()},
                           campaigns={"alpha": Thresholds(**limits),
                                      "beta": Thresholds(**limits)})


def count(campaign: str | None, kind: str, n: int, at: float = NOW) -> OutcomeCount:
    return OutcomeCount(channel="email", campaign=campaign, type=kind,
                        bucket=int(at // WIDTH), count=n)


def tripped(found: list) -> set[tuple[str, str, str]]:  # type: ignore[type-arg]
    return {(r.scope, r.name, r.measure) for r in found if r.tripped}


def test_a_rate_over_its_threshold_trips_that_campaign_only() -> None:
    counts = [count("alpha", "accepted", 30), count("alpha", "rejected", 10),
              count("beta", "accepted", 40), count("beta", "rejected", 1)]

    found = readings(counts, {}, config(rejection_rate=0.2), [], NOW)

    assert tripped(found) == {("campaign", "alpha", "rejection_rate")}
    [alpha] = [r for r in found if r.name == "alpha"]
    assert (alpha.events, alpha.sends, alpha.value) == (10, 40, 0.25)
    assert alpha.reason(WINDOW) == ("guardrail: rejection_rate 0.250 > 0.2 over 300s "
                                    "(10 of 40 sends)")


def test_too_few_sends_are_not_judged() -> None:
    counts = [count("alpha", "rejected", 19)]
    assert tripped(readings(counts, {}, config(rejection_rate=0.2), [], NOW)) == set()


def test_evidence_older_than_the_switch_is_not_read_again() -> None:
    # An operator resumed alpha after the bad minute: no flapping back on old evidence.
    old = NOW - 120.0
    counts = [count("alpha", "accepted", 30, old), count("alpha", "rejected", 30, old)]
    resumed = Switch(scope="campaign", name="alpha", paused=False, changed_at=NOW - 60.0,
                     reason=None)

    assert tripped(readings(counts, {}, config(rejection_rate=0.2), [], NOW))
    assert tripped(readings(counts, {}, config(rejection_rate=0.2), [resumed], NOW)) == set()


def test_every_rate_and_the_queue_age_have_a_threshold() -> None:
    cfg = GuardrailConfig(window_s=WINDOW, min_sends=1, campaigns={},
                          channels={"email": Thresholds(duplicate_rate=0.1, rate_limited_rate=0.1,
                                                        dead_rate=0.1,
                                                        oldest_message_age_s=600.0)})
    counts = [count(None, "accepted", 10), count(None, "duplicate_observed", 2),
              count(None, "rate_limited", 2), count(None, "dead", 2)]

    found = readings(counts, {"email": 601.0}, cfg, [], NOW)

    assert tripped(found) == {("channel", "email", m) for m in (
        "duplicate_rate", "rate_limited_rate", "dead_rate", "oldest_message_age_s")}


def test_settings_name_only_declared_channels_and_campaigns() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.parse({"channels": {"email": {}}, "guardrails": {"channels": {"fax": {}}}})
    assert caught.value.field == "guardrails.channels.fax"
    with pytest.raises(ConfigurationError) as caught:
        Settings.parse({"guardrails": {"rejection_rate": 1.5}})
    assert caught.value.field == "guardrails.rejection_rate"


async def test_enforce_pauses_once_records_why_and_waits_for_an_operator(
        tmp_path: Path) -> None:
    settings = Settings.parse({
        "store": f"sqlite:///{tmp_path / 't.db'}",
        "channels": {"email": {"provider": {"kind": "sandbox-twin"}}},
        "guardrails": {"rejection_rate": 0.2, "campaigns": {"beta": {"rejection_rate": 0.9}},
                       "channels": {"email": {"rejection_rate": 0.9}}},
        "campaigns": {name: {"cron": "0 9 * * *", "channels": ["email"], "template": "t",
                             "audience": {"sql": {"url": f"sqlite:///{tmp_path / 'crm.db'}",
                                                 "query": QUERY}}}
                      for name in ("alpha", "beta")}})
    runtime = await build_runtime(settings)
    async with runtime:
        store = runtime.store
        await store.intent_admit([
            IntentDraft(key=f"{c}/k{i}", channel="email", recipient_id=f"k{i}",
                        address="x@example.com", template="t/v1", due_at=0.0, campaign=c,
                        occurrence=f"{c}/2026-08-10")
            for c in ("alpha", "beta") for i in range(40)], now=NOW - 10)
        await store.event_append_many([
            Event(key=f"{c}/k{i}", channel="email", at=NOW - 5,
                  type="rejected" if i % 4 == 0 else "accepted")
            for c in ("alpha", "beta") for i in range(40)])
        cfg = runtime.guardrails()
        assert cfg.campaigns["beta"].rejection_rate == 0.9  # the override
        assert cfg.campaigns["alpha"].rejection_rate == 0.2  # the default

        first = await enforce(store, runtime.transport, cfg, now=NOW)
        second = await enforce(store, runtime.transport, cfg, now=NOW + 1)

        assert [(r.scope, r.name) for r in first] == [("campaign", "alpha")]
        assert second == []
        switches = {s.name: s for s in await store.switch_all()}
        assert tripped_by_guardrail(switches["alpha"]) and "beta" not in switches
        trail = await store.events_for("admission/campaign/alpha")
        assert [e.type for e in trail] == ["guardrail_tripped"]
        assert "rejection_rate 0.250 > 0.2" in (trail[0].detail or "")

        # An operator resumes: the old evidence does not pause it again ...
        await store.switch_set(scope="campaign", name="alpha", paused=False, now=NOW + 2)
        assert await enforce(store, runtime.transport, cfg, now=NOW + 30) == []
        # ... new evidence does.
        await store.event_append_many([
            Event(key=f"alpha/k{i}", channel="email", at=NOW + 40, type="rejected")
            for i in range(25)])
        again = await enforce(store, runtime.transport, cfg, now=NOW + 45)
        assert [(r.name, r.sends) for r in again] == [("alpha", 25)]


def test_bounce_and_complaint_rates_are_per_accepted_send() -> None:
    # 100 accepted, 40 rejected: 1 complaint is 1 % of accepted sends (not of 140 sends)
    counts = [count("alpha", "accepted", 100), count("alpha", "rejected", 40),
              count("alpha", "complained", 1), count("alpha", "bounced", 4),
              count("beta", "accepted", 100), count("beta", "bounced", 6)]

    found = readings(counts, {}, config(complaint_rate=0.003, bounce_rate=0.05), [], NOW)

    assert tripped(found) == {("campaign", "alpha", "complaint_rate"),
                              ("campaign", "beta", "bounce_rate")}
    [complaints] = [r for r in found if (r.name, r.measure) == ("alpha", "complaint_rate")]
    assert (complaints.events, complaints.sends, complaints.value) == (1, 100, 0.01)
    assert complaints.reason(WINDOW) == ("guardrail: complaint_rate 0.010 > 0.003 over 300s "
                                         "(1 of 100 accepted sends)")


def test_reports_under_min_accepted_sends_are_not_judged_and_the_rate_is_capped() -> None:
    # 19 accepted (min_sends 20) but 100 other answers: not judged on the others
    few = [count("alpha", "accepted", 19), count("alpha", "rejected", 100),
           count("alpha", "complained", 5)]
    assert tripped(readings(few, {}, config(complaint_rate=0.003), [], NOW)) == set()
    # reports of sends accepted before the window: more reports than accepted sends
    many = [count("alpha", "accepted", 20), count("alpha", "bounced", 30)]
    [reading] = [r for r in readings(many, {}, config(bounce_rate=0.5), [], NOW)
                 if r.name == "alpha"]
    assert reading.value == 1.0 and reading.tripped


async def test_enforce_pauses_a_campaign_on_its_complaints(tmp_path: Path) -> None:
    from tidings.core.claims import Change
    from tidings.core.states import State
    from tidings.stores.base import ProviderEvent, ProviderEventType

    settings = Settings.parse({
        "store": f"sqlite:///{tmp_path / 't.db'}",
        "channels": {"email": {"provider": {"kind": "sandbox-twin"}}},
        # the channel's 1 in 200 (0.005) is under its own 0.01
        "guardrails": {"complaint_rate": 0.003, "min_sends": 100,
                       "channels": {"email": {"complaint_rate": 0.01}}},
        "campaigns": {name: {"cron": "0 9 * * *", "channels": ["email"], "template": "t",
                             "audience": {"sql": {"url": f"sqlite:///{tmp_path / 'crm.db'}",
                                                 "query": QUERY}}}
                      for name in ("alpha", "beta")}})
    async with await build_runtime(settings) as runtime:
        store = runtime.store
        for c in ("alpha", "beta"):
            keys = [f"{c}/k{i}" for i in range(100)]
            await store.intent_admit([
                IntentDraft(key=k, channel="email", recipient_id=k, address="x@example.com",
                            template="t/v1", due_at=0.0, campaign=c,
                            occurrence=f"{c}/2026-08-10") for k in keys], now=NOW - 20)
            claims = await store.intent_claim_many(keys, owner="w1", lease_s=30,
                                                   now=NOW - 20)
            await store.intent_apply_many([Change(
                key=cl.key, from_state=State.CLAIMED, to_state=State.ACCEPTED,
                event="accepted", lease_token=cl.token, receipt=f"r-{cl.key}")
                for cl in claims], now=NOW - 10)
        # beta's one soft bounce is no complaint; alpha's one complaint is 1 %
        await store.provider_events_record([
            ProviderEvent(provider="sendgrid", message_id="r-alpha/k7",
                          type=ProviderEventType.COMPLAINED, at=NOW - 5),
            ProviderEvent(provider="sendgrid", message_id="r-beta/k7",
                          type=ProviderEventType.BOUNCED, at=NOW - 5, bounce="soft")],
            now=NOW - 5)

        tripped_now = await enforce(store, runtime.transport, runtime.guardrails(), now=NOW)

        assert [(r.name, r.measure) for r in tripped_now] == [("alpha", "complaint_rate")]
        switches = {s.name: s for s in await store.switch_all()}
        assert switches["alpha"].reason == (
            "guardrail: complaint_rate 0.010 > 0.003 over 300s (1 of 100 accepted sends)")
        assert "beta" not in switches
