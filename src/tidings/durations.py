"""Durations: the seconds settings take, and the short form the command line takes.

``Seconds`` is a settings field's duration: a finite number of seconds above zero
(``inf``, ``nan``, 0 and negatives are refused, the error naming the field);
``SecondsOrZero`` also admits 0, for the fields where 0 means "none" (no interval, no
grace, no cache). ``parse_duration`` reads ``90s``, ``15m``, ``12h`` or ``30d``.
"""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import Field

from tidings.errors import InvalidInput

Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A duration in seconds: finite and above zero."""

SecondsOrZero = Annotated[float, Field(ge=0, allow_inf_nan=False)]
"""A duration in seconds where 0 means none: finite and not negative."""

UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^(?P<count>[0-9]{1,9})(?P<unit>[smhd])$")
#: Far enough for any expiry, near enough that ``now + duration`` stays exact.
LONGEST_S: Final = 100 * 365 * 86400


def parse_duration(text: str, field: str) -> float:
    """Seconds in ``text``: a whole number and a unit (``90s``, ``15m``, ``12h``,
    ``30d``), above zero and at most 100 years; else InvalidInput naming ``field``."""
    match = _DURATION.match(text.strip().lower())
    if match is None:
        raise InvalidInput(field, f"{text!r} is not a duration; write a whole number and a "
                           "unit: 90s, 15m, 12h or 30d")
    seconds = int(match["count"]) * UNITS[match["unit"]]
    if not 0 < seconds <= LONGEST_S:
        raise InvalidInput(field, f"{text!r} must be above zero and at most 100 years")
    return float(seconds)
