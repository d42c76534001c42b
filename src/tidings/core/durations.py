"""Durations as people type them: ``90s``, ``15m``, ``12h``, ``30d`` (or plain seconds)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Annotated

from pydantic import Field

from tidings.core.errors import InvalidInput

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_DURATION = re.compile(r"(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>[smhdw]?)")


def parse_duration(text: str, field: str) -> float:
    """Seconds in ``text``; ``InvalidInput`` on ``field`` for anything else (zero,
    negative and unbounded durations included).

    >>> parse_duration("6h", "expires_in")
    21600.0
    """
    match = _DURATION.fullmatch(text.strip().lower()) if isinstance(text, str) else None
    if match is None:
        raise InvalidInput(field, f"{text!r} is not a duration like 90s, 15m, 12h or 30d")
    seconds = float(match["n"]) * _UNITS[match["unit"] or "s"]
    if not (0 < seconds < math.inf):
        raise InvalidInput(field, f"{text!r} must be longer than zero")
    return seconds


# Durations as settings hold them: every ``*_s`` field of ``tidings.config.settings`` and of
# the provider settings is one of these two, so ``inf``, ``nan`` and negatives (which
# TOML can write) are refused at load with the field's name.

Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A duration in seconds: finite and above zero."""

LeaseSeconds = Annotated[float, Field(ge=1.0, allow_inf_nan=False)]
"""A lease or a visibility timeout in seconds: finite and at least a second. Shorter
than a send's round trip, a lease ends before its send can start (every message is
released unsent, for ever), a visibility timeout before its batch is handled."""

SecondsOrZero = Annotated[float, Field(ge=0, allow_inf_nan=False)]
"""A duration in seconds where 0 means none (no interval, no grace, no cache): finite
and not negative."""


def parse_until(text: str, now: float, field: str) -> float:
    """A moment in ``text``: an ISO 8601 time (UTC when it names no zone) or a duration
    from ``now`` (``6h``); ``InvalidInput`` on ``field`` saying which it failed to be."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        if text[:1].isdigit() and "-" in text[1:]:  # meant as a time: say what is wrong
            raise InvalidInput(field, f"{text!r} is not an ISO 8601 time: {exc}") from None
        return now + parse_duration(text, field)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.timestamp()
    except (OverflowError, OSError, ValueError):
        raise InvalidInput(field, f"{text!r} is out of the supported dates") from None
