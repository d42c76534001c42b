"""Retention's pure rules, shared by the stores and the stages: the states an intent is
pruned from, the day partitions of the events table (PostgreSQL), what a prune
counts, and the cutoff of the latest prune (``pruned_before``).

How long is kept and the pruner itself are ``tidings.recovery.retention``'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from tidings.core.model import Event
from tidings.core.states import TERMINAL, State

DAY_S = 86400.0
#: The width of one events partition (PostgreSQL): a UTC day.
PARTITION_S = DAY_S
#: Day partitions kept created ahead of today.
PARTITIONS_AHEAD = 7
#: How much earlier than its intent's creation an event may be stamped (a provider's
#: clock behind ours); a partition is dropped only this long after the oldest intent.
EVENT_SKEW_S = 3600.0
#: The key of the prunes' own audit events.
AUDIT_KEY = "retention/prune"

#: Event types written on an intent's timeline. A partition's events of any other type
#: (audit events of occurrences, switches, prunes, and any type added later) are kept
#: when the partition is dropped: an unknown type errs on the side of keeping.
INTENT_EVENT_TYPES: frozenset[str] = frozenset({s.value for s in State} | {
    "claimed", "republished", "lease_lost", "lease_expired", "lease_ended",
    "transient_failure",
    "rate_limited", "resolved_retry", "resolved_accepted", "released", "redriven",
    "duplicate_observed", "discarded", "cancel_requested", "provider_delivered",
    "provider_bounced", "provider_complained", "provider_failed", "throttle_deferred"})
#: The states an intent is pruned from (every one a worker never leaves).
PRUNABLE_STATES: tuple[str, ...] = tuple(sorted(s.value for s in TERMINAL))
#: The states that keep an intent's occurrence: its hold, its release and its report
#: need the occurrence while any of them is left (by the intents' state index).
PENDING_STATES: tuple[str, ...] = tuple(sorted(s.value for s in State if s not in TERMINAL))


class _LastEvent(Protocol):
    async def event_last(self, key: str) -> Event | None: ...


@dataclass(frozen=True, kw_only=True, order=True)
class Partition:
    """One range partition of the events table: ``[lower, upper)``, lower None for the
    partition that took the rows of before partitioning (from MINVALUE)."""

    upper: float
    lower: float | None
    name: str


def day_start(at: float) -> float:
    return math.floor(at / PARTITION_S) * PARTITION_S


def _day(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y%m%d")


def day_partition(start: float) -> Partition:
    """The partition of the UTC day starting at ``start``: ``events_p20261201``."""
    return Partition(name=f"events_p{_day(start)}", lower=start, upper=start + PARTITION_S)


def parse_partition(name: str) -> Partition | None:
    """The range of a partition named by ``day_partition`` or by migration 0009
    (``events_before_20261202``); None for any other table (the default partition)."""
    for prefix, legacy in (("events_p", False), ("events_before_", True)):
        if name.startswith(prefix):
            try:
                day = datetime.strptime(name.removeprefix(prefix), "%Y%m%d").replace(tzinfo=UTC)
            except ValueError:
                return None
            start = day.timestamp()
            if legacy:
                return Partition(name=name, lower=None, upper=start)
            return day_partition(start)
    return None


@dataclass(frozen=True, kw_only=True)
class PartitionPlan:
    create: list[Partition] = field(default_factory=list)
    """Day partitions to create ahead (today's included, if missing)."""
    drop: list[Partition] = field(default_factory=list)
    """Wholly older than the cutoff, and no intent left is older: dropped whole."""
    sweep: list[Partition] = field(default_factory=list)
    """Older than the cutoff but an older intent is kept: row-wise deletes."""


def plan_partitions(existing: Sequence[Partition], *, now: float, cutoff: float,
                    oldest_intent_at: float | None) -> PartitionPlan:
    """Which partitions to create, drop whole, or sweep row by row (see the module)."""
    names = {p.name for p in existing}
    today = day_start(now)
    create = [p for p in (day_partition(today + i * PARTITION_S)
                          for i in range(PARTITIONS_AHEAD + 1)) if p.name not in names]
    drop: list[Partition] = []
    sweep: list[Partition] = []
    for partition in sorted(existing):
        if partition.upper > cutoff:
            continue
        if oldest_intent_at is None or partition.upper + EVENT_SKEW_S <= oldest_intent_at:
            drop.append(partition)
        else:
            sweep.append(partition)
    return PartitionPlan(create=create, drop=drop, sweep=sweep)


@dataclass(frozen=True, kw_only=True)
class PruneCounts:
    """What one batch (or a whole prune) removed, or a dry run would."""

    intents: int = 0
    events: int = 0
    occurrences: int = 0
    partitions: int = 0

    def __add__(self, other: PruneCounts) -> PruneCounts:
        return PruneCounts(intents=self.intents + other.intents,
                           events=self.events + other.events,
                           occurrences=self.occurrences + other.occurrences,
                           partitions=self.partitions + other.partitions)

    def any(self) -> bool:
        return bool(self.intents or self.events or self.occurrences or self.partitions)


CUTOFF_FIELD = "cutoff="


async def pruned_before(store: _LastEvent) -> float | None:
    """The cutoff of the latest prune that removed anything: terminal intents finished
    before it may be gone, so a replay of an older date could send again (None: nothing
    was ever pruned, every date is still whole)."""
    audit = await store.event_last(AUDIT_KEY)
    if audit is None or audit.detail is None:
        return None
    for part in audit.detail.split():
        if part.startswith(CUTOFF_FIELD):
            return float(part.removeprefix(CUTOFF_FIELD))
    return None
