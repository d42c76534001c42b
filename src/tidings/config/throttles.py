"""Settings of a channel's per-recipient throttle (``channels.<name>.throttle``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tidings.core.durations import Seconds


class ThrottleSettings(BaseModel):
    """A per-recipient throttle (``tidings.core.throttle``, docs/throttles.md): at most
    ``limit`` sends to one recipient in each fixed window of ``window_s`` (aligned to
    the epoch: a day's window starts at midnight UTC), counted across every worker."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    limit: int = Field(ge=1, le=1_000_000)
    """Sends per recipient per window."""
    window_s: Seconds
    """The window's length in seconds (86400: a day)."""
    mode: Literal["drop", "defer"] = "drop"
    """What a send over the limit becomes: ``drop`` ends it ``throttled`` (terminal, no
    provider call, the rule named); ``defer`` retries it at the next window's start."""
