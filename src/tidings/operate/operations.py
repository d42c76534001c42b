"""What an operator asks, computed once for the API, the CLI and ``/metrics``.

``snapshot`` reads the ports (one scan of the ledger, the queue depths, event counts,
switches); everything else about it is pure: status per campaign and channel, the SLI,
send rates and the drain-time plan. Timelines, dead letters and their redrive, uncertain
sends, the capacity forecast and admission switches are the operator actions that need
the ports. Each job has a module of its own (``snapshot``, ``status``, ``plan``,
``timeline``, ``dead_letters``, ``uncertain_sends``); this one is where the API, the CLI
and the dashboard call them all, so they share one implementation. What status, plan
and timelines answer are the frozen types of ``tidings.operate.readmodel``, which is
also where they become JSON.

Definitions (documented once, used everywhere):

- **backlog**: intents not yet settled (selected, enqueued, claimed, retryable,
  uncertain) and already due; **scheduled**: the same, due later.
- **send rate**: intents accepted during the last ``window_s`` seconds, per second.
- **SLI**: accepted before expiry ÷ eligible, where eligible = accepted (in time or
  late) + expired + dead + still unsettled past expiry. Cancelled intents (an operator's
  or caller's choice), permanent rejections (an invalid address) and suppressed ones
  (an address on the suppression list, never sent to) are not eligible;
  unsettled intents still within their deadline are not decided yet. None when nothing
  is eligible.
- **drain time**: backlog ÷ sustained rate. The sustained rate is the observed send
  rate when there is one, else the channel's configured pace (quota × safety, or
  1 / min interval); the plan says which it used.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidings.admission.audience import count_recipients
from tidings.admission.campaign import Campaign
from tidings.core.errors import InvalidInput
from tidings.core.keys import check_line
from tidings.core.pacing import PaceLimits
from tidings.operate import capacity
from tidings.operate.dead_letters import RedriveResult, dead_letters, redrive
from tidings.operate.guardrails import SENDS
from tidings.operate.plan import plan, plan_line, plan_report
from tidings.operate.readmodel import PlanLine
from tidings.operate.snapshot import Snapshot, Totals, configured_rate, sli, snapshot
from tidings.operate.status import ledger, status
from tidings.operate.timeline import SURROGATE, answers, intent_view, timeline
from tidings.operate.uncertain_sends import (
    ResolveResult,
    uncertain_counts,
    uncertain_list,
    uncertain_resolve,
    uncertain_view,
)
from tidings.stores.base import Store, Switch

__all__ = [
    "LATENCY_BUCKETS", "SURROGATE", "PlanLine", "RedriveResult", "ResolveResult", "Snapshot",
    "Totals", "answers", "campaign_forecast", "configured_rate", "dead_letters", "intent_view",
    "ledger", "plan", "plan_line", "plan_report", "redrive", "sli", "snapshot", "status",
    "switch_admission", "timeline", "uncertain_counts", "uncertain_list", "uncertain_resolve",
    "uncertain_view",
]

#: Upper bounds (seconds) of the end-to-end latency histogram.
LATENCY_BUCKETS: tuple[float, ...] = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)


# ---------------------------------------------------------------- capacity forecast


async def campaign_forecast(
    store: Store, campaign: Campaign, *, limits: Mapping[str, PaceLimits], now: float,
    window_s: float, workers: int, observed_workers: int | None = None,
    per_worker_per_s: float | None = None, recipients: int | None = None,
    admission_per_s: float | None = None, startup_s: float = 0.0,
) -> list[capacity.ChannelForecast]:
    """Forecast a campaign's drain per channel before it is enabled (``tidings.operate.capacity``).

    ``recipients`` defaults to the audience's count. The per-worker rate is the channel's
    sends in the last ``window_s`` (``Store.outcome_counts``, 1-second buckets) over
    ``observed_workers`` (default ``workers``: the fleet observed is the fleet
    planned), or ``per_worker_per_s`` when the channel sent nothing lately."""
    size = recipients if recipients is not None else await count_recipients(campaign.audience)
    seen = observed_workers or workers
    counts = await store.outcome_counts(since=now - window_s, bucket_s=1.0)
    out: list[capacity.ChannelForecast] = []
    for channel in campaign.channels:
        buckets = capacity.buckets_of((c.bucket, c.count) for c in counts
                                      if c.channel == channel and c.type in SENDS)
        observed = capacity.observed_rate(buckets, bucket_s=1.0)
        if observed is not None:
            per_worker, source = observed / seen, "observed"
        elif per_worker_per_s is not None:
            per_worker, source = per_worker_per_s, "given"
        else:
            raise InvalidInput("rate_per_worker", f"channel {channel!r} sent nothing in the "
                               f"last {window_s:.0f} s: give a per-worker send rate")
        out.append(capacity.ChannelForecast(
            campaign=campaign.name, channel=channel, rate_source=source,
            observed_rate_per_s=observed, observed_workers=seen, window_s=window_s,
            forecast=capacity.forecast(
                recipients=size, workers=workers, per_worker_per_s=per_worker,
                pace_per_s=configured_rate(limits.get(channel)),
                admission_per_s=admission_per_s, freshness_s=campaign.expires_after_s,
                startup_s=startup_s)))
    return out


# ---------------------------------------------------------------- admission switches


async def switch_admission(store: Store, *, scope: str, name: str, paused: bool, now: float,
                           reason: str | None = None) -> tuple[Switch, Switch | None]:
    """Pause or resume admission of a scope; returns the switch after, and before.

    A pause of what is paused already changes nothing: the first reason (a guardrail's
    trip above all) is what a resume must show, so a second pause does not overwrite it.
    """
    if reason is not None:
        check_line(reason, "reason")
    before = next((s for s in await store.switch_all() if (s.scope, s.name) == (scope, name)),
                  None)
    if paused and before is not None and before.paused:
        return before, before
    after = await store.switch_set(scope=scope, name=name, paused=paused, now=now,
                                   reason=reason)
    return after, before
