"""What status, plan and ``/metrics`` read: one snapshot of the ports, and its counts
added up (``Totals``, the SLI, a channel's configured rate). Definitions of backlog,
SLI and rates: ``tidings.operate.operations``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidings.core.failover import providers_key
from tidings.core.model import QueueDepth
from tidings.core.pacing import PaceLimits
from tidings.operate import holds
from tidings.operate.readmodel import HoldsReport
from tidings.stores.base import DigestPending, IntentSummary, Occurrence, Store, Switch
from tidings.transports.base import Transport


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """Everything status, plan and metrics read, taken at ``now``."""

    now: float
    window_s: float
    summaries: tuple[IntentSummary, ...]
    queues: Mapping[str, QueueDepth]
    events: Mapping[str, Mapping[str, int]]
    switches: tuple[Switch, ...]
    occurrences: tuple[Occurrence, ...] = ()
    age_span: tuple[float, float] | None = None
    """Creation times of the ledger's oldest and newest intent (None: none)."""
    holds: HoldsReport = field(default_factory=HoldsReport)
    """``tidings.operate.holds.report``: the holds in place, and intents expired while held."""
    digests: DigestPending = field(default_factory=lambda: DigestPending(
        windows=0, items=0, oldest_opened_at=None))
    """Digest windows not yet admitted, and their items."""
    providers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per channel with fallbacks, what the workers last said about each provider being
    out or back (``tidings.core.failover.provider_said``)."""


async def snapshot(store: Store, transport: Transport, *, channels: Sequence[str], now: float,
                   window_s: float, occurrences: bool = True) -> Snapshot:
    """Read the store and the queues once."""
    summaries = await store.intent_summary(now=now, since=now - window_s)
    known = sorted(set(channels) | {s.channel for s in summaries})
    queues = {channel: await transport.depth(channel, now=now) for channel in known}
    events = await store.event_counts()
    said = {channel: await store.pacer_read(providers_key(channel)) for channel in known}
    return Snapshot(
        now=now, window_s=window_s, summaries=tuple(summaries), queues=queues,
        events=events, switches=tuple(await store.switch_all()),
        occurrences=tuple(await store.occurrence_list()) if occurrences else (),
        age_span=await store.intent_age_span(), holds=await holds.report(store, events),
        digests=await store.digest_pending(),
        providers={channel: dict(state.get("providers") or {})
                   for channel, state in said.items() if state})


def sli(summary: IntentSummary | Totals) -> float | None:
    """Share of eligible intents accepted before expiry (see ``tidings.operate.operations``):
    suppressed and throttled ones, like cancelled and rejected ones, are not eligible."""
    late = summary.accepted - summary.accepted_in_time
    eligible = summary.accepted_in_time + late + summary.expired + summary.dead + summary.overdue
    return None if eligible == 0 else summary.accepted_in_time / eligible


def configured_rate(limits: PaceLimits | None) -> float | None:
    """Requests per second a channel's pacing allows; None when it sets no pace."""
    if limits is None or limits.interval_s <= 0:
        return None
    return 1.0 / limits.interval_s


@dataclass(kw_only=True)
class Totals:
    """``IntentSummary`` counts added up over several campaigns (or channels)."""

    total: int = 0
    backlog: int = 0
    scheduled: int = 0
    claimed: int = 0
    retryable: int = 0
    uncertain: int = 0
    accepted: int = 0
    accepted_in_time: int = 0
    accepted_recent: int = 0
    expired: int = 0
    dead: int = 0
    rejected: int = 0
    cancelled: int = 0
    overdue: int = 0
    suppressed: int = 0
    throttled: int = 0
    oldest_due_at: float | None = None
    earliest_expiry: float | None = None

    def add(self, s: IntentSummary | Totals) -> None:
        for name in ("total", "backlog", "scheduled", "claimed", "retryable", "uncertain",
                     "accepted", "accepted_in_time", "accepted_recent", "expired", "dead",
                     "rejected", "cancelled", "overdue", "suppressed",
                     "throttled"):
            setattr(self, name, getattr(self, name) + getattr(s, name))
        self.oldest_due_at = _min(self.oldest_due_at, s.oldest_due_at)
        self.earliest_expiry = _min(self.earliest_expiry, s.earliest_expiry)


def _min(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def age(now: float, at: float | None) -> float:
    return 0.0 if at is None else max(0.0, now - at)
