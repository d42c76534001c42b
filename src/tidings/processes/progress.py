"""What a long-running process says about itself at ``info``: a start-up summary (store,
channels and their quotas, campaigns and their next occurrence, the simulated time when
one is set), then a progress line every ``PROGRESS_EVERY_S`` while it works and one when
it has caught up. The lines are built here as plain data; ``tidings.core.logs`` writes them.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any

from tidings.admission.campaign import Campaign
from tidings.config.settings import ChannelProvider, ChannelSettings, ProviderSettings
from tidings.core.logs import log_time, scrub_text
from tidings.delivery.failover import Failover
from tidings.delivery.worker import WorkerStats
from tidings.runtime import Runtime

log = logging.getLogger("tidings.service")

PROGRESS_EVERY_S = 10.0
"""Seconds between two progress lines of a process that is working."""


def _provider(spec: ChannelSettings) -> str:
    if spec.provider is None:
        return "the application's own"  # an object handed to build_runtime
    return ", then ".join(_one(p) for p in [spec.provider, *spec.fallbacks])


def _one(provider: ChannelProvider) -> str:
    if isinstance(provider, ProviderSettings):
        return provider.kind if provider.url is None else f"{provider.kind} {provider.url}"
    where = getattr(provider, "url", None) or getattr(provider, "host", None)
    return provider.kind if where is None else f"{provider.kind} {where}"


def channel_summary(name: str, spec: ChannelSettings) -> dict[str, Any]:
    return {"channel": name, "provider": _provider(spec), "quota": spec.quota or "none",
            "max_in_flight": spec.max_in_flight, "kind": spec.kind}


def campaign_summary(campaign: Campaign, now: float) -> dict[str, Any]:
    """A campaign and when it is next due; ``due_now`` names an occurrence still inside
    its grace period, which the scheduler admits at once unless it already has."""
    latest = campaign.schedule.latest(now)
    upcoming = campaign.schedule.next_after(now)
    due = (latest.logical_date if latest is not None
           and now - latest.logical_at <= campaign.grace_s else None)
    return {"campaign": campaign.name, "cron": campaign.schedule.cron,
            "timezone": campaign.schedule.timezone, "channels": ",".join(campaign.channels),
            "due_now": due, "next_occurrence": upcoming.logical_date,
            "next_at": log_time(upcoming.logical_at), "next_in_s": round(upcoming.logical_at - now)}


def startup(runtime: Runtime, role: str, **fields: Any) -> list[tuple[str, dict[str, Any]]]:
    """The start-up summary as (event, fields) lines: the process, each channel, each
    campaign (the scheduler's concern, so only where ``role`` is the scheduler)."""
    now = runtime.clock.now()
    settings = runtime.settings
    head: dict[str, Any] = {"role": role, **fields, "store": scrub_text(settings.store),
                            "transport": scrub_text(settings.transport),
                            "channels": ",".join(runtime.channels) or "none",
                            "campaigns": ",".join(c.name for c in runtime.campaigns) or "none"}
    if settings.clock_offset_s:
        head |= {"simulated_now": log_time(now), "clock_offset_s": settings.clock_offset_s}
    lines = [("starting", head)]
    shown = [fields["channel"]] if "channel" in fields else runtime.channels
    lines += [("channel", channel_summary(name, settings.channels[name]))
              for name in shown if name in settings.channels]
    if role == "scheduler":
        lines += [("campaign", campaign_summary(c, now)) for c in runtime.campaigns]
    return lines


def log_lines(lines: list[tuple[str, dict[str, Any]]]) -> None:
    for event, fields in lines:
        log.info(event, extra=fields)


@dataclass
class Tally:
    """Counts since the last progress line, from a running total (a worker's stats or
    the scheduler's passes): ``line`` gives what changed, or None when nothing did."""

    last: dict[str, int] = field(default_factory=dict)
    working: bool = False

    def line(self, totals: dict[str, int]) -> dict[str, int] | None:
        changed = {k: v - self.last.get(k, 0) for k, v in totals.items()
                   if v != self.last.get(k, 0)}
        self.last = dict(totals)
        return changed or None

    def step(self, totals: dict[str, int]) -> tuple[str, dict[str, int]] | None:
        """("progress", counts since the last line) while working; ("idle", totals) once
        when work stops; None while idle."""
        changed = self.line(totals)
        if changed is not None:
            self.working = True
            return "progress", changed
        if self.working:
            self.working = False
            return "idle", {k: v for k, v in totals.items() if v}
        return None


_WORKER_COUNTS = ("received", "accepted", "rate_limited", "transient", "rejected", "dead",
                  "uncertain", "duplicates", "skipped", "released", "lease_lost")


def worker_totals(stats: WorkerStats, provider: object = None) -> dict[str, int]:
    """A worker's running totals; with fallbacks (``tidings.delivery.failover``), also
    the sends each provider answered for (``via_<provider>``), those refused by one and
    moved on (``refused_by_<provider>``), and those carried past the first (``moved``)."""
    counts = asdict(stats)
    totals = {k: int(counts[k]) for k in _WORKER_COUNTS}
    failover = getattr(provider, "failover", None)
    if isinstance(failover, Failover):
        totals["moved"] = failover.moved
        for route in failover.routes:
            totals[f"via_{route.name}"] = route.carried
            totals[f"refused_by_{route.name}"] = route.refused
    return totals
