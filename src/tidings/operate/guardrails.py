"""Guardrails: a channel or campaign whose sends go wrong stops admitting new work.

The runbook's first step, carried out by tidings itself: when the duplicate rate, the
permanent-rejection rate, the 429 rate, the dead-letter rate, the providers' reported
bounce or complaint rate or the oldest message's age crosses its threshold over a
sliding window, *admission* of that campaign or channel is paused (its admission
switch, with the reason). Delivery of work already admitted goes on; only an operator
resumes, and resuming shows the reason first.

Rates are shares of the sends that got an answer in the window (accepted, rejected,
rate limited, transient failure, dead, uncertain); ``duplicate_observed`` counts
redeliveries of finished intents. The bounce and complaint rates are the hard bounces
and complaints providers reported in the window (by when tidings recorded them) per
send accepted in it. A rate is judged only once ``min_sends`` sends (accepted sends,
for those two) are in the window, and only on what happened since its switch last
changed, so a resumed campaign is judged on fresh evidence and never flaps back on the
old.

Evaluation is one function over the store's counts, run by every reconciler loop:
two processes that find the same crossing pause once (a compare-and-set on the
switch; only the winner records the event).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tidings.core.model import Event
from tidings.stores.base import Ledger, Occurrences, OutcomeCount, Readings, Switch
from tidings.transports.base import Transport

log = logging.getLogger("tidings.guardrails")

#: Every switch reason a guardrail writes starts with this.
REASON_PREFIX = "guardrail: "
#: The window is read in this many buckets (what "since the switch changed" cuts at).
BUCKETS = 30

#: Event types that are a send with an answer (the denominator of every rate).
SENDS = ("accepted", "rejected", "rate_limited", "transient_failure", "dead", "uncertain")
#: measure -> the event type it counts.
RATES = {"duplicate_rate": "duplicate_observed", "rejection_rate": "rejected",
         "rate_limited_rate": "rate_limited", "dead_rate": "dead"}
#: measure -> the provider report it counts, per *accepted* send: a bounce or a
#: complaint can only follow an acceptance (``Store.outcome_counts`` reads the reports).
PER_ACCEPTED = {"bounce_rate": "bounced", "complaint_rate": "complained"}


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    """Limits for one channel or campaign; None switches a measure off."""

    duplicate_rate: float | None = None
    rejection_rate: float | None = None
    rate_limited_rate: float | None = None
    dead_rate: float | None = None
    bounce_rate: float | None = None
    """Hard bounces reported per accepted send."""
    complaint_rate: float | None = None
    """Complaints reported per accepted send."""
    oldest_message_age_s: float | None = None
    """Channels only: the age of the oldest message on the channel's queue."""


@dataclass(frozen=True, kw_only=True)
class GuardrailConfig:
    window_s: float
    min_sends: int
    channels: Mapping[str, Thresholds]
    campaigns: Mapping[str, Thresholds]

    def active(self) -> bool:
        return any(value is not None
                   for limits in (*self.channels.values(), *self.campaigns.values())
                   for value in limits.__dict__.values())


@dataclass(frozen=True, kw_only=True)
class Reading:
    """One measure of one scope over the window."""

    scope: str  # "channel" | "campaign"
    name: str
    measure: str
    value: float
    threshold: float | None
    events: int
    sends: int

    @property
    def tripped(self) -> bool:
        return self.threshold is not None and self.value > self.threshold

    def reason(self, window_s: float) -> str:
        if self.measure == "oldest_message_age_s":
            return (f"{REASON_PREFIX}oldest message {self.value:.0f}s old > "
                    f"{self.threshold:g}s")
        of = "accepted sends" if self.measure in PER_ACCEPTED else "sends"
        return (f"{REASON_PREFIX}{self.measure} {self.value:.3f} > {self.threshold:g} over "
                f"{window_s:g}s ({self.events} of {self.sends} {of})")


def _bucket(at: float, width: float) -> int:
    return math.floor(at / width)


def readings(counts: Sequence[OutcomeCount], ages: Mapping[str, float],
             config: GuardrailConfig, switches: Sequence[Switch], now: float) -> list[Reading]:
    """Every measure of every scope with a threshold (pure; see the module docstring)."""
    width = config.window_s / BUCKETS
    changed = {(s.scope, s.name): s.changed_at for s in switches}
    # (scope, name) -> event type -> count, from buckets after the scope's switch changed
    totals: dict[tuple[str, str], dict[str, int]] = {}
    for row in counts:
        for scope, name in (("channel", row.channel), ("campaign", row.campaign)):
            if name is None:
                continue
            since = changed.get((scope, name))
            # A bucket counts only if it starts at or after the switch's last change.
            if since is not None and row.bucket * width < since:
                continue
            by_type = totals.setdefault((scope, name), {})
            by_type[row.type] = by_type.get(row.type, 0) + row.count
    found: list[Reading] = []
    for scope, limits in (("channel", config.channels), ("campaign", config.campaigns)):
        for name, thresholds in sorted(limits.items()):
            by_type = totals.get((scope, name), {})
            sends = sum(by_type.get(t, 0) for t in SENDS)
            accepted = by_type.get("accepted", 0)
            for measure, (event, base) in {
                    **{m: (e, sends) for m, e in RATES.items()},
                    **{m: (e, accepted) for m, e in PER_ACCEPTED.items()}}.items():
                threshold = getattr(thresholds, measure)
                if threshold is None:
                    continue
                hits = by_type.get(event, 0)
                # A report may come in for a send accepted before the window: capped at 1.
                value = min(1.0, hits / base) if base else 0.0
                if base < config.min_sends:
                    value = 0.0  # too few sends to judge
                found.append(Reading(scope=scope, name=name, measure=measure, value=value,
                                     threshold=threshold, events=hits, sends=base))
            if scope == "channel" and thresholds.oldest_message_age_s is not None:
                found.append(Reading(scope=scope, name=name, measure="oldest_message_age_s",
                                     value=ages.get(name, 0.0),
                                     threshold=thresholds.oldest_message_age_s,
                                     events=0, sends=sends))
    return found


def tripped_by_guardrail(switch: Switch | None) -> bool:
    return switch is not None and switch.paused and (switch.reason or "").startswith(
        REASON_PREFIX)


class GuardrailStore(Readings, Occurrences, Ledger, Protocol):
    """What the guardrails reach: outcome counts, the switches they trip, and the ledger
    for the audit event of a trip."""


async def measure(store: GuardrailStore, transport: Transport, config: GuardrailConfig, *,
                  now: float) -> tuple[list[Reading], list[Switch]]:
    """Read the store and the queues once; every reading, and the switches as read."""
    width = config.window_s / BUCKETS
    since = (_bucket(now, width) - BUCKETS + 1) * width
    counts = await store.outcome_counts(since=since, bucket_s=width)
    ages = {name: (await transport.depth(name, now=now)).oldest_age_s
            for name, t in config.channels.items() if t.oldest_message_age_s is not None}
    switches = await store.switch_all()
    return readings(counts, ages, config, switches, now), switches


async def enforce(store: GuardrailStore, transport: Transport, config: GuardrailConfig, *,
                  now: float, worker: str = "guardrails") -> list[Reading]:
    """Pause admission of every scope whose reading crossed its threshold; return the
    crossings this call paused (not those already paused)."""
    if not config.active():
        return []
    found, switches = await measure(store, transport, config, now=now)
    paused = {(s.scope, s.name) for s in switches if s.paused}
    tripped: list[Reading] = []
    for reading in found:
        if not reading.tripped or (reading.scope, reading.name) in paused:
            continue
        reason = reading.reason(config.window_s)
        if await store.switch_trip(scope=reading.scope, name=reading.name, now=now,
                                   reason=reason) is None:
            continue  # another process paused it first (or an operator did)
        paused.add((reading.scope, reading.name))
        tripped.append(reading)
        await store.event_append_many([Event(
            key=f"admission/{reading.scope}/{reading.name}",
            channel=reading.name if reading.scope == "channel" else "-",
            type="guardrail_tripped", at=now, state="paused", worker=worker, detail=reason)])
        log.warning("guardrail tripped: admission paused", extra={
            "scope": reading.scope, "target": reading.name, "measure": reading.measure,
            "value": round(reading.value, 4), "threshold": reading.threshold,
            "reason": reason, "worker": worker})
    return tripped
