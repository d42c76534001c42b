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
