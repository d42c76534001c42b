"""Status per channel and per campaign (with its channels), and the ledger's age span,
from one ``Snapshot``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tidings.core.lanes import lane_name
from tidings.core.logs import log_time
from tidings.core.pacing import PaceLimits
from tidings.operate.guardrails import tripped_by_guardrail
from tidings.operate.plan import plan
from tidings.operate.readmodel import (
    CampaignChannelStatus,
    CampaignStatus,
    ChannelStatus,
    Counts,
    DigestStatus,
    GroupStatus,
    GuardrailTrip,
    LaneStatus,
    LedgerStatus,
    OccurrenceStatus,
    PlanLine,
    ProviderState,
    QueueStatus,
    Status,
    UncertainSends,
)
from tidings.operate.snapshot import Snapshot, Totals, age, sli
from tidings.recovery.retention import RetentionConfig, next_prune_at
from tidings.stores.base import IntentSummary, Occurrence, Switch


def _counts(t: IntentSummary | Totals, now: float, window_s: float) -> Counts:
    return Counts(
        total=t.total, backlog=t.backlog, scheduled=t.scheduled,
        oldest_age_s=round(age(now, t.oldest_due_at), 3), in_flight=t.claimed,
        retryable=t.retryable, uncertain=t.uncertain, accepted=t.accepted,
        accepted_in_time=t.accepted_in_time, expired=t.expired, dead=t.dead,
        rejected=t.rejected, cancelled=t.cancelled, overdue=t.overdue,
        suppressed=t.suppressed, throttled=t.throttled,
        send_rate_per_s=round(t.accepted_recent / window_s, 4),
        sli=sli(t),
    )


def _paused(switches: Sequence[Switch], scope: str) -> dict[str, Switch]:
    return {s.name: s for s in switches if s.scope == scope and s.paused}


def status(snap: Snapshot, *, campaigns: Mapping[str, Sequence[str]],
           channels: Sequence[str], limits: Mapping[str, PaceLimits] | None = None,
           freshness: Mapping[str, float | None] | None = None,
           uncertain: Mapping[str, UncertainSends] | None = None,
           retention: RetentionConfig | None = None,
           lanes: Mapping[str, Sequence[str]] | None = None) -> Status:
    """Status per channel and per campaign (with its channels).

    ``campaigns`` maps each declared campaign to its channels; ``channels`` lists the
    declared channels. Intents of campaigns no longer declared still show. With
    ``limits`` (and ``freshness``, see ``plan``) each channel, and each campaign's
    channel, carries its ``drain``: drain time against the freshness deadline. With
    ``uncertain`` (``uncertain_counts``) each channel carries its uncertain-send policy
    and how many intents are uncertain, held and awaiting an operator. ``lanes``: each
    channel's lane names, which name the lanes of its queue (else ``lane <n>``).
    """
    now, window = snap.now, snap.window_s
    drains: dict[tuple[str | None, str], PlanLine] = {}
    if limits is not None:
        for line in plan(snap, limits=limits, freshness=freshness or {}):
            drains[(line.campaign, line.channel)] = line
    paused_channels = _paused(snap.switches, "channel")
    paused_campaigns = _paused(snap.switches, "campaign")
    per_channel: dict[str, Totals] = {}
    per_campaign: dict[str, dict[str, IntentSummary]] = {}
    one_off: dict[str, IntentSummary] = {}
    for s in snap.summaries:
        per_channel.setdefault(s.channel, Totals()).add(s)
        if s.campaign is None:
            one_off[s.channel] = s
        else:
            per_campaign.setdefault(s.campaign, {})[s.channel] = s
    channel_rows: dict[str, ChannelStatus] = {}
    for channel in sorted(set(channels) | set(per_channel) | set(snap.queues)):
        events = snap.events.get(channel, {})
        depth = snap.queues.get(channel)
        channel_rows[channel] = ChannelStatus(
            counts=_counts(per_channel.get(channel, Totals()), now, window),
            paused=channel in paused_channels,
            paused_reason=_reason(paused_channels.get(channel)),
            queue=None if depth is None else QueueStatus(
                ready=depth.ready, delayed=depth.delayed, in_flight=depth.in_flight,
                dead_letters=depth.dead, oldest_age_s=round(depth.oldest_age_s, 3),
                lanes=[LaneStatus(name=lane_name((lanes or {}).get(channel, ()), d.lane),
                                  ready=d.ready, total=d.total,
                                  oldest_age_s=round(d.oldest_age_s, 3))
                       for d in depth.lanes],
                groups=[GroupStatus(lane=lane_name((lanes or {}).get(channel, ()), g.lane),
                                    group=g.group, ready=g.ready, total=g.total)
                        for g in depth.groups]),
            attempts=events.get("claimed", 0),
            rate_limited=events.get("rate_limited", 0),
            retries=events.get("transient_failure", 0),
            duplicates_suppressed=events.get("duplicate_observed", 0),
            dead_letters=0 if depth is None else depth.dead,
            drain=drains.get((None, channel)),
            uncertain_sends=None if uncertain is None else uncertain.get(channel),
            providers=[ProviderState(name=name, out=bool(said.get("out")),
                                     since=log_time(float(said.get("at") or 0.0)),
                                     worker=str(said.get("worker") or ""),
                                     reason=str(said.get("reason") or ""))
                       for name, said in sorted(snap.providers.get(channel, {}).items())])
    latest: dict[str, Occurrence] = {}
    for one in snap.occurrences:
        if one.campaign not in latest or one.logical_at > latest[one.campaign].logical_at:
            latest[one.campaign] = one
    campaign_rows: dict[str, CampaignStatus] = {}
    for name in sorted(set(campaigns) | set(per_campaign)):
        by_channel = per_campaign.get(name, {})
        total = Totals()
        for s in by_channel.values():
            total.add(s)
        occ = latest.get(name)
        campaign_rows[name] = CampaignStatus(
            counts=_counts(total, now, window),
            declared=name in campaigns,
            paused=name in paused_campaigns,
            paused_reason=_reason(paused_campaigns.get(name)),
            latest_occurrence=None if occ is None else OccurrenceStatus(
                logical_date=occ.logical_date, kind=occ.kind, status=occ.status,
                members=occ.members, admitted=occ.admitted, skipped=occ.skipped,
                reason=occ.reason),
            channels={ch: CampaignChannelStatus(
                counts=_counts(by_channel.get(ch, Totals()), now, window),
                drain=drains.get((name, ch)))
                for ch in sorted(set(campaigns.get(name, ())) | set(by_channel))},
        )
    return Status(
        now=now, window_s=window,
        channels=channel_rows,
        campaigns=campaign_rows,
        one_off={ch: _counts(s, now, window) for ch, s in sorted(one_off.items())},
        guardrails_tripped=tuple(
            GuardrailTrip(scope=s.scope, name=s.name, since=s.changed_at, reason=s.reason)
            for s in snap.switches if tripped_by_guardrail(s)),
        holds=snap.holds,
        ledger=ledger(snap, retention),
        digests=DigestStatus(
            windows=snap.digests.windows, items=snap.digests.items,
            oldest_age_s=(None if snap.digests.oldest_opened_at is None
                          else round(age(now, snap.digests.oldest_opened_at), 3))),
    )


def ledger(snap: Snapshot, retention: RetentionConfig | None) -> LedgerStatus:
    """The ledger's age span (oldest and newest intent) and its next prune."""
    oldest, newest = snap.age_span or (None, None)
    kept = None if retention is None else retention.intents_s
    return LedgerStatus(
        oldest_intent_at=oldest, newest_intent_at=newest,
        age_s=None if oldest is None else round(snap.now - oldest, 3),
        retention_days=None if kept is None else kept / 86400,
        next_prune_at=(next_prune_at(snap.now, retention.every_s)
                       if retention is not None and retention.enabled else None),
    )


def _reason(switch: Switch | None) -> str | None:
    return None if switch is None else switch.reason
