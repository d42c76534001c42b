"""What the dashboard's templates show, built from the read model
(``tidings.operate.readmodel``) and the snapshot it came from: channel cards with their
health, campaign bars, occurrences, switches and holds, the three answers of a
delivery, and the one-line notice after an action. Nothing here computes a number of
its own; free text from providers is scrubbed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from tidings.api.ui.formatting import fmt_ago, fmt_count, fmt_time, scrub
from tidings.api.ui.history import History, spark
from tidings.core.states import ACCEPTED_FAMILY, DONE, State
from tidings.operate import bulk
from tidings.operate.operations import Snapshot
from tidings.operate.readmodel import (
    ActiveHold,
    CampaignStatus,
    ChannelStatus,
    Delivery,
    HoldsReport,
    IntentView,
    Status,
)
from tidings.stores.base import Occurrence, Switch

#: A delivery in these will never be selected, enqueued or accepted now.
NEVER = DONE - ACCEPTED_FAMILY
#: What a provider reported after accepting.
AFTER_ACCEPTED = ACCEPTED_FAMILY - {State.ACCEPTED}


# ---------------------------------------------------------------- overview


def health(row: ChannelStatus) -> tuple[str, str]:
    """A status word for a channel, and its tone (ok, warn, bad, paused, idle)."""
    verdict = None if row.drain is None else row.drain.verdict
    if row.paused:
        return "paused", "Admission paused"
    if verdict == "stalled":
        return "bad", "Stalled"
    if verdict == "at_risk":
        assert row.drain is not None
        return "warn", f"At risk: {fmt_count(row.drain.expected_late)} may expire"
    if row.counts.backlog == 0:
        return "idle", "Idle" if row.counts.scheduled == 0 else "Waiting for due work"
    return "ok", "Draining"


def channel_view(name: str, row: ChannelStatus, history: History) -> dict[str, Any]:
    tone, label = health(row)
    n = row.counts
    return {
        "name": name, "tone": tone, "label": label, "paused": row.paused,
        "backlog": n.backlog, "scheduled": n.scheduled,
        "oldest_age_s": n.oldest_age_s, "in_flight": n.in_flight,
        "rate": n.send_rate_per_s, "rate_limited": row.rate_limited,
        "retries": row.retries, "dead_letters": row.dead_letters,
        "accepted": n.accepted, "sli": n.sli,
        "drain_s": row.drain.drain_s if row.drain is not None and n.backlog else None,
        "spark": spark(history.series(name)),
        # Sends whose answer was lost and that no lookup settled: an operator's to decide.
        "held": 0 if row.uncertain_sends is None else row.uncertain_sends.held,
        # Each lane of the channel's queue holding messages (tidings.core.lanes).
        "lanes": [] if row.queue is None else row.queue.lanes,
        # With fallbacks: a provider a worker said is out, the channel on its next one.
        "providers_out": [p for p in row.providers if p.out],
    }


def bar(row: CampaignStatus) -> dict[str, Any]:
    """A campaign's intents split into accepted, failed, cancelled and still to go,
    with each part's share of the width (0..100)."""
    n = row.counts
    total = n.total
    parts = {"accepted": n.accepted, "failed": n.dead + n.rejected + n.expired,
             "cancelled": n.cancelled}
    parts["waiting"] = max(0, total - sum(parts.values()))
    x = 0.0
    segments = []
    for name, count in parts.items():
        width = 100.0 * count / total if total else 0.0
        segments.append({"name": name, "count": count, "x": round(x, 3),
                         "width": round(width, 3)})
        x += width
    return {"total": total, "segments": segments, "parts": parts}


def campaign_view(name: str, row: CampaignStatus) -> dict[str, Any]:
    return {
        "name": name, "paused": row.paused, "declared": row.declared,
        "occurrence": row.latest_occurrence, "total": row.counts.total,
        "backlog": row.counts.backlog, "scheduled": row.counts.scheduled,
        "sli": row.counts.sli, "bar": bar(row), "channels": sorted(row.channels),
    }


def occurrence_view(occ: Occurrence) -> dict[str, Any]:
    """``members``: audience members read so far; ``admitted``: intents written (one
    per member and channel, less the skipped). The audience's size is not known
    before it has been read, so there is no share to show while admitting."""
    return {"campaign": occ.campaign, "logical_date": occ.logical_date, "kind": occ.kind,
            "status": occ.status, "members": occ.members, "admitted": occ.admitted,
            "skipped": occ.skipped, "reason": occ.reason,
            "created_at": occ.created_at, "finished_at": occ.finished_at}


def switch_view(scope: str, name: str, switch: Switch | None) -> dict[str, Any]:
    return {"scope": scope, "name": name, "paused": bool(switch and switch.paused),
            "changed_at": None if switch is None else switch.changed_at,
            "reason": None if switch is None else switch.reason}


def holds_view(report: HoldsReport, *, campaigns: Sequence[str],
               channels: Sequence[str]) -> list[dict[str, Any]]:
    """Every declared campaign and channel, held or not, and any occurrence held."""
    held: dict[tuple[str, str], ActiveHold] = {(h.scope, h.name): h for h in report.active}
    names = ([("campaign", name) for name in campaigns]
             + [("channel", ch) for ch in channels]
             + sorted(k for k in held if k[0] == "occurrence"))
    return [{"scope": scope, "name": name, "hold": held.get((scope, name))}
            for scope, name in names]


def overview(status: Status, snap: Snapshot, *, campaigns: Sequence[str],
             channels: Sequence[str], history: History) -> dict[str, Any]:
    """The overview's values: ``status`` (the same numbers as ``GET /v1/status``) and
    the switches and occurrences of the snapshot it was computed from."""
    switches = {(s.scope, s.name): s for s in snap.switches}
    occurrences = sorted(snap.occurrences, key=lambda o: (o.logical_at, o.created_at),
                         reverse=True)
    admission = ([switch_view("campaign", name, switches.get(("campaign", name)))
                  for name in campaigns]
                 + [switch_view("channel", ch, switches.get(("channel", ch)))
                    for ch in channels])
    return {
        "channels": [channel_view(n, r, history) for n, r in status.channels.items()],
        "campaigns": [campaign_view(n, r) for n, r in status.campaigns.items()],
        "occurrences": [occurrence_view(o) for o in occurrences[:8]],
        "admission": admission, "window_s": status.window_s,
        "guardrails": list(status.guardrails_tripped),
        "holds": holds_view(status.holds, campaigns=campaigns, channels=channels),
        "expired_while_held": status.holds.expired_while_held,
        "digests": status.digests,
    }


def notice(q: Mapping[str, str], *, campaigns: Collection[str],
           channels: Collection[str]) -> str | None:
    """The one-line result of the action that redirected here, from known names only
    (nothing the query string says is echoed)."""
    done, scope, name = q.get("done"), q.get("scope"), q.get("name")
    names = {"campaign": campaigns, "channel": channels}
    if done in ("paused", "resumed") and scope in names and name in names[scope]:
        return f"Admission {done} for {scope} {name}."
    if done in ("held", "released") and scope in names and name in names[scope]:
        text = f"Delivery {done} for {scope} {name}."
        if done == "released" and q.get("republished", "").isdigit():
            text += f" {int(q['republished'])} republished."
        return text
    action, selected, changed = q.get("bulk"), q.get("selected", ""), q.get("changed", "")
    if action in bulk.ACTIONS and selected.isdigit() and changed.isdigit():
        if q.get("dry") == "1":
            return f"Dry run of {action}: {int(selected)} intents selected; nothing changed."
        return f"{action}: {int(selected)} intents selected, {int(changed)} changed."
    redriven, kept = q.get("redriven", ""), q.get("kept", "")
    if redriven.isdigit():
        text = f"{int(redriven)} dead letter{'s' if int(redriven) != 1 else ''} redriven."
        if kept.isdigit() and int(kept):
            text += f" {int(kept)} kept (see the list)."
        return text
    if q.get("gone"):
        return "That dead letter had already left the list (redriven by someone else)."
    return None


# ---------------------------------------------------------------- timelines


def answers(intent: IntentView, now: float) -> list[dict[str, Any]]:
    """Selected? Enqueued? Accepted? Each as yes, no (never will be) or pending."""
    state, reason = intent.state.value, scrub(intent.reason)
    failed = intent.state in NEVER
    why = f"{state}" + (f": {reason}" if reason else "")

    def answer(label: str, at: float | None, *, pending: str, yes: str = "") -> dict[str, Any]:
        if at is not None:
            detail = f"{fmt_time(at)} ({fmt_ago(at, now)})" + (f" · {yes}" if yes else "")
            return {"label": label, "tone": "yes", "headline": "Yes", "detail": detail}
        if failed:
            return {"label": label, "tone": "no", "headline": "No", "detail": why}
        return {"label": label, "tone": "pending", "headline": "Not yet", "detail": pending}

    due = intent.due_at
    attempts = intent.attempts
    after = f"then {state}" if intent.state in AFTER_ACCEPTED else ""
    receipt = f"receipt {intent.receipt}" if intent.receipt else ""
    nxt = intent.next_attempt_at
    waiting = f"{state}, {attempts} attempt{'s' if attempts != 1 else ''} so far"
    if nxt is not None and intent.state is State.RETRYABLE:
        waiting += f"; next {fmt_ago(nxt, now)}"
    return [
        answer("Selected", intent.selected_at, pending="not admitted yet"),
        answer("Enqueued", intent.enqueued_at,
               pending=f"due {fmt_ago(due, now)}" if due > now else "waiting for a publish"),
        answer("Accepted", intent.accepted_at, pending=waiting,
               yes=", ".join(x for x in (receipt, after) if x)),
    ]


def delivery_view(found: Delivery, now: float) -> dict[str, Any]:
    intent = found.intent
    return {
        "key": found.key, "channel": intent.channel, "campaign": intent.campaign,
        "recipient": intent.recipient_surrogate, "state": intent.state.value,
        "reason": scrub(intent.reason), "attempts": intent.attempts,
        "due_at": intent.due_at, "expires_at": intent.expires_at,
        "answers": answers(intent, now),
        "events": [dataclasses.replace(e, detail=scrub(e.detail)) for e in found.events],
    }
