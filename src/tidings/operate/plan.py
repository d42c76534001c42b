"""The drain-time plan: will each channel's (and campaign's) backlog drain before it
goes stale? Drain time is defined in ``tidings.operate.operations``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tidings.core.pacing import PaceLimits
from tidings.operate.readmodel import Plan, PlanLine, UncertainSends
from tidings.operate.snapshot import Snapshot, Totals, configured_rate


def plan_line(*, channel: str, campaign: str | None, backlog: int, channel_backlog: int,
              accepted_recent: int, window_s: float, limits: PaceLimits | None,
              earliest_expiry: float | None, freshness_deadline_s: float | None,
              now: float) -> PlanLine:
    """Will this backlog drain before it goes stale?

    A campaign shares its channel: its drain time counts the whole channel backlog
    (work queued for the channel is served roughly by due time, not by campaign).
    Verdicts: ``clear`` (nothing due), ``ok``, ``at_risk`` (some will expire first),
    ``stalled`` (no rate at all: nothing sent lately and no configured pace),
    ``no_deadline`` (drains, but nothing in it expires).
    """
    observed = accepted_recent / window_s
    configured = configured_rate(limits)
    if observed > 0:
        rate: float | None = observed
        source = "observed"
    elif configured is not None:
        rate, source = configured, "configured"
    else:
        rate, source = None, "none"
    deadline = None if earliest_expiry is None else earliest_expiry - now
    if backlog == 0:
        return PlanLine(channel=channel, campaign=campaign, backlog=0,
                        channel_backlog=channel_backlog, observed_rate_per_s=observed,
                        configured_rate_per_s=configured, rate_per_s=rate, rate_source=source,
                        drain_s=0.0, deadline_in_s=deadline,
                        freshness_deadline_s=freshness_deadline_s, expected_late=0,
                        verdict="clear")
    drain = None if rate is None else channel_backlog / rate
    if drain is None:
        verdict, late = "stalled", backlog if deadline is not None else 0
    elif deadline is None:
        verdict, late = "no_deadline", 0
    elif drain <= deadline:
        verdict, late = "ok", 0
    else:
        assert rate is not None
        # Served in order, the part of the channel backlog that fits before the earliest
        # deadline goes out in time; this campaign's share of the rest is at risk.
        fits = max(0.0, deadline) * rate
        share = backlog / channel_backlog if channel_backlog else 1.0
        late = min(backlog, math.ceil(max(0.0, channel_backlog - fits) * share))
        verdict = "at_risk"
    return PlanLine(channel=channel, campaign=campaign, backlog=backlog,
                    channel_backlog=channel_backlog, observed_rate_per_s=round(observed, 4),
                    configured_rate_per_s=configured, rate_per_s=rate, rate_source=source,
                    drain_s=None if drain is None else round(drain, 3),
                    deadline_in_s=None if deadline is None else round(deadline, 3),
                    freshness_deadline_s=freshness_deadline_s, expected_late=late,
                    verdict=verdict)


def plan(snap: Snapshot, *, limits: Mapping[str, PaceLimits],
         freshness: Mapping[str, float | None]) -> list[PlanLine]:
    """One line per channel (all of its intents), then one per (campaign, channel) with
    work. ``freshness`` maps a campaign to its ``expires_after_s``."""
    per_channel: dict[str, Totals] = {}
    for s in snap.summaries:
        per_channel.setdefault(s.channel, Totals()).add(s)
    lines: list[PlanLine] = []
    for channel in sorted(set(limits) | set(per_channel)):
        t = per_channel.get(channel, Totals())
        lines.append(plan_line(
            channel=channel, campaign=None, backlog=t.backlog, channel_backlog=t.backlog,
            accepted_recent=t.accepted_recent, window_s=snap.window_s,
            limits=limits.get(channel), earliest_expiry=t.earliest_expiry,
            freshness_deadline_s=_strictest(freshness.values()), now=snap.now))
    for s in snap.summaries:
        if s.campaign is None or (s.backlog == 0 and s.scheduled == 0):
            continue
        t = per_channel[s.channel]
        lines.append(plan_line(
            channel=s.channel, campaign=s.campaign, backlog=s.backlog,
            channel_backlog=t.backlog, accepted_recent=t.accepted_recent,
            window_s=snap.window_s, limits=limits.get(s.channel),
            earliest_expiry=s.earliest_expiry, freshness_deadline_s=freshness.get(s.campaign),
            now=snap.now))
    return lines


def plan_report(snap: Snapshot, *, limits: Mapping[str, PaceLimits],
                freshness: Mapping[str, float | None],
                uncertain: Mapping[str, UncertainSends]) -> Plan:
    """``tidings plan`` and ``GET /v1/plan``: ``plan``'s lines with the snapshot's time
    and rate window, and each channel's uncertain sends (``uncertain_counts``)."""
    return Plan(now=snap.now, window_s=snap.window_s,
                lines=tuple(plan(snap, limits=limits, freshness=freshness)),
                uncertain=uncertain)


def _strictest(values: Any) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None
