"""What an operator asks, computed once for the API, the CLI and ``/metrics``.

``snapshot`` reads the ports (one scan of the ledger, the queue depths, event counts,
switches); everything else here is pure: status per campaign and channel, the SLI,
send rates and the drain-time plan. Timelines, dead letters and their redrive are the
operator actions that need the ports; they live here too so the API and the CLI share
one implementation. What status, plan and timelines answer are the frozen types of
``tidings.readmodel``, which is also where they become JSON.

Definitions (documented once, used everywhere):

- **backlog**: intents not yet settled (selected, enqueued, claimed, retryable,
  uncertain) and already due; **scheduled**: the same, due later.
- **send rate**: intents accepted during the last ``window_s`` seconds, per second.
- **SLI**: accepted before expiry ÷ eligible, where eligible = accepted (in time or
  late) + expired + dead + still unsettled past expiry. Cancelled intents (an operator's
  or caller's choice) and permanent rejections (an invalid address) are not eligible;
  unsettled intents still within their deadline are not decided yet. None when nothing
  is eligible.
- **drain time**: backlog ÷ sustained rate. The sustained rate is the observed send
  rate when there is one, else the channel's configured pace (quota × safety, or
  1 / min interval); the plan says which it used.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidings import capacity, holds, readmodel
from tidings.audience import count_recipients
from tidings.campaign import Campaign
from tidings.errors import InvalidInput
from tidings.guardrails import SENDS, tripped_by_guardrail
from tidings.keys import check_line, check_text, validate_key
from tidings.model import DeadLetter, Intent, Message, QueueDepth
from tidings.pacing.algorithm import PaceLimits
from tidings.readmodel import (
    Answers,
    CampaignChannelStatus,
    CampaignStatus,
    ChannelStatus,
    Counts,
    DeadLetterRow,
    Delivery,
    GuardrailTrip,
    HoldsReport,
    IntentView,
    LedgerStatus,
    OccurrenceStatus,
    Plan,
    PlanLine,
    QueueStatus,
    Status,
    UncertainRow,
    UncertainSends,
)
from tidings.relay import publish
from tidings.retention import RetentionConfig, next_prune_at
from tidings.states import UNSETTLED, State
from tidings.stores.base import Change, IntentSummary, Occurrence, Store, Switch
from tidings.surrogate import surrogate
from tidings.transports.base import Transport
from tidings.uncertain import (
    OperatorDecision,
    Policy,
    UncertainPolicy,
    awaiting_operator,
    on_operator,
)

#: ``r_`` + 16 hex digits: what ``tidings.surrogate.surrogate`` hands out.
SURROGATE = re.compile(r"^r_[0-9a-f]{16}$")
#: Upper bounds (seconds) of the end-to-end latency histogram.
LATENCY_BUCKETS: tuple[float, ...] = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)


# ---------------------------------------------------------------- snapshot (I/O)


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
    """``tidings.holds.report``: the holds in place, and intents expired while held."""


async def snapshot(store: Store, transport: Transport, *, channels: Sequence[str], now: float,
                   window_s: float, occurrences: bool = True) -> Snapshot:
    """Read the store and the queues once."""
    summaries = await store.intent_summary(now=now, since=now - window_s)
    known = sorted(set(channels) | {s.channel for s in summaries})
    queues = {channel: await transport.depth(channel, now=now) for channel in known}
    events = await store.event_counts()
    return Snapshot(
        now=now, window_s=window_s, summaries=tuple(summaries), queues=queues,
        events=events, switches=tuple(await store.switch_all()),
        occurrences=tuple(await store.occurrence_list()) if occurrences else (),
        age_span=await store.intent_age_span(), holds=await holds.report(store, events))


# ---------------------------------------------------------------- pure computations


def sli(summary: IntentSummary | Totals) -> float | None:
    """Share of eligible intents accepted before expiry (see the module docstring)."""
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
    oldest_due_at: float | None = None
    earliest_expiry: float | None = None

    def add(self, s: IntentSummary | Totals) -> None:
        for name in ("total", "backlog", "scheduled", "claimed", "retryable", "uncertain",
                     "accepted", "accepted_in_time", "accepted_recent", "expired", "dead",
                     "rejected", "cancelled", "overdue"):
            setattr(self, name, getattr(self, name) + getattr(s, name))
        self.oldest_due_at = _min(self.oldest_due_at, s.oldest_due_at)
        self.earliest_expiry = _min(self.earliest_expiry, s.earliest_expiry)


def _min(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def _age(now: float, at: float | None) -> float:
    return 0.0 if at is None else max(0.0, now - at)


def _counts(t: IntentSummary | Totals, now: float, window_s: float) -> Counts:
    return Counts(
        total=t.total, backlog=t.backlog, scheduled=t.scheduled,
        oldest_age_s=round(_age(now, t.oldest_due_at), 3), in_flight=t.claimed,
        retryable=t.retryable, uncertain=t.uncertain, accepted=t.accepted,
        accepted_in_time=t.accepted_in_time, expired=t.expired, dead=t.dead,
        rejected=t.rejected, cancelled=t.cancelled, overdue=t.overdue,
        send_rate_per_s=round(t.accepted_recent / window_s, 4),
        sli=sli(t),
    )


def _paused(switches: Sequence[Switch], scope: str) -> dict[str, Switch]:
    return {s.name: s for s in switches if s.scope == scope and s.paused}


def status(snap: Snapshot, *, campaigns: Mapping[str, Sequence[str]],
           channels: Sequence[str], limits: Mapping[str, PaceLimits] | None = None,
           freshness: Mapping[str, float | None] | None = None,
           uncertain: Mapping[str, UncertainSends] | None = None,
           retention: RetentionConfig | None = None) -> Status:
    """Status per channel and per campaign (with its channels).

    ``campaigns`` maps each declared campaign to its channels; ``channels`` lists the
    declared channels. Intents of campaigns no longer declared still show. With
    ``limits`` (and ``freshness``, see ``plan``) each channel, and each campaign's
    channel, carries its ``drain``: drain time against the freshness deadline. With
    ``uncertain`` (``uncertain_counts``) each channel carries its uncertain-send policy
    and how many intents are uncertain, held and awaiting an operator.
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
                dead_letters=depth.dead, oldest_age_s=round(depth.oldest_age_s, 3)),
            attempts=events.get("claimed", 0),
            rate_limited=events.get("rate_limited", 0),
            retries=events.get("transient_failure", 0),
            duplicates_suppressed=events.get("duplicate_observed", 0),
            dead_letters=0 if depth is None else depth.dead,
            drain=drains.get((None, channel)),
            uncertain_sends=None if uncertain is None else uncertain.get(channel))
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


# ---------------------------------------------------------------- timelines


def answers(intent: Intent) -> Answers:
    """The three questions about one delivery, and where it stands."""
    return Answers(
        selected=intent.selected_at is not None, selected_at=intent.selected_at,
        enqueued=intent.enqueued_at is not None, enqueued_at=intent.enqueued_at,
        accepted=intent.accepted_at is not None, accepted_at=intent.accepted_at,
        state=intent.state, disposition=intent.disposition,
        reason=intent.reason, attempts=intent.attempts,
    )


def intent_view(intent: Intent) -> IntentView:
    """An intent for an operator: never the raw address; the recipient's surrogate."""
    return readmodel.intent_view(intent, surrogate(intent.recipient_id))


async def timeline(store: Store, *, key: str | None = None, recipient: str | None = None,
                   channels: Sequence[str] = (), limit: int = 50) -> list[Delivery]:
    """Deliveries with their answers and events, by key or by recipient.

    ``key`` is a full intent key, or a ``notify`` key (every channel of it). ``recipient``
    is a recipient id, or a surrogate (``r_`` + 16 hex, as in the logs): surrogates are
    found through the send outcomes that carry them, so an intent never sent yet is
    found by recipient id only.
    """
    if (key is None) == (recipient is None):
        raise InvalidInput("key", "give exactly one of key or recipient")
    intents: list[Intent] = []
    if key is not None:
        # What no key holds is no key's timeline (and PostgreSQL refuses a NUL outright).
        validate_key(key)
        found = await store.intent_get(key)
        if found is not None:
            intents.append(found)
        else:
            for channel in sorted(channels):
                one = await store.intent_get(f"{key}:{channel}")
                if one is not None:
                    intents.append(one)
    else:
        assert recipient is not None
        check_text(recipient, "recipient")
        if SURROGATE.match(recipient):
            for k in await store.event_keys_by_detail(recipient, limit=limit):
                one = await store.intent_get(k)
                if one is not None:
                    intents.append(one)
        else:
            intents = await store.intent_find_by_recipient(recipient, limit=limit)
    return [Delivery(key=i.key, answers=answers(i), intent=intent_view(i),
                     events=tuple(await store.events_for(i.key)))
            for i in intents]


# ---------------------------------------------------------------- dead letters


def _key_of(letter: DeadLetter) -> str | None:
    try:
        return Message.decode(letter.body).key
    except Exception:
        return None


async def dead_letters(store: Store, transport: Transport, channel: str, *,
                       limit: int = 100) -> list[DeadLetterRow]:
    """A channel's dead letters, oldest first, each with its intent's current state."""
    rows = []
    for letter in await transport.dead_letters(channel, limit=limit):
        key = _key_of(letter)
        intent = await store.intent_get(key) if key is not None else None
        rows.append(DeadLetterRow(
            id=letter.id, channel=channel, message_id=letter.message_id, key=key,
            reason=letter.reason, receive_count=letter.receive_count, dead_at=letter.dead_at,
            intent_state=None if intent is None else intent.state.value))
    return rows


@dataclass(frozen=True, kw_only=True)
class RedriveResult:
    """What a redrive did with each dead letter it looked at."""

    channel: str
    redriven: list[dict[str, Any]] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)


async def redrive(store: Store, transport: Transport, channel: str, *, now: float,
                  ids: Sequence[str] | None = None, limit: int = 100,
                  reason: str = "operator redrive") -> RedriveResult:
    """Put dead letters back on their queue (all of the oldest ``limit``, or ``ids``).

    A dead intent is reopened first (dead -> retryable, failures reset), then its
    message goes back: the worker claims it against the ledger before any send, so a
    message whose intent was accepted meanwhile is acked as a duplicate with no send.
    Letters that are not tidings messages, or whose intent does not exist, stay dead.
    """
    letters = await transport.dead_letters(channel, limit=limit if ids is None else 10_000)
    if ids is not None:
        wanted = set(ids)
        unknown = sorted(wanted - {letter.id for letter in letters})
        if unknown:
            raise InvalidInput("ids", f"no dead letter of channel {channel!r} has id "
                               f"{', '.join(unknown)}")
        letters = [letter for letter in letters if letter.id in wanted]
    result = RedriveResult(channel=channel)
    reopen: list[Change] = []
    chosen: list[tuple[DeadLetter, str, str]] = []
    for letter in letters:
        key = _key_of(letter)
        intent = await store.intent_get(key) if key is not None else None
        if key is None or intent is None:
            why = "not a tidings message" if key is None else "no intent has this key"
            result.kept.append({"id": letter.id, "key": key, "why": why})
            continue
        if intent.state is State.DEAD:
            reopen.append(Change(key=key, from_state=State.DEAD, to_state=State.RETRYABLE,
                                 event="redriven", reason=reason, next_attempt_at=now,
                                 reset_failures=True, message_id=letter.message_id))
        chosen.append((letter, key, intent.state.value))
    reopened = set(await store.intent_apply_many(reopen, now=now)) if reopen else set()
    moved = await transport.redrive(channel, [letter.id for letter, _, _ in chosen], now=now)
    if moved != len(chosen):
        # Another operator redrove some of them at the same moment: report what we chose.
        result.kept.append({"id": None, "key": None,
                            "why": f"{len(chosen) - moved} were redriven by someone else"})
    for letter, key, state in chosen:
        result.redriven.append({"id": letter.id, "key": key, "state_before": state,
                                "reopened": key in reopened})
    return result


# ---------------------------------------------------------------- uncertain sends


def uncertain_view(intent: Intent, policy: UncertainPolicy, now: float) -> UncertainRow:
    """An unsettled intent for an operator: where it stands and since when."""
    return UncertainRow(key=intent.key, channel=intent.channel, state=intent.state,
                        since=intent.updated_at, age_s=round(_age(now, intent.updated_at), 3),
                        attempts=intent.attempts, reason=intent.reason,
                        policy=policy.mode.value,
                        awaiting_operator=awaiting_operator(intent, policy, now),
                        recipient_surrogate=surrogate(intent.recipient_id))


def _policy(policies: Mapping[str, UncertainPolicy], channel: str) -> UncertainPolicy:
    return policies.get(channel) or UncertainPolicy(mode=Policy.HOLD)


async def uncertain_list(store: Store, policies: Mapping[str, UncertainPolicy], *, now: float,
                         channel: str | None = None, older_than_s: float | None = None,
                         limit: int = 100) -> list[UncertainRow]:
    """Uncertain and held intents (of ``channel``, unsettled for at least
    ``older_than_s``), oldest first."""
    found = await store.intent_find(
        states=sorted(UNSETTLED), channel=channel,
        updated_before=None if older_than_s is None else now - older_than_s, limit=limit)
    found.sort(key=lambda i: (i.updated_at, i.key))
    return [uncertain_view(i, _policy(policies, i.channel), now) for i in found]


async def uncertain_counts(store: Store, policies: Mapping[str, UncertainPolicy], *,
                           now: float, limit: int = 10_000) -> dict[str, UncertainSends]:
    """Per channel: its policy, and how many intents are uncertain, held, and held past
    ``hold_s`` (awaiting an operator; counted up to ``limit``)."""
    counts = await store.intent_counts()
    rows: dict[str, UncertainSends] = {}
    for channel in sorted(set(policies) | set(counts)):
        policy = _policy(policies, channel)
        by_state = counts.get(channel, {})
        held = by_state.get(State.HELD.value, 0)
        waiting = 0
        if held:
            old = await store.intent_find(states=[State.HELD], channel=channel,
                                          updated_before=now - policy.hold_s, limit=limit)
            waiting = sum(1 for i in old if awaiting_operator(i, policy, now))
        rows[channel] = UncertainSends(policy=policy,
                                       uncertain=by_state.get(State.UNCERTAIN.value, 0),
                                       held=held, awaiting_operator=waiting)
    return rows


@dataclass(frozen=True, kw_only=True)
class ResolveResult:
    """What an operator's decision did to each intent it named or selected."""

    decision: str
    by: str
    resolved: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)


async def uncertain_resolve(store: Store, transport: Transport, *,
                            decision: OperatorDecision | str, who: str, now: float,
                            keys: Sequence[str] | None = None, channel: str | None = None,
                            older_than_s: float | None = None, note: str | None = None,
                            limit: int = 1000) -> ResolveResult:
    """Settle uncertain or held intents by an operator's decision, named by ``keys`` or
    selected by ``channel`` / ``older_than_s`` (not both ways at once).

    ``accepted`` records them accepted (no send); ``resend`` makes them retryable and
    publishes them (sent again under the same key); ``failed`` makes them dead
    (terminal, with the reason). Each is a guarded change with an audit event naming
    ``who``; one settled meanwhile (by a webhook, or another operator) is skipped.
    """
    try:
        chosen = OperatorDecision(decision)
    except ValueError:
        raise InvalidInput("as", f"must be one of: "
                           f"{', '.join(d.value for d in OperatorDecision)}") from None
    who = who.strip()
    if not who:
        raise InvalidInput("by", "must name who decides")
    check_line(who, "by", max_length=200)
    if note is not None:
        check_line(note, "note")
    if keys and (channel is not None or older_than_s is not None):
        raise InvalidInput("keys", "give keys, or a selection (channel, older than), not both")
    result = ResolveResult(decision=chosen.value, by=who)
    intents: list[Intent] = []
    if keys:
        for key in dict.fromkeys(keys):
            intent = await store.intent_get(key)
            if intent is None:
                result.skipped.append({"key": key, "why": "no intent has this key"})
            elif intent.state not in UNSETTLED:
                result.skipped.append({"key": key, "why": f"is {intent.state.value}, "
                                                          "not uncertain or held"})
            else:
                intents.append(intent)
    elif channel is None and older_than_s is None:
        raise InvalidInput("keys", "give keys, or a selection (channel, older than)")
    else:
        intents = await store.intent_find(
            states=sorted(UNSETTLED), channel=channel,
            updated_before=None if older_than_s is None else now - older_than_s, limit=limit)
    verdict = on_operator(chosen, who=who, note=note)
    assert verdict.to is not None
    resend = verdict.to is State.RETRYABLE
    # The lease token pins the decision to the send the operator saw: one resent and
    # uncertain again meanwhile is a new question, skipped as settled meanwhile.
    changes = [Change(key=i.key, from_state=i.state, to_state=verdict.to, event=verdict.event,
                      reason=verdict.reason, worker=f"operator:{who}",
                      lease_token=i.lease_token,
                      next_attempt_at=now if resend else None, reset_failures=resend)
               for i in intents]
    applied = set(await store.intent_apply_many(changes, now=now)) if changes else set()
    again = [(i.key, i.channel, now) for i in intents if i.key in applied and resend]
    if again:
        await publish(transport, again, now=now)
    for intent in intents:
        if intent.key in applied:
            result.resolved.append({"key": intent.key, "channel": intent.channel,
                                    "state_before": intent.state.value,
                                    "state": verdict.to.value})
        else:
            result.skipped.append({"key": intent.key, "why": "settled meanwhile"})
    return result


# ---------------------------------------------------------------- capacity forecast


async def campaign_forecast(
    store: Store, campaign: Campaign, *, limits: Mapping[str, PaceLimits], now: float,
    window_s: float, workers: int, observed_workers: int | None = None,
    per_worker_per_s: float | None = None, recipients: int | None = None,
    admission_per_s: float | None = None, startup_s: float = 0.0,
) -> list[capacity.ChannelForecast]:
    """Forecast a campaign's drain per channel before it is enabled (``tidings.capacity``).

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
