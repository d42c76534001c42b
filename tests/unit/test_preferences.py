"""Recipient preferences: validation, opt-out, and quiet hours across midnight and DST."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tidings.core.errors import InvalidInput
from tidings.core.preferences import ALLOW, OPTED_OUT, Preference, Verdict, verdict

NY = "America/New_York"


def at(text: str, tz: str = "UTC") -> float:
    """Epoch seconds of a local wall time, e.g. ``at("2026-03-08 01:00", NY)``."""
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(tz)).timestamp()


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def quiet(start: str, end: str, tz: str = "UTC") -> Preference:
    return Preference(recipient_id="r1", channel="sms", quiet_start=start, quiet_end=end,
                      timezone=tz)


def wall(epoch: float, tz: str) -> str:
    return datetime.fromtimestamp(epoch, ZoneInfo(tz)).strftime("%H:%M")


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(("fields", "field"), [
    ({"recipient_id": ""}, "recipient_id"),
    ({"channel": ""}, "channel"),
    ({"opted_out": "yes"}, "opted_out"),
    ({"quiet_start": "22:00"}, "quiet_end"),
    ({"quiet_end": "07:00"}, "quiet_start"),
    ({"quiet_start": "24:00", "quiet_end": "07:00"}, "quiet_start"),
    ({"quiet_start": "22:00", "quiet_end": "7:00"}, "quiet_end"),
    ({"quiet_start": "07:00", "quiet_end": "07:00"}, "quiet_end"),
    ({"timezone": "Mars/Olympus_Mons"}, "timezone"),
    ({"timezone": "../etc/passwd"}, "timezone"),
    ({"timezone": ""}, "timezone"),
])
def test_an_invalid_preference_names_its_field(fields: dict[str, object], field: str) -> None:
    values: dict[str, object] = {"recipient_id": "r1", "channel": "sms", **fields}

    with pytest.raises(InvalidInput) as raised:
        Preference(**values)  # type: ignore[arg-type]

    assert raised.value.field == field


# ---------------------------------------------------------------- opt-out and no window


def test_no_preference_or_no_quiet_hours_allows() -> None:
    now = utc("2026-05-01 03:00")
    assert verdict(None, now) == ALLOW
    assert verdict(Preference(recipient_id="r1", channel="sms"), now) == ALLOW


def test_an_opt_out_wins_over_quiet_hours() -> None:
    pref = Preference(recipient_id="r1", channel="sms", opted_out=True, quiet_start="00:00",
                      quiet_end="23:59")
    assert verdict(pref, utc("2026-05-01 12:00")) == OPTED_OUT


# ---------------------------------------------------------------- windows


def test_a_window_within_one_day_defers_to_its_end_the_same_day() -> None:
    pref = quiet("12:00", "14:00", "Europe/Berlin")

    assert verdict(pref, at("2026-05-01 11:59", "Europe/Berlin")) == ALLOW
    assert verdict(pref, at("2026-05-01 12:00", "Europe/Berlin")) == Verdict(
        action="defer", until=at("2026-05-01 14:00", "Europe/Berlin"))
    assert verdict(pref, at("2026-05-01 14:00", "Europe/Berlin")) == ALLOW


def test_a_window_across_midnight_ends_the_next_morning_or_this_morning() -> None:
    pref = quiet("22:00", "07:00", "Asia/Tokyo")

    evening = verdict(pref, at("2026-05-01 23:30", "Asia/Tokyo"))
    small_hours = verdict(pref, at("2026-05-02 03:00", "Asia/Tokyo"))

    assert evening == small_hours == Verdict(action="defer",
                                             until=at("2026-05-02 07:00", "Asia/Tokyo"))
    assert verdict(pref, at("2026-05-02 07:00", "Asia/Tokyo")) == ALLOW
    assert verdict(pref, at("2026-05-02 21:59:59", "Asia/Tokyo")) == ALLOW


# ---------------------------------------------------------------- DST, fixed cases


def test_spring_forward_shortens_the_night_by_the_hour_the_clock_skips() -> None:
    # New York, 2026-03-08: 02:00 EST jumps to 03:00 EDT.
    pref = quiet("23:00", "07:00", NY)

    said = verdict(pref, at("2026-03-07 23:30", NY))

    assert said.until == utc("2026-03-08 11:00")  # 07:00 EDT
    assert said.until is not None and said.until - at("2026-03-07 23:30", NY) == 6.5 * 3600


def test_fall_back_lengthens_the_night_by_the_repeated_hour() -> None:
    # New York, 2026-11-01: 02:00 EDT falls back to 01:00 EST.
    pref = quiet("23:00", "07:00", NY)

    said = verdict(pref, at("2026-10-31 23:30", NY))

    assert said.until == utc("2026-11-01 12:00")  # 07:00 EST
    assert said.until is not None and said.until - at("2026-10-31 23:30", NY) == 8.5 * 3600


def test_an_end_time_the_clock_skips_ends_at_the_jump() -> None:
    # 02:30 never happens on 2026-03-08 in New York: the clock reads 03:00 EDT instead.
    pref = quiet("22:00", "02:30", NY)

    said = verdict(pref, at("2026-03-08 01:15", NY))

    assert said.until == utc("2026-03-08 07:00")
    assert wall(utc("2026-03-08 07:00"), NY) == "03:00"
    assert verdict(pref, utc("2026-03-08 07:00")) == ALLOW


def test_an_end_time_the_clock_repeats_ends_at_its_first_reading_after_now() -> None:
    pref = quiet("22:00", "01:30", NY)

    first = verdict(pref, at("2026-11-01 00:10", NY))
    # 01:10 EST, in the repeated hour after the first 01:30 EDT has passed: the clock
    # reads inside the window again, until it reads 01:30 a second time.
    again = verdict(pref, utc("2026-11-01 06:10"))

    assert first.until == utc("2026-11-01 05:30")  # 01:30 EDT
    assert verdict(pref, utc("2026-11-01 05:45")) == ALLOW  # 01:45 EDT
    assert again.until == utc("2026-11-01 06:30")  # 01:30 EST


def test_a_half_hour_dst_zone_is_counted_on_its_own_clock() -> None:
    # Lord Howe Island moves its clocks by 30 minutes: 2026-04-05 02:00 -> 01:30.
    tz = "Australia/Lord_Howe"
    pref = quiet("21:00", "06:00", tz)

    said = verdict(pref, at("2026-04-04 22:00", tz))

    assert said.until == at("2026-04-05 06:00", tz)
    assert said.until is not None and said.until - at("2026-04-04 22:00", tz) == 8.5 * 3600


# ---------------------------------------------------------------- properties

ZONES = ["UTC", NY, "Europe/London", "Europe/Berlin", "Australia/Sydney",
         "Australia/Lord_Howe", "Asia/Kolkata", "Pacific/Chatham", "America/Santiago"]
times = st.builds(lambda h, m: f"{h:02d}:{m:02d}", st.integers(0, 23), st.integers(0, 59))
moments = st.floats(min_value=utc("2000-01-01 00:00"), max_value=utc("2040-01-01 00:00"),
                    allow_nan=False)


@given(start=times, end=times, tz=st.sampled_from(ZONES), now=moments)
def test_a_deferral_ends_after_now_within_a_day_on_the_end_reading(
    start: str, end: str, tz: str, now: float
) -> None:
    assume(start != end)
    pref = quiet(start, end, tz)

    said = verdict(pref, now)

    if said == ALLOW:
        return
    assert said.action == "defer" and said.until is not None
    assert now < said.until <= now + 25 * 3600
    local = datetime.fromtimestamp(said.until, ZoneInfo(tz))
    before = datetime.fromtimestamp(said.until - 1, ZoneInfo(tz))
    # At ``until`` the clock reads the end time, or (a skipped end) has just jumped past it.
    end_on_that_day = datetime.combine(local.date(), time.fromisoformat(end))
    assert local.strftime("%H:%M") == end or (
        local.utcoffset() != before.utcoffset()
        and before.replace(tzinfo=None) < end_on_that_day <= local.replace(tzinfo=None))
    # And the recipient is reachable then.
    assert verdict(pref, said.until) == ALLOW


@given(start=times, end=times, tz=st.sampled_from(ZONES), now=moments,
       fraction=st.floats(min_value=0.0, max_value=1.0, exclude_max=True))
def test_every_moment_before_the_end_of_a_deferral_is_quiet_until_the_same_end(
    start: str, end: str, tz: str, now: float, fraction: float
) -> None:
    assume(start != end)
    pref = quiet(start, end, tz)
    said = verdict(pref, now)
    assume(said.action == "defer" and said.until is not None)
    assert said.until is not None

    later = now + (said.until - now) * fraction
    assume(later < said.until)  # float rounding can land a fraction near 1 on the end itself

    assert verdict(pref, later) == said


@given(start=times, end=times, tz=st.sampled_from(ZONES), now=moments)
def test_a_moment_is_quiet_exactly_when_its_wall_time_is_inside_the_window(
    start: str, end: str, tz: str, now: float
) -> None:
    assume(start != end)
    clock = datetime.fromtimestamp(now, ZoneInfo(tz)).strftime("%H:%M")
    inside = start <= clock < end if start < end else (clock >= start or clock < end)

    assert (verdict(quiet(start, end, tz), now).action == "defer") == inside


def test_a_deferral_never_waits_more_than_a_day_and_an_hour_around_dst() -> None:
    pref = quiet("00:01", "00:00", NY)  # quiet all day but a minute
    start = at("2026-10-31 00:01", NY)
    for minutes in range(0, 3 * 24 * 60, 17):
        now = start + minutes * 60
        said = verdict(pref, now)
        if said.until is not None:
            assert timedelta(seconds=said.until - now) <= timedelta(hours=25)


@given(minute=st.integers(0, 59), after=st.integers(0, 4 * 3600 - 1))
def test_every_end_time_in_a_skipped_hour_ends_at_the_jump(minute: int, after: int) -> None:
    # Any evening moment before the jump (2026-03-08 07:00 UTC, 02:00 EST -> 03:00 EDT).
    pref = quiet("22:00", f"02:{minute:02d}", NY)
    now = at("2026-03-07 22:00", NY) + after

    assert verdict(pref, now) == Verdict(action="defer", until=utc("2026-03-08 07:00"))


@given(minute=st.integers(0, 59), after=st.integers(0, 3 * 3600 - 1))
def test_every_end_time_in_a_repeated_hour_ends_at_its_first_reading(
    minute: int, after: int
) -> None:
    # 2026-11-01 in New York: 01:00-01:59 happens in EDT (05:00-05:59 UTC), then in EST.
    pref = quiet("22:00", f"01:{minute:02d}", NY)
    now = at("2026-10-31 22:00", NY) + after  # up to 00:59:59 EDT

    assert verdict(pref, now) == Verdict(action="defer",
                                         until=utc("2026-11-01 05:00") + minute * 60)
