"""The pacing algorithm as pure functions over a channel's shared state.

State (a JSON object stored by the backend):

- ``tat``: the earliest start time not yet handed out (a GCRA "theoretical
  arrival time"): start slots are spaced ``interval`` apart across all processes;
- ``paused_until``: a 429 pauses the whole channel until then;
- ``streak``: consecutive 429s, for backoff without Retry-After;
- ``inflight``: ``{worker: [count, heartbeat_at]}``; a worker silent for
  ``stale_s`` is presumed dead and its slots are freed; one the reconciler knows is
  gone (its process gone from the host) has its slots freed at once (``forget``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tidings.core.errors import ConfigurationError

_QUOTA = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(ms|s|sec|second|m|min|minute|h|hour)\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0,
           "minute": 60.0, "h": 3600.0, "hour": 3600.0}


def parse_quota(text: str, field: str = "quota") -> float:
    """Parse ``"100/s"``, ``"6000/min"`` into requests per second."""
    match = _QUOTA.match(text)
    if not match:
        raise ConfigurationError(field, f"{text!r} is not a quota like '100/s' or '6000/min'")
    count, unit = float(match.group(1)), match.group(2)
    if count <= 0:
        raise ConfigurationError(field, "must be positive")
    return count / _UNIT_S[unit]


#: Requests per second the pacer keeps below a quota at the least.
MARGIN_REQUESTS = 2.0


@dataclass(frozen=True, kw_only=True)
class PaceLimits:
    """A channel's pacing controls, enforced across every process of the channel.

    ``quota_per_s`` is what the provider allows; the pacer aims below it so timing
    noise cannot push a one-second window over the quota: at ``quota_per_s * safety``,
    but (unless ``safety`` is 1) at least ``MARGIN_REQUESTS`` below the quota. A
    request that arrives a little late lands in the next window, and at 50/s a 2 %
    margin is a single request; the 429 it would cost pauses the channel for a second.
    """

    max_in_flight: int = 64
    min_interval_s: float = 0.0
    quota_per_s: float | None = None
    safety: float = 0.98

    def __post_init__(self) -> None:
        if self.max_in_flight < 1:
            raise ConfigurationError("max_in_flight", "must be at least 1")
        if self.min_interval_s < 0:
            raise ConfigurationError("min_interval", "must not be negative")
        if not 0 < self.safety <= 1:
            raise ConfigurationError("safety", "must be in (0, 1]")

    @property
    def paced_per_s(self) -> float | None:
        """The rate the pacer aims at (None without a quota)."""
        if not self.quota_per_s:
            return None
        if self.safety >= 1:
            return self.quota_per_s  # no headroom asked for: none given
        # Never below half the quota: a tiny quota (1/s) keeps a usable rate.
        return max(self.quota_per_s / 2,
                   min(self.quota_per_s * self.safety, self.quota_per_s - MARGIN_REQUESTS))

    @property
    def interval_s(self) -> float:
        """Seconds between two request starts on the channel."""
        paced = self.paced_per_s
        return max(self.min_interval_s, 1.0 / paced if paced else 0.0)


@dataclass(frozen=True, kw_only=True)
class Grant:
    """Start times handed to one worker; empty with ``retry_at`` when none is free."""

    starts: tuple[float, ...]
    retry_at: float
    paused_until: float
    streak: int


def _inflight(state: dict[str, Any]) -> dict[str, list[float]]:
    table = state.setdefault("inflight", {})
    assert isinstance(table, dict)
    return table


def _base(state: dict[str, Any] | None) -> dict[str, Any]:
    if state is None:
        return {"tat": 0.0, "paused_until": 0.0, "streak": 0, "inflight": {}}
    return dict(state, inflight={k: list(v) for k, v in state.get("inflight", {}).items()})


def reserve(
    state: dict[str, Any] | None,
    *,
    limits: PaceLimits,
    worker: str,
    want: int,
    release: int,
    now: float,
    horizon_s: float,
    stale_s: float,
) -> tuple[dict[str, Any], Grant]:
    """Return ``release`` slots ``worker`` finished with, then hand it up to ``want``
    start times within ``horizon_s`` of ``now``."""
    new = _base(state)
    table = _inflight(new)
    own = max(0, int(table.get(worker, [0, now])[0]) - release)
    table[worker] = [own, now]
    for name, (_, heartbeat) in list(table.items()):
        if name != worker and heartbeat < now - stale_s:
            del table[name]
    paused_until = float(new["paused_until"])
    streak = int(new["streak"])
    if paused_until > now:
        return new, Grant(starts=(), retry_at=paused_until, paused_until=paused_until,
                          streak=streak)
    busy = sum(int(count) for count, _ in table.values())
    free = limits.max_in_flight - busy
    if free <= 0 or want <= 0:
        # Another process must finish first; look again soon.
        return new, Grant(starts=(), retry_at=now + 0.005, paused_until=paused_until,
                          streak=streak)
    count = min(want, free)
    interval = limits.interval_s
    starts: list[float] = []
    if interval <= 0:
        starts = [now] * count
    else:
        slot = max(now, float(new["tat"]))
        while len(starts) < count and slot <= now + horizon_s:
            starts.append(slot)
            slot += interval
        new["tat"] = slot
    table[worker] = [own + len(starts), now]
    retry_at = now if starts else float(new["tat"]) - horizon_s
    return new, Grant(starts=tuple(starts), retry_at=retry_at, paused_until=paused_until,
                      streak=streak)


def live_workers(state: dict[str, Any] | None, *, worker: str, now: float,
                 within_s: float) -> int:
    """How many workers share the channel: those heard from (a reservation or a return
    of slots) within ``within_s`` of ``now``, ``worker`` itself always counted."""
    table = (state or {}).get("inflight", {})
    others = sum(1 for name, (_, heartbeat) in table.items()
                 if name != worker and float(heartbeat) >= now - within_s)
    return others + 1


def give_back(
    state: dict[str, Any] | None, *, worker: str, release: int, now: float
) -> tuple[dict[str, Any], None]:
    """Return finished or forfeited slots without asking for more."""
    new = _base(state)
    table = _inflight(new)
    own = max(0, int(table.get(worker, [0, now])[0]) - release)
    table[worker] = [own, now]
    return new, None


def holds_slots(state: dict[str, Any] | None, *, worker: str) -> bool:
    """Whether ``worker`` holds slots in the channel's table."""
    entry = (state or {}).get("inflight", {}).get(worker)
    return bool(entry and int(entry[0]) > 0)


def forget(state: dict[str, Any] | None, *, worker: str) -> tuple[dict[str, Any], int]:
    """Free every slot of a worker known to be gone, at once rather than after
    ``stale_s``; returns how many it held. Only for a worker none of whose requests can
    still be in flight. It stays in the table until ``stale_s`` with its last heartbeat,
    still counted among the channel's workers (``live_workers``) as one that died a
    moment ago: a peer's claim depth keeps erring on the small side."""
    new = _base(state)
    table = _inflight(new)
    held = table.get(worker)
    if not held:
        return new, 0
    table[worker] = [0, held[1]]
    return new, int(held[0])


def pause(
    state: dict[str, Any] | None, *, until: float, now: float
) -> tuple[dict[str, Any], int]:
    """A 429 pauses the whole channel until ``until``; returns the new streak."""
    new = _base(state)
    new["paused_until"] = max(float(new["paused_until"]), until)
    # Slots already handed out beyond the pause are void: nobody starts before it ends.
    new["tat"] = max(float(new["tat"]), until)
    new["streak"] = int(new["streak"]) + 1
    return new, int(new["streak"])


def clear_streak(state: dict[str, Any] | None) -> tuple[dict[str, Any], None]:
    new = _base(state)
    new["streak"] = 0
    return new, None
