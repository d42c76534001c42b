"""Cron expression + IANA time zone -> logical occurrences of a campaign.

The expression is matched against *local wall-clock* time in the schedule's zone, so
``0 9 * * *`` in ``Europe/Berlin`` fires at 09:00 Berlin time all year round. Each
matching wall time is one occurrence; its identity (``logical_date``) comes from that
wall time, never from the instant a trigger happened to run.

Daylight-saving rules:

- **Spring forward (a gap).** A wall time that does not exist that day (02:30 on
  2026-03-29 in Berlin) fires once, at the first instant after the gap (03:00 local),
  keeping its own identity (``2026-03-29`` or ``2026-03-29T02:30``). If the expression
  also matches a later wall time up to the end of the gap (``*/15`` fires at 03:00
  anyway), the gap times are dropped instead, so an instant never fires twice.
- **Fall back (a repeated hour).** A wall time that happens twice (02:30 on
  2026-10-25 in Berlin) fires once, at its first occurrence (summer time).

All times crossing this module's API are UTC epoch seconds; ``now`` is always passed
in, never read.

Supported dates: ``EARLIEST_DATE`` to ``LATEST_DATE``. Every entry point (the API, the
CLI, ``notify``, replay) checks a date or an instant against them here, with
``logical_day`` and ``check_instant``: near year 1 or 9999 croniter and ``datetime``
overflow while searching a day or two either side, and an instant before the epoch is no
time anyone schedules a notification for.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tidings.core.errors import ConfigurationError, InvalidInput

if TYPE_CHECKING:
    from croniter import croniter

__all__ = ["EARLIEST_DATE", "LATEST_DATE", "OccurrenceTime", "Schedule", "check_instant",
           "logical_day"]

#: The first and last dates the scheduler supports (whole days, in any time zone).
EARLIEST_DATE = date(1970, 1, 2)
LATEST_DATE = date(9998, 12, 31)
# As UTC epoch seconds: every local time of those days, from UTC+14 to UTC-12 (so the
# earliest instant is still after the epoch).
_EARLIEST_AT = datetime.combine(EARLIEST_DATE, time.min,
                                tzinfo=timezone(timedelta(hours=14))).timestamp()
_LATEST_AT = datetime.combine(LATEST_DATE, time.max,
                              tzinfo=timezone(timedelta(hours=-12))).timestamp()

# croniter needs a start time even to validate; a fixed one keeps the wall clock out.
_REFERENCE = datetime(2000, 1, 1)
_MINUTE = timedelta(minutes=1)
# ASCII digits only: \d would take any script's digits, and int() reads them.
_LOGICAL_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})(?:T([0-9]{2}):([0-9]{2}))?")
_WEEKDAYS = ("Sundays", "Mondays", "Tuesdays", "Wednesdays", "Thursdays", "Fridays",
             "Saturdays")


def _croniter(cron: str, start: float | datetime) -> croniter[float]:
    """croniter, imported at the first expression read: only a process with campaigns
    (or the commands that show them) needs it, not a worker."""
    from croniter import croniter

    return croniter(cron, start)


def _croniter_errors(*also: type[Exception]) -> tuple[type[Exception], ...]:
    """croniter's error and ``also``, for an ``except`` (evaluated only once something
    was raised, so croniter is imported by then)."""
    from croniter import CroniterError

    return (CroniterError, *also)


def _search_errors() -> tuple[type[Exception], ...]:
    """What a search raises when it finds nothing: past the year range datetime
    supports, or an expression that stops matching."""
    return _croniter_errors(ValueError, OverflowError, OSError)


@dataclass(frozen=True, kw_only=True)
class OccurrenceTime:
    """One occurrence of a schedule.

    ``logical_at`` is when it fires (UTC epoch seconds); ``logical_date`` is its
    identity: the local date (``2026-08-14``) for a schedule that fires at most once a
    day, else the local wall time (``2026-08-14T09:30``).
    """

    logical_at: float
    logical_date: str


@dataclass(frozen=True)
class Schedule:
    """A five-field cron expression evaluated in an IANA time zone.

    >>> s = Schedule("0 9 * * 1", "Europe/Berlin")
    >>> s.occurrence_for("2026-08-17").logical_date
    '2026-08-17'
    """

    cron: str
    timezone: str
    zone: ZoneInfo = field(init=False, repr=False, compare=False)
    once_per_day: bool = field(init=False, repr=False, compare=False)
    """True when minute and hour are single values: identities are then plain dates."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "zone", _zone(self.timezone))
        minutes, hours, *_ = _parse(self.cron)
        once = len(minutes) == 1 and minutes[0] != "*" and len(hours) == 1 and hours[0] != "*"
        object.__setattr__(self, "once_per_day", once)

    # ------------------------------------------------------------------ queries

    def latest(self, at: float) -> OccurrenceTime | None:
        """The most recent occurrence firing at or before ``at``; None if there is none."""
        local = datetime.fromtimestamp(at, self.zone)
        wall = local.replace(tzinfo=None, fold=0)
        if local.fold:
            # In the second pass of a repeated hour, the first pass of the wall times
            # still ahead of us on the clock has already happened.
            first_pass = local.replace(fold=0).utcoffset()
            second_pass = local.utcoffset()
            assert first_pass is not None and second_pass is not None
            wall += first_pass - second_pass
        # get_prev is strict and cron has minute resolution: start one minute past.
        it = _croniter(self.cron, _floor_minute(wall) + _MINUTE)
        while True:
            try:
                candidate = it.get_prev(datetime)
            except _search_errors():
                return None
            occurrence = self._resolve(candidate)
            if occurrence is not None and occurrence.logical_at <= at:
                return occurrence

    def next_after(self, at: float) -> OccurrenceTime:
        """The first occurrence firing strictly after ``at``."""
        for occurrence in self._after(at):
            return occurrence
        raise ConfigurationError("cron", f"{self.cron!r} never fires after {at}")

    def between(self, start: float, end: float, limit: int = 1000) -> list[OccurrenceTime]:
        """Occurrences with ``start < logical_at <= end``, earliest first, at most ``limit``."""
        found: list[OccurrenceTime] = []
        if limit <= 0 or end <= start:
            return found
        for occurrence in self._after(start):
            if occurrence.logical_at > end:
                break
            found.append(occurrence)
            if len(found) >= limit:
                break
        return found

    def occurrence_for(self, logical_date: str) -> OccurrenceTime:
        """The occurrence named by ``YYYY-MM-DD`` (its first that day) or ``YYYY-MM-DDTHH:MM``.

        Used by replay. Raises ``InvalidInput("date", ...)`` when the text is malformed
        or the schedule does not fire then.
        """
        day, clock = _parse_logical_date(logical_date)
        if clock is None:
            return self._first_on(day)
        wall = datetime.combine(day, clock)
        if _next_wall(self.cron, wall - _MINUTE) != wall:
            raise InvalidInput("date", f"{self._name()} does not fire at {logical_date}, "
                                       f"a {day:%A}{self._fires_on()}; "
                                       f"{self._nearest(wall)}")
        occurrence = self._resolve(wall)
        if occurrence is None:
            raise InvalidInput("date", f"{logical_date} falls in a daylight-saving gap in "
                                       f"{self.timezone} and is covered by a later fire "
                                       f"time; {self._nearest(wall)}")
        return occurrence

    # ------------------------------------------------------------------ internals

    def _after(self, at: float) -> Iterator[OccurrenceTime]:
        """Occurrences firing strictly after ``at``, in order."""
        wall = datetime.fromtimestamp(at, self.zone).replace(tzinfo=None, fold=0)
        # fromtimestamp rounds to the microsecond, possibly up onto a fire time that is
        # still ahead of ``at``: start a minute early and let the filter below decide.
        it = _croniter(self.cron, _floor_minute(wall) - _MINUTE)
        while True:
            try:
                candidate = it.get_next(datetime)
            except _search_errors():
                return
            occurrence = self._resolve(candidate)
            # In a repeated hour the first pass of the next few wall times may be
            # behind ``at``; they are skipped here, never fired twice.
            if occurrence is not None and occurrence.logical_at > at:
                yield occurrence

    def _resolve(self, wall: datetime) -> OccurrenceTime | None:
        """The instant a matching wall time fires, or None when a DST gap drops it."""
        # fold=0 picks the first pass of a repeated hour: an ambiguous time fires once.
        at = wall.replace(tzinfo=self.zone, fold=0).timestamp()
        if datetime.fromtimestamp(at, self.zone).replace(tzinfo=None) != wall:
            gap_end = self._gap_end(wall)
            gap_end_wall = datetime.fromtimestamp(gap_end, self.zone).replace(tzinfo=None)
            later = _next_wall(self.cron, wall)
            if later is not None and later <= gap_end_wall:
                return None
            at = gap_end
        return OccurrenceTime(logical_at=at, logical_date=self._identity(wall))

    def _gap_end(self, wall: datetime) -> float:
        """The transition instant that skipped ``wall`` (the first instant after the gap)."""
        # fold=1 reads a gap time with the offset after the change, which lands before
        # the transition; fold=0 with the offset before, which lands after it.
        lo = int(wall.replace(tzinfo=self.zone, fold=1).timestamp())
        hi = int(wall.replace(tzinfo=self.zone, fold=0).timestamp())
        before = datetime.fromtimestamp(lo, self.zone).utcoffset()
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if datetime.fromtimestamp(mid, self.zone).utcoffset() == before:
                lo = mid
            else:
                hi = mid
        return float(hi)

    def _identity(self, wall: datetime) -> str:
        if self.once_per_day:
            return wall.date().isoformat()
        return f"{wall.date().isoformat()}T{wall:%H:%M}"

    def _first_on(self, day: date) -> OccurrenceTime:
        midnight = datetime.combine(day, time.min)
        it = _croniter(self.cron, midnight - _MINUTE)
        while True:
            try:
                candidate = it.get_next(datetime)
            except _search_errors():
                break
            if candidate.date() != day:
                break
            occurrence = self._resolve(candidate)
            if occurrence is not None:
                return occurrence
        raise InvalidInput("date", f"{self._name()} does not fire on {day}, a {day:%A}"
                                   f"{self._fires_on()}; {self._nearest(midnight)}")

    def _fires_on(self) -> str:
        """`` (it fires on Mondays at 09:00)``, as far as the expression says it plainly."""
        minutes, hours, days, _, weekdays = _expand(self.cron)
        said = []
        if days == ["*"] and weekdays != ["*"]:
            numbers = sorted({int(d) for d in weekdays if d.isdigit()})
            said.append("on " + ", ".join(_WEEKDAYS[d % 7] for d in numbers))
        if self.once_per_day:
            said.append(f"at {int(hours[0]):02d}:{int(minutes[0]):02d}")
        return f" (it fires {' '.join(said)})" if said else ""

    def _nearest(self, wall: datetime) -> str:
        """The fire times either side of a local wall time, as identities to retry with."""
        at = wall.replace(tzinfo=self.zone).timestamp()
        before = self.latest(at - 1)
        after = next(self._after(at - 1), None)
        # Never suggest a date that would itself be refused.
        if before is not None and before.logical_date[:10] < EARLIEST_DATE.isoformat():
            before = None
        if after is not None and after.logical_date[:10] > LATEST_DATE.isoformat():
            after = None
        parts = [f"previous {before.logical_date}" if before else "",
                 f"next {after.logical_date}" if after else ""]
        if not any(parts):
            return "it never fires"
        return "nearest: " + ", ".join(p for p in parts if p)

    def _name(self) -> str:
        return f"schedule {self.cron!r} in {self.timezone}"


def _zone(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError("timezone", f"{name!r} is not an IANA time zone name")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        # ValueError: a malformed key such as an absolute path; OSError: a folder of the
        # zone database (``Europe``), a name too long for a file.
        raise ConfigurationError(
            "timezone", f"unknown time zone {name!r}; use an IANA name such as "
                        f"'Europe/Berlin' or 'UTC'") from exc


def _parse(cron: str) -> list[list[str]]:
    """The expression's fields, expanded, as strings; ConfigurationError when invalid."""
    if not isinstance(cron, str):
        raise ConfigurationError("cron", f"{cron!r} is not a cron expression string")
    try:
        it = _croniter(cron, _REFERENCE)
    except _croniter_errors(ValueError, TypeError, KeyError) as exc:
        raise ConfigurationError(
            "cron", f"invalid cron expression {cron!r}: {_fault(cron) or exc}") from exc
    expanded = _expand(cron, it)
    if len(expanded) != 5:
        # Seconds or years would make two occurrences share one HH:MM identity.
        raise ConfigurationError(
            "cron", f"invalid cron expression {cron!r}: expected 5 fields "
                    f"(minute hour day-of-month month day-of-week), got {len(expanded)}")
    try:
        it.get_next(datetime)
    except _search_errors() as exc:
        raise ConfigurationError("cron", f"cron expression {cron!r} never fires") from exc
    return expanded


#: The five fields: their names and ranges, and the names a field may use for values.
_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day-of-month", 1, 31), ("month", 1, 12),
           ("day-of-week", 0, 7))
_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_VALUE_NAMES: dict[int, dict[str, int]] = {
    3: {name: i for i, name in enumerate(_MONTH_NAMES, start=1)},
    4: {name: i for i, name in enumerate(_WEEKDAY_NAMES)},
}
_LAYOUT = "fields: minute hour day-of-month month day-of-week"


def _fault(cron: str) -> str | None:
    """What is wrong with an expression croniter refused, in the field's own terms
    ("minute 61 is out of range 0-59"); None when no plain part is at fault (croniter's
    extensions such as ``L`` or ``#``), and croniter's reason stands."""
    fields = cron.split()
    if len(fields) != 5:
        return f"expected 5 fields, got {len(fields)} ({_LAYOUT})"
    for i, (text, (name, low, high)) in enumerate(zip(fields, _FIELDS, strict=True)):
        for part in text.split(","):
            base, slash, step = part.partition("/")
            if slash and not (step.isdigit() and int(step) >= 1):
                return f"{name} {text!r}: the step after '/' must be a whole number from 1"
            if base == "*":
                continue
            ends = base.split("-")
            if len(ends) > 2 or "" in ends:
                return (f"{name} {text!r}: {part!r} is not a value, a range a-b, * or "
                        f"a step */n ({_LAYOUT})")
            for end in ends:
                value = _VALUE_NAMES.get(i, {}).get(end.lower())
                if value is None and not end.isdigit():
                    if not end.isalpha():
                        return None
                    names = ", ".join(_VALUE_NAMES.get(i, {}))
                    return (f"{name} {text!r}: {end!r} is not a number"
                            + (f" or a name ({names})" if names else ""))
                if value is None and not low <= int(end) <= high:
                    return f"{name} {end} is out of range {low}-{high} ({_LAYOUT})"
    return None


def _expand(cron: str, it: croniter[float] | None = None) -> list[list[str]]:
    # croniter expands to ints and markers like "*" or "l"; strings compare uniformly.
    fields = (it or _croniter(cron, _REFERENCE)).expanded
    return [[str(value) for value in values] for values in fields]


def logical_day(text: object, field: str = "date") -> date:
    """The date ``YYYY-MM-DD`` names, if it is a real one the scheduler supports; else
    ``InvalidInput`` on ``field``."""
    day, clock = _parse_logical_date(text, field)
    if clock is not None:
        raise InvalidInput(field, f"{text!r} is not YYYY-MM-DD")
    return day


def check_instant(at: object, field: str) -> float:
    """``at`` (UTC epoch seconds) as a float, if it is a finite instant within the
    supported dates; else ``InvalidInput`` on ``field``."""
    if isinstance(at, bool) or not isinstance(at, int | float):
        raise InvalidInput(field, f"must be a number of seconds, not {type(at).__name__}")
    try:
        value = float(at)
    except OverflowError:
        value = math.inf
    if not math.isfinite(value) or not _EARLIEST_AT <= value <= _LATEST_AT:
        raise InvalidInput(field, f"is outside the supported dates ({_supported()})")
    return value


def _supported() -> str:
    return f"{EARLIEST_DATE.isoformat()} to {LATEST_DATE.isoformat()}"


def _parse_logical_date(text: object, field: str = "date") -> tuple[date, time | None]:
    match = _LOGICAL_DATE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        shown = repr(text) if isinstance(text, str) and len(text) <= 40 else "it"
        raise InvalidInput(field, f"{shown} is not YYYY-MM-DD or YYYY-MM-DDTHH:MM")
    year, month, day, hour, minute = match.groups()
    try:
        parsed = date(int(year), int(month), int(day))
        clock = None if hour is None else time(int(hour), int(minute))
    except ValueError as exc:
        raise InvalidInput(field, f"{text!r} is not a real date or time: {exc}") from None
    if not EARLIEST_DATE <= parsed <= LATEST_DATE:
        raise InvalidInput(field, f"{text!r} is outside the supported dates ({_supported()})")
    return parsed, clock


def _next_wall(cron: str, wall: datetime) -> datetime | None:
    try:
        return _croniter(cron, wall).get_next(datetime)
    except _search_errors():
        return None


def _floor_minute(wall: datetime) -> datetime:
    return wall.replace(second=0, microsecond=0)
