"""The retention rule, the batch planner and the partition planner: pure, on a fake clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.errors import ConfigurationError
from tidings.core.retention import (
    EVENT_SKEW_S,
    PARTITIONS_AHEAD,
    day_partition,
    day_start,
    parse_partition,
)
from tidings.recovery.retention import (
    DAY_S,
    Partition,
    PruneCounts,
    RetentionConfig,
    minimum_retention,
    next_prune_at,
    plan_partitions,
    plan_prune,
    prune_due,
)
from tidings.runtime import check_settings

CAMPAIGN = {"cron": "0 9 * * *", "channels": ["email"], "template": "t",
            "audience": {"sql": {"url": "sqlite:///crm.db", "query": "SELECT 1"}}}
#: 2027-01-15 00:00 UTC
MIDNIGHT = 1_799_971_200.0


def settings(**sections: Any) -> dict[str, Any]:
    return {"channels": {"email": {"provider": {"kind": "sandbox-twin"}}}, **sections}


def refusal(data: dict[str, Any]) -> ConfigurationError:
    """The refusal of the composition root's cross-check (the settings model alone reads
    each field; the bound needs retention's rule)."""
    with pytest.raises(ConfigurationError) as raised:
        check_settings(Settings.parse(data))
    return raised.value


# ---------------------------------------------------------------- the bound


def test_the_defaults_keep_thirty_days_and_need_the_idempotency_ttl_plus_a_day() -> None:
    parsed = Settings.parse(settings(campaigns={"digest": CAMPAIGN}))

    bound = minimum_retention(parsed)

    assert (bound.redelivery_s, bound.redelivery_by) == (7 * DAY_S, "api.idempotency_ttl_s")
    assert (bound.replay_s, bound.replay_by) == (
        25 * 3600.0, "campaigns.digest.expires_after_s + grace_s")
    assert parsed.retention.intents_s == 30 * DAY_S >= bound.total_s


def test_a_retention_shorter_than_the_bound_is_refused_naming_the_field_and_the_bound() -> None:
    error = refusal(settings(campaigns={"digest": CAMPAIGN},
                             retention={"intents_s": 7 * DAY_S}))

    assert error.field == "retention.intents_s"
    assert "api.idempotency_ttl_s" in error.message
    assert "campaigns.digest.expires_after_s + grace_s" in error.message
    assert "8.04 days that must be kept" in error.message


def test_occurrences_are_held_to_the_same_bound() -> None:
    error = refusal(settings(retention={"occurrences_s": 3 * DAY_S}))

    assert error.field == "retention.occurrences_s"


def test_the_queue_decides_when_its_redeliveries_outlast_the_idempotency_ttl() -> None:
    data = settings(worker={"visibility_s": 4 * 86400, "max_receives": 10},
                    api={"idempotency_ttl_s": 3600})

    bound = minimum_retention(Settings.parse(data | {"retention": {
        "intents_s": 50 * DAY_S, "occurrences_s": 50 * DAY_S}}))

    assert bound.redelivery_s == 40 * DAY_S + 5 * 300
    assert bound.redelivery_by.startswith("worker.visibility_s × worker.max_receives")
    assert refusal(data).field == "retention.intents_s"


def test_the_longest_campaign_window_decides_and_one_without_deadline_adds_its_grace() -> None:
    campaigns = {"short": CAMPAIGN | {"expires_after_s": 3600, "grace_s": 60},
                 "forever": CAMPAIGN | {"expires_after_s": None, "grace_s": 7200}}

    bound = minimum_retention(Settings.parse(settings(campaigns=campaigns)))

    assert (bound.replay_s, bound.replay_by) == (7200.0, "campaigns.forever.grace_s")


@given(ttl=st.floats(min_value=1, max_value=60 * DAY_S),
       expires=st.floats(min_value=1, max_value=20 * DAY_S),
       keep=st.floats(min_value=1, max_value=90 * DAY_S))
def test_a_retention_is_accepted_exactly_when_it_covers_the_bound(
        ttl: float, expires: float, keep: float) -> None:
    data = settings(api={"idempotency_ttl_s": ttl},
                    campaigns={"digest": CAMPAIGN | {"expires_after_s": expires}},
                    retention={"intents_s": keep, "occurrences_s": keep})
    needed = max(ttl, 60 * 50 + 5 * 300) + expires + 3600

    if keep >= needed:
        parsed = Settings.parse(data)
        check_settings(parsed)
        assert parsed.retention.intents_s == keep
    else:
        assert refusal(data).field == "retention.intents_s"


# ---------------------------------------------------------------- the batch planner


def test_the_plan_cuts_off_at_now_less_each_span() -> None:
    clock = FakeClock(MIDNIGHT)
    config = RetentionConfig(intents_s=30 * DAY_S, occurrences_s=40 * DAY_S, batch_size=10,
                             max_batches=3)

    plan = plan_prune(config, now=clock.now())

    assert plan.intent_cutoff == MIDNIGHT - 30 * DAY_S
    assert plan.occurrence_cutoff == MIDNIGHT - 40 * DAY_S


def test_batches_go_on_while_full_and_stop_at_the_budget() -> None:
    plan = plan_prune(RetentionConfig(batch_size=10, max_batches=3), now=MIDNIGHT)

    assert plan.more(1, PruneCounts(intents=10))
    assert plan.more(2, PruneCounts(intents=0, occurrences=10))
    assert not plan.more(3, PruneCounts(intents=10))  # the budget is spent
    assert not plan.more(1, PruneCounts(intents=9, occurrences=9))  # the last of it


@given(batch=st.integers(1, 50), budget=st.integers(1, 20), rows=st.integers(0, 2000))
def test_a_prune_deletes_at_most_its_budget_and_all_when_the_budget_allows(
        batch: int, budget: int, rows: int) -> None:
    plan = plan_prune(RetentionConfig(batch_size=batch, max_batches=budget), now=MIDNIGHT)
    left, done, batches = rows, 0, 0
    while True:  # the loop retention.prune runs, over a ledger of ``rows`` prunable
        n = min(batch, left)
        left, done, batches = left - n, done + n, batches + 1
        if not plan.more(batches, PruneCounts(intents=n)):
            break

    assert done <= batch * budget
    assert done == min(rows, batch * budget)


def test_prunes_run_on_a_grid_every_process_agrees_on() -> None:
    clock = FakeClock(MIDNIGHT + 10)

    assert next_prune_at(clock.now(), 3600) == MIDNIGHT + 3600
    assert prune_due(None, clock.now(), 3600)  # a reconciler's first pass
    clock.advance(3000)
    assert not prune_due(MIDNIGHT + 10, clock.now(), 3600)
    clock.advance(600)
    assert prune_due(MIDNIGHT + 10, clock.now(), 3600)


# ---------------------------------------------------------------- partitions


def test_partition_names_carry_their_range() -> None:
    day = day_partition(MIDNIGHT)

    assert day == Partition(name="events_p20270115", lower=MIDNIGHT, upper=MIDNIGHT + DAY_S)
    assert parse_partition("events_p20270115") == day
    assert parse_partition("events_before_20270115") == Partition(
        name="events_before_20270115", lower=None, upper=MIDNIGHT)
    assert parse_partition("events_default") is None
    assert parse_partition("events_p2027011x") is None


@given(st.floats(min_value=0, max_value=4e9))
def test_every_time_falls_in_its_day_partition(at: float) -> None:
    day = day_partition(day_start(at))
    assert day.lower is not None and day.lower <= at < day.upper


def test_partitions_are_created_a_week_ahead_from_today() -> None:
    clock = FakeClock(MIDNIGHT + 5 * 3600)
    existing = [day_partition(MIDNIGHT), day_partition(MIDNIGHT + DAY_S)]

    plan = plan_partitions(existing, now=clock.now(), cutoff=MIDNIGHT - 30 * DAY_S,
                           oldest_intent_at=MIDNIGHT)

    assert [p.lower for p in plan.create] == [MIDNIGHT + i * DAY_S
                                              for i in range(2, PARTITIONS_AHEAD + 1)]
    assert plan.drop == [] and plan.sweep == []


def test_old_partitions_drop_whole_only_when_no_intent_left_is_older() -> None:
    days = [day_partition(MIDNIGHT + i * DAY_S) for i in range(5)]
    legacy = Partition(name="events_before_20270115", lower=None, upper=MIDNIGHT)
    cutoff = MIDNIGHT + 3 * DAY_S + 10  # days 0, 1, 2 (and the legacy one) are older

    # given the oldest intent left was created during day 1
    plan = plan_partitions([legacy, *days], now=MIDNIGHT + 40 * DAY_S, cutoff=cutoff,
                           oldest_intent_at=MIDNIGHT + DAY_S + 60)

    # then what ends before it (less the skew) is dropped; the rest is swept row-wise
    assert plan.drop == [legacy]
    assert plan.sweep == days[:3]


def test_a_partition_ending_within_the_skew_of_the_oldest_intent_is_kept() -> None:
    day = day_partition(MIDNIGHT)

    kept = plan_partitions([day], now=MIDNIGHT + 40 * DAY_S, cutoff=MIDNIGHT + 30 * DAY_S,
                           oldest_intent_at=day.upper + EVENT_SKEW_S - 1)
    dropped = plan_partitions([day], now=MIDNIGHT + 40 * DAY_S, cutoff=MIDNIGHT + 30 * DAY_S,
                              oldest_intent_at=day.upper + EVENT_SKEW_S)

    assert kept.drop == [] and kept.sweep == [day]
    assert dropped.drop == [day]


def test_an_empty_ledger_drops_every_partition_older_than_the_cutoff_and_no_newer() -> None:
    days = [day_partition(MIDNIGHT + i * DAY_S) for i in range(3)]

    plan = plan_partitions(days, now=MIDNIGHT + 40 * DAY_S, cutoff=MIDNIGHT + 2 * DAY_S,
                           oldest_intent_at=None)

    assert plan.drop == days[:2]


# ---------------------------------------------------------------- the reconciler's prune


async def test_the_reconciler_loop_prunes_at_its_first_pass_and_once_a_step(
        tmp_path: Path) -> None:
    from tidings.core.states import State
    from tidings.processes.service import prune_when_due
    from tidings.recovery.retention import AUDIT_KEY, retention_config
    from tidings.runtime import build_runtime

    clock = FakeClock(MIDNIGHT + 60)
    parsed = Settings.parse(settings(store=f"sqlite:///{tmp_path / 'r.db'}"))
    async with await build_runtime(parsed, clock=clock) as rt:
        # given a cancelled intent, 40 days old
        await rt.notify(key="old", recipient={"id": "c1", "email": "c1@example.com"},
                        channels=["email"], template="t")
        await rt.cancel("old")
        clock.advance(40 * DAY_S)
        config = retention_config(parsed)

        # when the loop passes for the first time, then again within the hour, then later
        first = await prune_when_due(rt, config, None, worker="w")
        assert await rt.store.intent_get("old") is None
        [audit] = await rt.store.events_for(AUDIT_KEY)
        assert audit.worker == "w" and audit.detail is not None
        assert audit.detail.startswith("intents=1 events=")
        await rt.notify(key="new", recipient={"id": "c2", "email": "c2@example.com"},
                        channels=["email"], template="t")
        clock.advance(60)
        assert await prune_when_due(rt, config, first, worker="w") == first  # same step
        clock.advance(3600)
        assert await prune_when_due(rt, config, first, worker="w") == clock.now()
        # (the new, unfinished intent is left alone)
        assert [i.state for i in await rt.store.intent_find(states=list(State))] == [
            State.ENQUEUED]

        # a loop with retention.enabled = false never prunes
        off = retention_config(Settings.parse(settings(retention={"enabled": False})))
        assert await prune_when_due(rt, off, None, worker="w") is None
