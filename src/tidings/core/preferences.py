"""Recipient preferences per channel: opt-out and quiet hours, decided as pure functions.

A ``Preference`` belongs to one recipient on one channel. Quiet hours are a window
of wall-clock time in the recipient's IANA time zone, ``[quiet_start, quiet_end)``;
a window whose start is later than its end crosses midnight (``22:00``–``07:00``).
``verdict(preference, now)`` says whether a send may start at ``now``: allow, opted
out, or defer until the first instant after ``now`` at which the recipient's clock
reads ``quiet_end`` — counted on the clock, so a DST change shortens or lengthens the
wait, and an end time the clock skips (spring forward) ends at the jump itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tidings.core.errors import InvalidInput

_HH_MM = re.compile(r"^(?P<h>[01]\d|2[0-3]):(?P<m>[0-5]\d)$")


def parse_hh_mm(value: str, field: str) -> time:
    """``"07:30"`` -> ``time(7, 30)``; anything else is InvalidInput naming ``field``."""
    match = _HH_MM.match(value) if isinstance(value, str) else None
    if match is None:
        raise InvalidInput(field, f"{value!r} is not a time of day as HH:MM (00:00 to 23:59)")
    return time(int(match["h"]), int(match["m"]))


def zone(key: str, field: str = "timezone") -> ZoneInfo:
    """The IANA time zone ``key`` (``Europe/Berlin``); unknown names are InvalidInput."""
    if not isinstance(key, str) or not key:
        raise InvalidInput(field, "must be an IANA time zone name such as 'Europe/Berlin'")
    try:
        return ZoneInfo(key)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        # ValueError: a key that is not a relative path (``../x``, ``/etc/x``); OSError:
        # a folder of the zone database (``Europe``), a name too long for a file.
        raise InvalidInput(field, f"{key!r} is not a known IANA time zone") from None


@dataclass(frozen=True, kw_only=True)
class Preference:
    """One recipient's wishes for one channel.

    ``quiet_start``/``quiet_end`` are ``"HH:MM"`` in ``timezone``, both or neither;
    they must differ (an empty or all-day window is said with ``opted_out``).
    """

    recipient_id: str
    channel: str
    opted_out: bool = False
    quiet_start: str | None = None
    quiet_end: str | None = None
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        for name in ("recipient_id", "channel"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise InvalidInput(name, "must be a non-empty string")
        if not isinstance(self.opted_out, bool):
            raise InvalidInput("opted_out", "must be true or false")
        if (self.quiet_start is None) != (self.quiet_end is None):
            missing = "quiet_end" if self.quiet_end is None else "quiet_start"
            raise InvalidInput(missing, "quiet hours need both quiet_start and quiet_end")
        if self.quiet_start is not None and self.quiet_end is not None:
            start = parse_hh_mm(self.quiet_start, "quiet_start")
            end = parse_hh_mm(self.quiet_end, "quiet_end")
            if start == end:
                raise InvalidInput("quiet_end", "must differ from quiet_start")
        zone(self.timezone)

    @property
    def quiet_hours(self) -> tuple[time, time] | None:
        """``(start, end)`` as times of day, or None without quiet hours."""
        if self.quiet_start is None or self.quiet_end is None:
            return None
        return (parse_hh_mm(self.quiet_start, "quiet_start"),
                parse_hh_mm(self.quiet_end, "quiet_end"))


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What a preference says about a send at one moment.

    ``action`` is ``allow``, ``opted_out``, or ``defer`` (with ``until``, epoch seconds).
    """

    action: Literal["allow", "opted_out", "defer"]
    until: float | None = None


ALLOW = Verdict(action="allow")
OPTED_OUT = Verdict(action="opted_out")


def verdict(preference: Preference | None, now: float) -> Verdict:
    """May a send to this recipient on this channel start at ``now`` (epoch seconds)?

    No preference allows; an opt-out wins over quiet hours.
    """
    if preference is None:
        return ALLOW
    if preference.opted_out:
        return OPTED_OUT
    until = quiet_until(preference, now)
    return ALLOW if until is None else Verdict(action="defer", until=until)


def quiet_until(preference: Preference, now: float) -> float | None:
    """When the quiet hours around ``now`` end (epoch seconds), or None outside them."""
    hours = preference.quiet_hours
    if hours is None:
        return None
    start, end = hours
    tz = zone(preference.timezone)
    local = datetime.fromtimestamp(now, tz)
    clock = local.time().replace(tzinfo=None)
    if start < end:  # the same day: [start, end)
        if not start <= clock < end:
            return None
        end_day = local.date()
    else:  # across midnight: [start, 24:00) and [00:00, end)
        if end <= clock < start:
            return None
        end_day = local.date() if clock < end else local.date() + timedelta(days=1)
    return first_instant_at(end_day, end, tz, after=now)


def first_instant_at(day: date, wall: time, tz: ZoneInfo, *, after: float) -> float:
    """The first instant later than ``after`` at which the clock of ``tz`` reaches
    ``wall`` on ``day``.

    An ambiguous wall time (the hour repeated when clocks go back) has two instants:
    the earlier one after ``after`` wins. A wall time the clock skips (clocks go
    forward) is reached at the jump: the transition instant.
    """
    naive = datetime.combine(day, wall)
    instants = [int(naive.replace(tzinfo=tz, fold=fold).timestamp()) for fold in (0, 1)]
    existing = [u for u in instants
                if datetime.fromtimestamp(u, tz).replace(tzinfo=None) == naive and u > after]
    if existing:
        return float(min(existing))
    # A skipped wall time: the two folds straddle the transition. Find the first
    # second at which the local clock reads at least ``wall`` (offsets and
    # transitions are whole seconds, so the search ends on the transition itself).
    lo, hi = min(instants), max(instants)
    while lo < hi:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).replace(tzinfo=None) >= naive:
            hi = mid
        else:
            lo = mid + 1
    return float(lo)
