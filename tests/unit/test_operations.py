"""The pure operator computations: SLI, send rate, drain time against deadlines."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tidings.core.model import QueueDepth
from tidings.core.pacing import PaceLimits
from tidings.operate import operations
from tidings.stores.base import IntentSummary, Switch

NOW = 10_000.0


def summary(**counts: Any) -> IntentSummary:
    base: dict[str, Any] = dict(
        campaign="digest", channel="email", total=0, backlog=0, scheduled=0, claimed=0,
        retryable=0, uncertain=0, accepted=0, accepted_in_time=0, accepted_recent=0,
        expired=0, dead=0, rejected=0, cancelled=0, overdue=0, oldest_due_at=None,
        earliest_expiry=None)
    base.update(counts)
    return IntentSummary(**base)


def snap(*summaries: IntentSummary, window_s: float = 100.0, **extra: Any
         ) -> operations.Snapshot:
    return operations.Snapshot(now=NOW, window_s=window_s, summaries=summaries,
                               queues=extra.get("queues", {}), events=extra.get("events", {}),
                               switches=extra.get("switches", ()))


# ---------------------------------------------------------------- SLI


def test_the_sli_is_accepted_in_time_over_eligible() -> None:
    s = summary(accepted=8, accepted_in_time=7, expired=1, dead=1, overdue=1, rejected=5,
                cancelled=9, backlog=100)

    # eligible = 7 in time + 1 late + 1 expired + 1 dead + 1 overdue; rejected and
    # cancelled are not eligible, the backlog within its deadline is not decided yet.
    assert operations.sli(s) == pytest.approx(7 / 11)


def test_the_sli_is_none_when_nothing_is_eligible() -> None:
    assert operations.sli(summary(backlog=3, cancelled=2, rejected=1)) is None


# ---------------------------------------------------------------- plan


def line(backlog: int, *, channel_backlog: int | None = None, recent: int = 0,
         limits: PaceLimits | None = None, expiry: float | None = None
         ) -> operations.PlanLine:
    return operations.plan_line(
        channel="email", campaign="digest", backlog=backlog,
        channel_backlog=backlog if channel_backlog is None else channel_backlog,
        accepted_recent=recent, window_s=100.0, limits=limits, earliest_expiry=expiry,
        freshness_deadline_s=3600.0, now=NOW)


def test_an_observed_rate_wins_over_the_configured_pace() -> None:
    result = line(1000, recent=500, limits=PaceLimits(quota_per_s=100, safety=1.0),
                  expiry=NOW + 600)

    assert (result.rate_source, result.rate_per_s) == ("observed", 5.0)
    assert result.drain_s == 200.0 and result.deadline_in_s == 600.0
    assert result.verdict == "ok" and result.expected_late == 0


def test_without_recent_sends_the_configured_pace_is_used() -> None:
    result = line(1000, limits=PaceLimits(quota_per_s=10, safety=0.5), expiry=NOW + 60)

    assert (result.rate_source, result.rate_per_s) == ("configured", 5.0)
    assert result.drain_s == 200.0
    assert result.verdict == "at_risk"
    assert result.expected_late == 1000 - 60 * 5


def test_a_campaign_shares_its_channel_with_the_rest_of_the_backlog() -> None:
    alone = line(100, recent=100, expiry=NOW + 150)
    shared = line(100, channel_backlog=400, recent=100, expiry=NOW + 150)

    assert alone.verdict == "ok" and alone.drain_s == 100.0
    assert shared.verdict == "at_risk" and shared.drain_s == 400.0
    assert shared.expected_late == 63  # (400 - 150) * 100/400, rounded up


@pytest.mark.parametrize(("kwargs", "verdict"), [
    ({"backlog": 0}, "clear"),
    ({"backlog": 10, "expiry": NOW + 5}, "stalled"),
    ({"backlog": 10, "recent": 10}, "no_deadline"),
    ({"backlog": 10, "recent": 10, "expiry": NOW - 1}, "at_risk"),
])
def test_plan_verdicts(kwargs: dict[str, Any], verdict: str) -> None:
    backlog = kwargs.pop("backlog")
    assert line(backlog, **kwargs).verdict == verdict


def test_the_configured_rate_follows_quota_safety_and_interval() -> None:
    assert operations.configured_rate(None) is None
    assert operations.configured_rate(PaceLimits()) is None
    assert operations.configured_rate(PaceLimits(min_interval_s=0.5)) == 2.0
    assert operations.configured_rate(PaceLimits(quota_per_s=100, safety=0.9)) == \
        pytest.approx(90.0)


def test_plan_has_a_line_per_channel_then_per_campaign_with_work() -> None:
    email = summary(backlog=30, accepted_recent=10, earliest_expiry=NOW + 100)
    idle = summary(campaign="reminder", channel="sms")
    one_off = summary(campaign=None, backlog=10)

    lines = operations.plan(snap(email, idle, one_off),
                            limits={"email": PaceLimits(), "sms": PaceLimits()},
                            freshness={"digest": 7200.0, "reminder": None})

    assert [(x.channel, x.campaign) for x in lines] == [
        ("email", None), ("sms", None), ("email", "digest")]
    assert lines[0].backlog == 40 and lines[0].freshness_deadline_s == 7200.0
    assert lines[2].channel_backlog == 40 and lines[2].drain_s == 400.0


# ---------------------------------------------------------------- status


def test_status_adds_campaigns_up_per_channel_and_reads_queues_and_events() -> None:
    a = summary(total=10, backlog=4, accepted=6, accepted_in_time=6, accepted_recent=3,
                oldest_due_at=NOW - 40)
    b = replace(a, campaign="reminder", backlog=1, oldest_due_at=NOW - 90)
    queues = {"email": QueueDepth(ready=3, delayed=1, in_flight=1, dead=2, oldest_age_s=12.5)}
    events = {"email": {"rate_limited": 4, "transient_failure": 2, "duplicate_observed": 1,
                        "claimed": 20}}
    switches = (Switch(scope="channel", name="email", paused=True, changed_at=NOW, reason=None),)

    result = operations.status(snap(a, b, queues=queues, events=events, switches=switches),
                               campaigns={"digest": ("email", "sms")}, channels=["email", "sms"])

    email = result.channels["email"]
    assert (email.counts.total, email.counts.backlog, email.counts.oldest_age_s) == \
        (20, 5, 90.0)
    assert email.counts.send_rate_per_s == pytest.approx(0.06)
    assert (email.rate_limited, email.retries, email.duplicates_suppressed,
            email.attempts, email.dead_letters) == (4, 2, 1, 20, 2)
    assert email.paused is True and email.queue is not None and email.queue.ready == 3
    assert result.channels["sms"].counts.total == 0
    assert result.campaigns["digest"].channels["sms"].counts.total == 0
    assert result.campaigns["reminder"].declared is False
