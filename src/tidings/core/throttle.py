"""Per-recipient throttles: at most ``limit`` sends to one recipient per window.

A rule belongs to a channel (``channel:<name>``: every send of the channel) or, as an
override, to a campaign on a channel (``campaign:<campaign>/<channel>``: that
campaign's sends there, instead of the channel's rule). Windows are fixed, aligned to
the epoch (a day's window starts at midnight UTC): ``window_of(now)``.

The worker asks for a reservation right after the send-time gate let an intent
through and before the pacer and the provider (``tidings.delivery.throttle_gate``).
The store counts and reserves atomically per (rule, recipient, window) across every
worker process (``Throttles.throttle_reserve``), once per intent key and window (a
claim of the same intent again in the same window is not counted twice). What it
refuses is ``Throttled``:

- mode ``drop``: the intent ends ``throttled``, terminal, with no provider call; its
  reason names the rule. Not a failure, not eligible for the SLI.
- mode ``defer``: the intent becomes retryable at the next window's start (event
  ``throttle_deferred``); a later window may refuse it again, until it expires.

A reservation is handed back (``release``) only when the send surely did not happen:
the provider refused it (429, 5xx, a permanent refusal) or it failed before the request
could leave. An uncertain send keeps its reservation: it may have been delivered.
Pure: the stores apply what these rules decide.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Final

from tidings.core.states import State

#: The event of a send the throttle moved to the next window.
DEFERRED_EVENT: Final = "throttle_deferred"
#: The event (and the state) of a send the throttle ended.
THROTTLED_EVENT: Final = "throttled"


class Mode(StrEnum):
    """What a refused send becomes."""

    DROP = "drop"
    """Terminal ``throttled``."""
    DEFER = "defer"
    """Retryable at the next window's start."""


@dataclass(frozen=True, kw_only=True)
class Rule:
    """At most ``limit`` sends per recipient in each fixed window of ``window_s``."""

    name: str
    limit: int
    window_s: float
    mode: Mode = Mode.DROP

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ValueError(f"throttle {self.name}: limit must be an integer of at least 1, "
                             f"not {self.limit!r}")
        if not (isinstance(self.window_s, int | float) and math.isfinite(self.window_s)
                and self.window_s > 0):
            raise ValueError(f"throttle {self.name}: window_s must be finite and above "
                             f"zero, not {self.window_s!r}")

    def window_of(self, now: float) -> tuple[float, float]:
        """The window ``now`` falls in: ``[start, end)``."""
        # Both ends are computed as index * window_s, so a window's end is exactly the
        # next one's start; float rounding can put ``now`` just outside: its neighbour.
        index = math.floor(now / self.window_s)
        if now < index * self.window_s:
            index -= 1
        elif now >= (index + 1) * self.window_s:
            index += 1
        start, end = index * self.window_s, (index + 1) * self.window_s
        return start, end

    @property
    def describe(self) -> str:
        """The rule as a reason names it: ``channel:sms (3 per 86400 s)``."""
        return f"{self.name} ({self.limit} per {self.window_s:g} s)"


def channel_rule_name(channel: str) -> str:
    return f"channel:{channel}"


def campaign_rule_name(campaign: str, channel: str) -> str:
    return f"campaign:{campaign}/{channel}"


@dataclass(frozen=True, kw_only=True)
class Ask:
    """One reservation asked of the store: count ``key`` in ``rule``'s window of
    ``recipient`` starting at ``window_start``, unless ``limit`` are counted already."""

    key: str
    rule: str
    recipient: str
    window_start: float
    window_end: float
    limit: int


@dataclass(frozen=True, kw_only=True)
class Throttled:
    """What a refused reservation makes of the intent."""

    key: str
    rule: Rule
    to_state: State
    event: str
    reason: str
    until: float | None


@dataclass(frozen=True)
class Rules:
    """Every throttle: per channel, and per (campaign, channel) overrides."""

    channels: Mapping[str, Rule] = field(default_factory=dict)
    campaigns: Mapping[tuple[str, str], Rule] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.channels or self.campaigns)

    def for_channel(self, channel: str) -> Rules:
        """The rules a worker of ``channel`` applies."""
        return Rules({c: r for c, r in self.channels.items() if c == channel},
                     {k: r for k, r in self.campaigns.items() if k[1] == channel})

    def rule_for(self, channel: str, campaign: str | None) -> Rule | None:
        """The rule a send of ``campaign`` (None: a one-off) on ``channel`` is counted
        under: the campaign's override, else the channel's, else none."""
        if campaign is not None:
            found = self.campaigns.get((campaign, channel))
            if found is not None:
                return found
        return self.channels.get(channel)


def ask(rule: Rule, *, key: str, recipient: str, now: float) -> Ask:
    """The reservation a send of ``key`` to ``recipient`` at ``now`` asks for."""
    start, end = rule.window_of(now)
    return Ask(key=key, rule=rule.name, recipient=recipient, window_start=start,
               window_end=end, limit=rule.limit)


def refused(rule: Rule, asked: Ask) -> Throttled:
    """What the rule makes of a send whose reservation was refused. A deferral's reason
    names the rule and when the send comes back (its timeline event carries it: a
    retryable intent keeps no reason of its own)."""
    if rule.mode is Mode.DEFER:
        back = datetime.fromtimestamp(asked.window_end, tz=UTC).isoformat(timespec="seconds")
        return Throttled(key=asked.key, rule=rule, to_state=State.RETRYABLE,
                         event=DEFERRED_EVENT, until=asked.window_end,
                         reason=f"throttled by {rule.describe}: deferred to the next window, "
                                f"back at {back.replace('+00:00', 'Z')}")
    return Throttled(key=asked.key, rule=rule, to_state=State.THROTTLED, event=THROTTLED_EVENT,
                     until=None, reason=rule.describe)


def releases(to_state: State) -> bool:
    """Whether a send that ended in ``to_state`` hands its reservation back: only when
    it surely was not sent (retryable after a refusal or a failure before the request
    left, rejected, dead). Accepted was sent; uncertain may have been."""
    return to_state in (State.RETRYABLE, State.REJECTED, State.DEAD)
