"""Honest replays: a replay says what it will send, refuses one that would expire
unsent or send a second version, and a backfill admits one occurrence per date."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from apikit import T0, customers, digest, settings_for

from tidings.core.clock import FakeClock
from tidings.core.errors import InvalidInput
from tidings.core.states import State
from tidings.runtime import Runtime, build_runtime


async def runtime_at(tmp_path: Path, now: float, version: int = 3) -> Runtime:
    campaign = replace(digest(4), version=version)
    return await build_runtime(settings_for(tmp_path), clock=FakeClock(now),
                               campaigns=[campaign])


async def test_a_replay_past_its_deadline_is_refused_with_the_reason(tmp_path: Path) -> None:
    async with await runtime_at(tmp_path, T0) as rt:
        with pytest.raises(InvalidInput) as caught:
            await rt.scheduler().replay("weekly-digest", "2026-08-10", now=T0)

        assert caught.value.field == "expires_in"
        assert "2026-08-10's freshness deadline passed at 2026-08-10T15:00:00+00:00" in \
            caught.value.message and "--expires-in" in caught.value.message
        assert await rt.store.intent_counts() == {}  # nothing written


async def test_a_new_deadline_makes_the_replay_sendable(tmp_path: Path) -> None:
    async with await runtime_at(tmp_path, T0) as rt:
        scheduler = rt.scheduler()
        [plan] = await scheduler.plan_replay("weekly-digest", "2026-08-10", now=T0,
                                             expires_at=T0 + 6 * 3600)
        assert plan.sendable(T0) and plan.expires_at == T0 + 6 * 3600

        result = await scheduler.replay("weekly-digest", "2026-08-10", now=T0,
                                        expires_at=T0 + 6 * 3600)

        assert result.admitted == result.sendable == 6  # 4 emails, 2 phones
        intent = await rt.store.intent_get("weekly-digest/2026-08-10/cust_0001/email/v3")
        assert intent is not None and intent.expires_at == T0 + 6 * 3600
        with pytest.raises(InvalidInput) as caught:
            await scheduler.plan_replay("weekly-digest", "2026-08-10", now=T0,
                                        expires_at=T0 - 1)
        assert caught.value.field == "expires_in"


async def test_a_backfill_admits_one_occurrence_per_date(tmp_path: Path) -> None:
    async with await runtime_at(tmp_path, T0) as rt:
        result = await rt.scheduler().replay("weekly-digest", "2026-08-10", to="2026-08-13",
                                             now=T0, expires_at=T0 + 3600)

        occurrences = await rt.store.occurrence_list("weekly-digest")
        assert sorted(o.logical_date for o in occurrences) == [
            "2026-08-10", "2026-08-11", "2026-08-12", "2026-08-13"]
        assert {o.kind for o in occurrences} == {"replay"}
        assert result.admitted == 4 * 6
        for bad, field in (("2026-08-09", "to"), ("soon", "to")):
            with pytest.raises(InvalidInput) as caught:
                await rt.scheduler().replay("weekly-digest", "2026-08-10", to=bad, now=T0,
                                            expires_at=T0 + 3600)
            assert caught.value.field == field


async def test_replaying_a_date_sent_under_an_earlier_version_needs_a_decision(
        tmp_path: Path) -> None:
    async with await runtime_at(tmp_path, T0, version=3) as rt:
        await rt.scheduler().replay("weekly-digest", "2026-08-13", now=T0,
                                    expires_at=T0 + 3600)
    # The campaign moves to v4 in the settings: the deliberate act.
    async with await runtime_at(tmp_path, T0 + 60, version=4) as rt:
        scheduler = rt.scheduler()
        [plan] = await scheduler.plan_replay("weekly-digest", "2026-08-13", now=T0 + 60,
                                             expires_at=T0 + 3600)
        assert plan.earlier_version == 3
        with pytest.raises(InvalidInput) as caught:
            await scheduler.replay("weekly-digest", "2026-08-13", now=T0 + 60,
                                   expires_at=T0 + 3600)
        assert caught.value.field == "version"
        assert "admitted under v3 and the campaign is now v4" in caught.value.message

        result = await scheduler.replay("weekly-digest", "2026-08-13", now=T0 + 60,
                                        expires_at=T0 + 3600, new_version=True)
        assert result.admitted == 6
        assert await rt.store.intent_get(
            "weekly-digest/2026-08-13/cust_0001/email/v4") is not None
    assert len(customers(4)) == 4


async def test_a_replay_older_than_what_is_retained_is_refused_naming_the_date(
        tmp_path: Path) -> None:
    from tidings.recovery.retention import prune

    # given a date sent (here: cancelled, terminal too) and, 40 days on, pruned
    async with await runtime_at(tmp_path, T0) as rt:
        await rt.scheduler().replay("weekly-digest", "2026-08-10", now=T0,
                                    expires_at=T0 + 6 * 3600)
        for intent in await rt.store.intent_find(states=[State.ENQUEUED, State.SELECTED]):
            await rt.store.intent_request_cancel(intent.key, now=T0 + 60, reason="sent")
        later = T0 + 40 * 86400
        # before any prune, an old date is still whole: its replay is planned as ever
        assert await rt.scheduler().plan_replay("weekly-digest", "2026-08-10", now=later,
                                                expires_at=later + 3600)
        report = await prune(rt.store, rt.retention(), now=later)
        assert report.pruned.intents == 6

        # when the operator replays it
        with pytest.raises(InvalidInput) as caught:
            await rt.scheduler().replay("weekly-digest", "2026-08-10", now=later,
                                        expires_at=later + 3600)

        # then it is refused, naming the date and what was pruned; nothing is written
        assert caught.value.field == "date"
        assert caught.value.message.startswith(
            "2026-08-10 is older than what is retained: intents finished before "
            "2026-08-24T09:00:05+00:00 have been pruned")
        assert await rt.store.intent_counts() == {}
        # a date after the cutoff is still replayed
        [plan] = await rt.scheduler().plan_replay("weekly-digest", "2026-08-25", now=later,
                                                  expires_at=later + 3600)
        assert plan.logical_date == "2026-08-25"


async def test_a_backfill_to_a_time_stops_at_that_occurrence(tmp_path: Path) -> None:
    from tidings.core.cron import Schedule

    hourly = replace(digest(1), schedule=Schedule("0 * * * *", "UTC"))
    midnight = replace(digest(1), name="nightly", schedule=Schedule("0 0 * * *", "UTC"))
    async with await build_runtime(settings_for(tmp_path), clock=FakeClock(T0),
                                   campaigns=[hourly, midnight]) as rt:
        plans = await rt.scheduler().plan_replay(
            "weekly-digest", "2026-08-13T09:00", to="2026-08-13T11:00", now=T0,
            expires_at=T0 + 3600)
        assert [p.logical_date for p in plans] == [
            "2026-08-13T09:00", "2026-08-13T10:00", "2026-08-13T11:00"]
        # to a date: through its end, and not the next day's midnight
        nights = await rt.scheduler().plan_replay("nightly", "2026-08-12", to="2026-08-12",
                                                  now=T0, expires_at=T0 + 3600)
        assert [p.logical_date for p in nights] == ["2026-08-12"]
        for bad in ("2026-08-13T10:30", "2026-08-13T08:00"):
            with pytest.raises(InvalidInput) as caught:
                await rt.scheduler().plan_replay("weekly-digest", "2026-08-13T09:00",
                                                 to=bad, now=T0, expires_at=T0 + 3600)
            assert caught.value.field == "to"
