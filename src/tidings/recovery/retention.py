"""Ledger retention: how long finished work is kept, and pruning it in bounded batches.

The rule (``minimum_retention``): a terminal intent is the consumer record that turns a
redelivery or a replay into a no-op, so it must outlive both.

- **Redelivery window**: the longer of two ways one delivery can come back. A queue
  message is received at most ``worker.max_receives`` times, each time hidden for
  ``worker.visibility_s``; a retry waits at most ``retry.cap_s`` and there are at most
  ``retry.max_failures`` of them. (A claim's lease is not a redelivery: a lease that
  runs out leaves the intent uncertain, not finished.) A publisher retries one
  request with its ``Idempotency-Key`` for ``api.idempotency_ttl_s``. Both start
  before the intent finishes, so measured from its finish the longer one suffices.
- **Replay window**: a replay or a late trigger of a campaign date is allowed while
  its freshness deadline holds (``campaigns.<name>.expires_after_s`` after the date)
  plus the trigger grace (``grace_s``); the longest over the campaigns. A campaign
  with no freshness deadline adds its grace only: an older replay of it is refused by
  retention itself (``Scheduler.plan_replay``).

``retention.intents_s`` and ``retention.occurrences_s`` shorter than the sum are
refused at start-up, naming the field and the bound that decides.

Pruning (``prune``) removes exactly three things: terminal intents that finished (and
were last touched) before ``now - intents_s``, their events, and occurrences done or
skipped before ``now - occurrences_s``. Nothing else is ever deleted: an event whose
type is not an intent's (an occurrence restart, a guardrail trip, a prune's own audit
event) is kept. Batches are bounded (``batch_size`` rows a statement, ``max_batches``
a prune); what is left waits for the next prune. Every prune that removes anything
leaves a ``retention_pruned`` audit event, and always a log line, with its counts.

On PostgreSQL the events table is partitioned by day on ``at`` (migration 0009). An
intent's events are never older than the intent (``at >= created_at``, allowing
``EVENT_SKEW_S`` for a provider's clock), so a day partition wholly before the cutoff
is dropped whole once no intent left in the ledger was created before its end plus
that skew: every event in it then belongs to a pruned intent, or to no intent (those,
the audit events, are copied out first and kept). While an older intent is still
kept (a held one, a future-dated one, one that took long to finish), the partition is
not dropped; its events of intents no longer in the ledger are deleted row-wise in
batches instead. So a prune batch deletes by key only the events in the default
partition (which takes any row no day partition covers, so an insert never fails):
it never probes every partition's index for every key, and an event of a pruned
intent stamped later (a late webhook) goes when its own day is dropped or swept.
Partitions are created ``PARTITIONS_AHEAD`` days ahead.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tidings.core.errors import ConfigurationError, StoreError
from tidings.core.model import Event
from tidings.core.retention import (
    AUDIT_KEY,
    CUTOFF_FIELD,
    DAY_S,
    INTENT_EVENT_TYPES,
    Partition,
    PruneCounts,
    plan_partitions,
)

if TYPE_CHECKING:
    from tidings.config.settings import Settings
    from tidings.stores.base import Digests, Ledger, RetentionQueries, Throttles
    from tidings.stores.base import PartitionedEvents as PartitionedEventsT

    class PrunableStore(Ledger, RetentionQueries, Throttles, Digests, Protocol):
        """What a prune reaches: its queries, the ledger for its audit event, the
        throttle counts of windows that have ended, and digest windows finished before
        the intents' cutoff."""

log = logging.getLogger("tidings.retention")



# ---------------------------------------------------------------- the bound


@dataclass(frozen=True, kw_only=True)
class Bound:
    """The shortest retention the settings allow, and what it is made of."""

    redelivery_s: float
    redelivery_by: str
    """The settings that decide the redelivery window."""
    replay_s: float
    replay_by: str
    """The settings that decide the replay window ("" without campaigns)."""

    @property
    def total_s(self) -> float:
        return self.redelivery_s + self.replay_s


def minimum_retention(settings: Settings) -> Bound:
    """The redelivery window plus the replay window of ``settings`` (see the module)."""
    w, r = settings.worker, settings.retry
    queue_s = w.visibility_s * w.max_receives + r.max_failures * r.cap_s
    queue_by = "worker.visibility_s × worker.max_receives + retry.max_failures × retry.cap_s"
    ttl_s = settings.api.idempotency_ttl_s
    redelivery = (ttl_s, "api.idempotency_ttl_s") if ttl_s >= queue_s else (queue_s, queue_by)
    replay_s, replay_by = 0.0, ""
    for name, campaign in sorted(settings.campaigns.items()):
        span = (campaign.expires_after_s or 0.0) + campaign.grace_s
        if span > replay_s:
            replay_s = span
            replay_by = (f"campaigns.{name}.expires_after_s + grace_s"
                         if campaign.expires_after_s is not None
                         else f"campaigns.{name}.grace_s")
    return Bound(redelivery_s=redelivery[0], redelivery_by=redelivery[1],
                 replay_s=replay_s, replay_by=replay_by)


def days(seconds: float) -> float:
    """Seconds as days, rounded for people (0.01 d is under 15 minutes)."""
    return round(seconds / DAY_S, 2)


def check_retention(settings: Settings) -> None:
    """ConfigurationError naming the first retention field shorter than the bound."""
    bound = minimum_retention(settings)
    for name in ("intents_s", "occurrences_s"):
        value = getattr(settings.retention, name)
        if value < bound.total_s:
            replay = (f" plus the replay window {days(bound.replay_s):g} d "
                      f"({bound.replay_by})" if bound.replay_by else "")
            raise ConfigurationError(f"retention.{name}", (
                f"{value:g} s ({days(value):g} days) is shorter than the "
                f"{days(bound.total_s):g} days "
                f"that must be kept: the redelivery window {days(bound.redelivery_s):g} d "
                f"({bound.redelivery_by}){replay}"))


# ---------------------------------------------------------------- the batch planner


@dataclass(frozen=True, kw_only=True)
class RetentionConfig:
    """``[retention]`` as the pruner uses it."""

    intents_s: float = 30 * DAY_S
    occurrences_s: float = 30 * DAY_S
    every_s: float = 3600.0
    batch_size: int = 2000
    max_batches: int = 50
    enabled: bool = True


@dataclass(frozen=True, kw_only=True)
class PrunePlan:
    """One prune: what is old enough, and how much one prune may delete."""

    intent_cutoff: float
    """Terminal intents finished (and last touched) before this are pruned."""
    occurrence_cutoff: float
    batch_size: int
    max_batches: int

    def more(self, batches_done: int, last: PruneCounts) -> bool:
        """Another batch? Not once the budget is spent, nor after a short batch (the
        last of what was old enough)."""
        if batches_done >= self.max_batches:
            return False
        return last.intents >= self.batch_size or last.occurrences >= self.batch_size


def plan_prune(config: RetentionConfig, *, now: float) -> PrunePlan:
    return PrunePlan(intent_cutoff=now - config.intents_s,
                     occurrence_cutoff=now - config.occurrences_s,
                     batch_size=config.batch_size, max_batches=config.max_batches)


def next_prune_at(now: float, every_s: float) -> float:
    """When the next prune is due: prunes run on a grid of ``every_s`` from the epoch,
    so every reconciler (and ``tidings status``) agrees without asking one another."""
    return (math.floor(now / every_s) + 1) * every_s


def prune_due(last_at: float | None, now: float, every_s: float) -> bool:
    """A reconciler prunes at its first pass and then once per grid step it crosses."""
    return last_at is None or math.floor(now / every_s) > math.floor(last_at / every_s)


# ---------------------------------------------------------------- partitions (PostgreSQL)


# ---------------------------------------------------------------- the pruner


@dataclass(frozen=True, kw_only=True)
class PruneReport:
    """A prune's answer: ``pruned`` counts, the oldest intent still kept (creation time,
    None on an empty ledger) and the bound in days."""

    pruned: PruneCounts
    oldest_kept: float | None
    bound_days: float
    dry_run: bool
    batches: int
    created_partitions: int = 0

    def as_dict(self) -> dict[str, Any]:
        """``{pruned, oldest_kept, bound_days, dry_run}``, JSON-ready (times in epoch s)."""
        return {"pruned": {"intents": self.pruned.intents, "events": self.pruned.events,
                           "occurrences": self.pruned.occurrences,
                           "partitions": self.pruned.partitions},
                "oldest_kept": self.oldest_kept, "bound_days": self.bound_days,
                "dry_run": self.dry_run}


async def prune(store: PrunableStore, config: RetentionConfig, *, now: float, dry_run: bool = False,
                worker: str | None = None) -> PruneReport:
    """One bounded prune of ``store`` (or, with ``dry_run``, its counts only)."""
    plan = plan_prune(config, now=now)
    bound_days = days(min(config.intents_s, config.occurrences_s))
    if dry_run:
        counts, oldest = await store.retention_count(intent_cutoff=plan.intent_cutoff,
                                                     occurrence_cutoff=plan.occurrence_cutoff)
        return PruneReport(pruned=counts, oldest_kept=oldest, bound_days=bound_days,
                           dry_run=True, batches=0)
    from tidings.stores.base import PartitionedEvents  # the port imports these shapes

    parted = store if isinstance(store, PartitionedEvents) else None
    partitions = await parted.event_partitions() if parted is not None else []
    total = PruneCounts()
    batches = 0
    while True:
        batch = await store.retention_prune_batch(
            intent_cutoff=plan.intent_cutoff, occurrence_cutoff=plan.occurrence_cutoff,
            limit=plan.batch_size)
        batches += 1
        total += batch
        if not plan.more(batches, batch):
            break
    created = 0
    if parted is not None:
        total, batches, created = await _partitions(parted, store, plan, partitions,
                                                    now=now, total=total, batches=batches)
    # A window that has ended counts nothing any more (a reservation is asked for in the
    # window of its send): its counts and reservations go.
    throttle_windows = await store.throttle_purge(before=now)
    # A finished window is kept as long as the digest it became: a replay of one of its
    # items within that time finds the item where it was, and sends nothing again.
    digest_windows = await store.digest_purge(before=plan.intent_cutoff)
    span = await store.intent_age_span()
    report = PruneReport(pruned=total, oldest_kept=None if span is None else span[0],
                         bound_days=bound_days, dry_run=False, batches=batches,
                         created_partitions=created)
    detail = (f"intents={total.intents} events={total.events} "
              f"occurrences={total.occurrences} partitions={total.partitions} "
              f"bound_days={bound_days:g} {CUTOFF_FIELD}{plan.intent_cutoff!r}")
    if total.any():
        await store.event_append_many([Event(
            key=AUDIT_KEY, channel="-", type="retention_pruned", at=now, worker=worker,
            detail=detail)])
    log.info("retention prune", extra={
        "intents": total.intents, "events": total.events, "occurrences": total.occurrences,
        "partitions": total.partitions, "partitions_created": created, "batches": batches,
        "throttle_windows": throttle_windows, "digest_windows": digest_windows,
        "bound_days": bound_days, "worker": worker})
    return report


async def _partitions(parted: PartitionedEventsT, store: PrunableStore, plan: PrunePlan,
                      partitions: Sequence[Partition], *, now: float, total: PruneCounts,
                      batches: int) -> tuple[PruneCounts, int, int]:
    """Drop, sweep and create partitions after the intents' batches (so the oldest
    intent left is known); returns the new totals, batches and partitions created."""
    span = await store.intent_age_span()
    pplan = plan_partitions(partitions, now=now, cutoff=plan.intent_cutoff,
                            oldest_intent_at=None if span is None else span[0])
    types = sorted(INTENT_EVENT_TYPES)
    # A partition change that fails (a lock not had within its timeout, a lost
    # connection) is logged and left for the next prune; the rest goes on.
    leftovers = [n for n in await parted.event_partitions_detached()
                 if n not in {p.name for p in pplan.drop}]
    for name in [*leftovers, *(p.name for p in pplan.drop)]:
        try:
            dropped = await parted.event_partition_drop(name, intent_types=types)
        except StoreError as exc:
            log.warning("retention: partition not dropped", extra={"partition": name,
                                                                   "error": str(exc)})
            continue
        if dropped is not None:
            total += PruneCounts(events=dropped, partitions=1)
    for partition in pplan.sweep:
        while batches < plan.max_batches:
            n = await parted.event_orphans_delete(partition.name, before=plan.intent_cutoff,
                                                  intent_types=types, limit=plan.batch_size)
            batches += 1
            total += PruneCounts(events=n)
            if n < plan.batch_size:
                break
    created = 0
    for partition in pplan.create:
        assert partition.lower is not None  # day partitions have both bounds
        try:
            made = await parted.event_partition_create(partition.name, partition.lower,
                                                       partition.upper)
        except StoreError as exc:
            log.warning("retention: partition not created", extra={
                "partition": partition.name, "error": str(exc)})
            continue
        created += made
    return total, batches, created


def retention_config(settings: Settings) -> RetentionConfig:
    r = settings.retention
    return RetentionConfig(intents_s=r.intents_s, occurrences_s=r.occurrences_s,
                           every_s=r.every_s, batch_size=r.batch_size,
                           max_batches=r.max_batches, enabled=r.enabled)
