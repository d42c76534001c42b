"""Schedule: cron + time zone -> logical occurrences, across DST changes."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.cron import OccurrenceTime, Schedule
from tidings.core.errors import ConfigurationError, InvalidInput

BERLIN = ZoneInfo("Europe/Berlin")


def utc(text: str) -> float:
    """Epoch seconds of a UTC wall time such as ``2026-03-29T07:00``."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def local(at: float, zone: ZoneInfo = BERLIN) -> str:
    """The local wall time of an instant, ``2026-03-29T09:00+02:00``."""
    return datetime.fromtimestamp(at, zone).isoformat(timespec="minutes")


def walls(occurrences: list[OccurrenceTime], zone: ZoneInfo = BERLIN) -> list[str]:
    return [local(o.logical_at, zone) for o in occurrences]


# ---------------------------------------------------------------- configuration


def test_an_invalid_cron_expression_is_a_configuration_error_naming_it() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Schedule("0 25 * * *", "Europe/Berlin")
    assert caught.value.field == "cron"
    assert "'0 25 * * *'" in caught.value.message


@pytest.mark.parametrize("cron", ["", "every monday", "0 9 * *", "0 9 * * * 30"])
def test_malformed_or_non_five_field_expressions_are_refused(cron: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Schedule(cron, "UTC")
    assert caught.value.field == "cron"


@pytest.mark.parametrize(("cron", "says"), [
    ("61 * * * *", "minute 61 is out of range 0-59"),
    ("0 25 * * *", "hour 25 is out of range 0-23"),
    ("0 9 0 * *", "day-of-month 0 is out of range 1-31"),
    ("5-70 * * * *", "minute 70 is out of range 0-59"),
    ("0 9 * * 8", "day-of-week 8 is out of range 0-7"),
    ("*/0 * * * *", "minute '*/0': the step after '/' must be a whole number from 1"),
    ("0 9 * foo *", "month 'foo': 'foo' is not a number or a name (jan, feb,"),
    ("0 9 * *", "expected 5 fields, got 4"),
])
def test_a_refused_expression_says_which_field_is_wrong_and_why(cron: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Schedule(cron, "UTC")
    assert says in caught.value.message, caught.value.message


@pytest.mark.parametrize("cron", ["0 9 * * MON-FRI", "0 9 L * *", "0 9 * * 1#2",
                                  "0 9 * JAN,feb *", "*/15 8-18 * * 1-5"])
def test_names_and_croniter_extensions_are_still_accepted(cron: str) -> None:
    Schedule(cron, "UTC")


def test_an_expression_that_can_never_fire_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="never fires"):
        Schedule("0 9 30 2 *", "UTC")


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "", "/etc/localtime", "CEST+2"])
def test_an_unknown_time_zone_is_a_configuration_error(zone: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Schedule("0 9 * * *", zone)
    assert caught.value.field == "timezone"


def test_schedules_are_values() -> None:
    assert Schedule("0 9 * * 1", "Europe/Berlin") == Schedule("0 9 * * 1", "Europe/Berlin")
    assert len({Schedule("@daily", "UTC"), Schedule("@daily", "UTC")}) == 1


# ---------------------------------------------------------------- identity


def test_a_once_a_day_schedule_is_identified_by_its_local_date() -> None:
    schedule = Schedule("0 9 * * *", "Europe/Berlin")

    occurrence = schedule.next_after(utc("2026-08-13T12:00"))

    assert occurrence.logical_date == "2026-08-14"
    assert local(occurrence.logical_at) == "2026-08-14T09:00+02:00"


def test_the_local_date_is_the_identity_even_when_utc_is_on_another_day() -> None:
    # 00:30 in Berlin is still the previous day in UTC.
    schedule = Schedule("30 0 * * *", "Europe/Berlin")

    occurrence = schedule.next_after(utc("2026-08-13T12:00"))

    assert occurrence.logical_date == "2026-08-14"
    assert datetime.fromtimestamp(occurrence.logical_at, UTC).date().isoformat() == "2026-08-13"


@pytest.mark.parametrize("cron", ["0 9,17 * * *", "*/30 9 * * *", "30 * * * *"])
def test_a_schedule_firing_more_than_once_a_day_is_identified_by_its_wall_time(
        cron: str) -> None:
    schedule = Schedule(cron, "Europe/Berlin")

    occurrence = schedule.next_after(utc("2026-08-14T06:55"))

    assert occurrence.logical_date.startswith("2026-08-14T")
    assert occurrence.logical_date == local(occurrence.logical_at)[:16]


def test_a_weekly_occurrence_has_one_identity_whenever_the_trigger_runs() -> None:
    # Given a Monday 09:00 digest, when triggers arrive late, jittered or retried at
    # any point of the week, then they all name the same occurrence.
    schedule = Schedule("0 9 * * 1", "Europe/Berlin")
    triggers = ["2026-08-17T07:00", "2026-08-17T07:00:01", "2026-08-17T13:30",
                "2026-08-19T00:00", "2026-08-23T21:59:59.999"]

    seen = {schedule.latest(utc(t)) for t in triggers}

    assert seen == {OccurrenceTime(logical_at=utc("2026-08-17T07:00"),
                                   logical_date="2026-08-17")}
    before = schedule.latest(utc("2026-08-17T06:59:59"))
    assert before is not None and before.logical_date == "2026-08-10"
    after = schedule.latest(utc("2026-08-24T07:00"))
    assert after is not None and after.logical_date == "2026-08-24"


# ---------------------------------------------------------------- queries


def test_latest_includes_a_fire_at_exactly_at_and_next_after_excludes_it() -> None:
    schedule = Schedule("0 9 * * *", "UTC")
    nine = utc("2026-08-14T09:00")

    assert schedule.latest(nine) == OccurrenceTime(logical_at=nine, logical_date="2026-08-14")
    assert schedule.next_after(nine).logical_date == "2026-08-15"
    assert schedule.next_after(nine - 0.001).logical_date == "2026-08-14"


def test_latest_is_none_before_the_first_possible_fire() -> None:
    schedule = Schedule("0 9 1 1 *", "UTC")

    assert schedule.latest(datetime(1, 1, 1, 8, tzinfo=UTC).timestamp()) is None


def test_between_is_open_at_the_start_and_closed_at_the_end() -> None:
    schedule = Schedule("0 9 * * *", "UTC")

    found = schedule.between(utc("2026-08-14T09:00"), utc("2026-08-17T09:00"))

    assert [o.logical_date for o in found] == ["2026-08-15", "2026-08-16", "2026-08-17"]


def test_between_returns_the_earliest_limit_occurrences() -> None:
    schedule = Schedule("* * * * *", "UTC")

    found = schedule.between(utc("2026-08-14T00:00"), utc("2026-08-15T00:00"), limit=3)

    assert [o.logical_date for o in found] == [
        "2026-08-14T00:01", "2026-08-14T00:02", "2026-08-14T00:03"]
    assert len(schedule.between(utc("2026-08-14T00:00"), utc("2026-08-15T00:00"))) == 1000


def test_between_an_empty_or_reversed_window_is_empty() -> None:
    schedule = Schedule("* * * * *", "UTC")
    t = utc("2026-08-14T00:00")

    assert schedule.between(t, t) == []
    assert schedule.between(t, t - 60) == []


# ---------------------------------------------------------------- daylight saving


def test_a_nine_oclock_schedule_fires_at_nine_local_across_spring_forward() -> None:
    schedule = Schedule("0 9 * * *", "Europe/Berlin")

    found = schedule.between(utc("2026-03-27T12:00"), utc("2026-03-31T12:00"))

    assert walls(found) == ["2026-03-28T09:00+01:00", "2026-03-29T09:00+02:00",
                            "2026-03-30T09:00+02:00", "2026-03-31T09:00+02:00"]
    assert [o.logical_date for o in found] == [
        "2026-03-28", "2026-03-29", "2026-03-30", "2026-03-31"]


def test_a_nine_oclock_schedule_fires_at_nine_local_across_fall_back() -> None:
    schedule = Schedule("0 9 * * *", "Europe/Berlin")

    found = schedule.between(utc("2026-10-23T12:00"), utc("2026-10-27T12:00"))

    assert walls(found) == ["2026-10-24T09:00+02:00", "2026-10-25T09:00+01:00",
                            "2026-10-26T09:00+01:00", "2026-10-27T09:00+01:00"]


def test_a_daily_fire_inside_the_spring_gap_fires_once_when_the_gap_ends() -> None:
    # 02:30 does not exist on 2026-03-29 in Berlin (02:00 -> 03:00). The day's
    # occurrence is not lost and not doubled: it fires at 03:00 with its own date.
    schedule = Schedule("30 2 * * *", "Europe/Berlin")

    found = schedule.between(utc("2026-03-27T12:00"), utc("2026-03-30T12:00"))

    assert walls(found) == ["2026-03-28T02:30+01:00", "2026-03-29T03:00+02:00",
                            "2026-03-30T02:30+02:00"]
    assert [o.logical_date for o in found] == ["2026-03-28", "2026-03-29", "2026-03-30"]
    assert schedule.occurrence_for("2026-03-29") == found[1]


def test_gap_times_are_dropped_when_the_schedule_fires_at_the_gap_end_anyway() -> None:
    schedule = Schedule("*/30 * * * *", "Europe/Berlin")

    found = schedule.between(utc("2026-03-29T00:00"), utc("2026-03-29T02:00"))

    assert [o.logical_date for o in found] == [
        "2026-03-29T01:30", "2026-03-29T03:00", "2026-03-29T03:30", "2026-03-29T04:00"]
    with pytest.raises(InvalidInput, match="daylight-saving gap"):
        schedule.occurrence_for("2026-03-29T02:30")


def test_a_gap_time_and_a_later_time_of_the_same_schedule_fire_separately() -> None:
    schedule = Schedule("30 2,3 * * *", "Europe/Berlin")

    found = schedule.between(utc("2026-03-29T00:00"), utc("2026-03-29T02:00"))

    assert [(o.logical_date, local(o.logical_at)) for o in found] == [
        ("2026-03-29T02:30", "2026-03-29T03:00+02:00"),
        ("2026-03-29T03:30", "2026-03-29T03:30+02:00")]


def test_a_repeated_wall_time_in_the_autumn_fires_once_at_its_first_pass() -> None:
    schedule = Schedule("30 2 * * *", "Europe/Berlin")

    found = schedule.between(utc("2026-10-24T12:00"), utc("2026-10-25T12:00"))

    assert [(o.logical_date, local(o.logical_at)) for o in found] == [
        ("2026-10-25", "2026-10-25T02:30+02:00")]
    # During the second 02:30 the latest occurrence is still the first one.
    assert schedule.latest(utc("2026-10-25T01:45")) == found[0]


def test_the_repeated_hour_neither_repeats_nor_skips_sub_hourly_occurrences() -> None:
    schedule = Schedule("*/30 * * * *", "Europe/Berlin")

    found = schedule.between(utc("2026-10-24T23:00"), utc("2026-10-25T02:00"))

    assert [(o.logical_date, local(o.logical_at)) for o in found] == [
        ("2026-10-25T01:30", "2026-10-25T01:30+02:00"),
        ("2026-10-25T02:00", "2026-10-25T02:00+02:00"),
        ("2026-10-25T02:30", "2026-10-25T02:30+02:00"),
        ("2026-10-25T03:00", "2026-10-25T03:00+01:00")]
    # In the second 02:10 (CET), the 02:30 and 02:00 fires have already happened.
    second_pass = utc("2026-10-25T01:10")
    latest = schedule.latest(second_pass)
    assert latest is not None and latest.logical_date == "2026-10-25T02:30"
    assert schedule.next_after(second_pass).logical_date == "2026-10-25T03:00"


@settings(max_examples=300, deadline=None)
@given(
    cron=st.sampled_from(["0 9 * * *", "30 2 * * *", "*/30 * * * *", "0 2,3 * * *",
                          "15 1-3 * * 0", "0 9 * * 1"]),
    zone=st.sampled_from(["Europe/Berlin", "America/New_York", "Australia/Lord_Howe",
                          "UTC"]),
    at=st.floats(min_value=utc("2026-01-01T00:00"), max_value=utc("2027-01-01T00:00")),
)
def test_latest_and_next_after_bracket_every_instant(cron: str, zone: str, at: float) -> None:
    schedule = Schedule(cron, zone)

    before = schedule.latest(at)
    after = schedule.next_after(at)

    assert before is not None
    assert before.logical_at <= at < after.logical_at
    # Nothing fires strictly between them, and identities are never reused.
    assert schedule.between(before.logical_at, after.logical_at) == [after]
    assert schedule.next_after(before.logical_at) == after
    assert before.logical_date != after.logical_date
    assert schedule.occurrence_for(after.logical_date) == after


# ---------------------------------------------------------------- replay


def test_replay_finds_the_occurrence_of_a_date() -> None:
    schedule = Schedule("0 9 * * 1", "Europe/Berlin")

    occurrence = schedule.occurrence_for("2026-08-17")

    assert occurrence == OccurrenceTime(logical_at=utc("2026-08-17T07:00"),
                                        logical_date="2026-08-17")
    assert schedule.occurrence_for("2026-08-17T09:00") == occurrence


def test_replay_of_a_date_for_a_sub_daily_schedule_takes_that_days_first_fire() -> None:
    schedule = Schedule("0 9,17 * * *", "Europe/Berlin")

    assert schedule.occurrence_for("2026-08-17").logical_date == "2026-08-17T09:00"
    assert schedule.occurrence_for("2026-08-17T17:00").logical_at == utc("2026-08-17T15:00")


def test_replay_of_a_day_the_schedule_skips_says_when_it_fires() -> None:
    schedule = Schedule("0 9 * * 1", "Europe/Berlin")

    with pytest.raises(InvalidInput) as caught:
        schedule.occurrence_for("2026-08-18")

    assert caught.value.field == "date"
    message = caught.value.message
    assert "2026-08-18, a Tuesday" in message
    assert "Mondays" in message
    assert "2026-08-17" in message and "2026-08-24" in message


def test_replay_of_a_time_the_schedule_does_not_fire_at_is_refused() -> None:
    schedule = Schedule("*/15 * * * *", "UTC")

    with pytest.raises(InvalidInput, match=r"2026-08-17T10:00.*2026-08-17T10:15"):
        schedule.occurrence_for("2026-08-17T10:07")


@pytest.mark.parametrize("text", ["2026-8-17", "2026/08/17", "17.08.2026", "2026-08-17 09:00",
                                  "2026-08-17T09:00:00", "2026-02-30", "2026-08-17T24:00", ""])
def test_replay_of_a_malformed_date_is_invalid_input(text: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        Schedule("0 9 * * *", "UTC").occurrence_for(text)
    assert caught.value.field == "date"
