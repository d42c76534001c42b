"""Bulk actions over a selection of intents: delay, cancel, dead-letter, reopen. Never
purge.

A selection names a campaign, an occurrence, a channel, states and an age (due more
than so long ago). Each action moves only intents no send has started for, in bounded
batches (one guarded transaction each, one audit event per intent), and leaves one
summary event naming who did it. A dry run counts the selection per state and changes
nothing. Nothing deletes an intent: a cancelled or dead-lettered intent stays in the
ledger with its reason, and a dead one can be redriven.

- ``delay``: enqueued and retryable intents become retryable at ``until``; a message
  already on the queue comes back then (the claim reads it not due).
- ``cancel``: selected, enqueued, retryable and parked intents are cancelled; a
  claimed one gets a cancel request its worker sees before the send.
- ``dead-letter``: selected, enqueued, retryable and parked intents become dead
  (``reopen`` undoes it).
- ``reopen``: dead intents become retryable now, their failures reset, each with a
  fresh message (a worker rechecks the ledger before any send); those a worker
  dead-lettered are in ``tidings dlq`` too, and a dead letter's redrive does the same.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from tidings.admission.relay import publish
from tidings.core.cron import check_instant
from tidings.core.errors import InvalidInput
from tidings.core.keys import check_line
from tidings.core.model import Event, Intent
from tidings.core.states import State
from tidings.stores.base import Change, Ledger, Selection, Selections
from tidings.transports.base import Transport

log = logging.getLogger("tidings.bulk")

#: action -> the states it may move intents out of (the default selection).
ACTIONS: dict[str, tuple[State, ...]] = {
    "delay": (State.ENQUEUED, State.RETRYABLE),
    "cancel": (State.SELECTED, State.ENQUEUED, State.RETRYABLE, State.PARKED, State.CLAIMED),
    "dead-letter": (State.SELECTED, State.ENQUEUED, State.RETRYABLE, State.PARKED),
    "reopen": (State.DEAD,),
}
#: Intents per transaction.
BATCH = 500


@dataclass(frozen=True, kw_only=True)
class BulkRequest:
    """An action over a selection; ``states`` empty means every state the action may
    move; ``older_than_s`` keeps intents due more than that long ago."""

    action: str
    by: str
    campaign: str | None = None
    occurrence: str | None = None
    channel: str | None = None
    states: tuple[str, ...] = ()
    older_than_s: float | None = None
    until: float | None = None
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class BulkResult:
    action: str
    dry_run: bool
    selected: dict[str, int]
    """Intents in the selection per state (before the action)."""
    changed: int
    """Intents moved (0 in a dry run)."""
    cancel_requested: int = 0
    """Claimed intents asked to cancel: in a worker's hands, each is cancelled if its
    worker reads the request before the send, and sent otherwise."""


def selection(request: BulkRequest, *, now: float) -> Selection:
    """The selection a request names; InvalidInput names the field it refuses (pure)."""
    allowed = ACTIONS.get(request.action)
    if allowed is None:
        raise InvalidInput("action", f"must be one of {', '.join(ACTIONS)}, "
                                     f"not {request.action!r}")
    if request.campaign is None and request.occurrence is None and request.channel is None:
        raise InvalidInput("campaign", "name a campaign, an occurrence or a channel: a bulk "
                                       "action over every intent is not offered")
    states: list[State] = []
    for name in request.states:
        try:
            state = State(name)
        except ValueError:
            raise InvalidInput("state", f"{name!r} is not a state") from None
        if state not in allowed:
            raise InvalidInput("state", f"{request.action} moves only "
                                        f"{', '.join(s.value for s in allowed)}, not {name}")
        states.append(state)
    if request.reason is not None:
        check_line(request.reason, "reason")
    if request.older_than_s is not None and request.older_than_s < 0:
        raise InvalidInput("older_than", "must not be negative")
    if request.action == "delay":
        if request.until is None:
            raise InvalidInput("until", "a delay needs the time to delay until")
        check_instant(request.until, "until")  # a time every store and the UI can show
        if request.until <= now:
            raise InvalidInput("until", "must be in the future")
    elif request.until is not None:
        raise InvalidInput("until", f"only a delay takes a time, not {request.action}")
    return Selection(
        states=tuple(dict.fromkeys(states)) or allowed, campaign=request.campaign,
        occurrence=request.occurrence, channel=request.channel,
        due_before=None if request.older_than_s is None else now - request.older_than_s)


def _describe(request: BulkRequest, chosen: Selection) -> str:
    parts = [f"{name} {value}" for name, value in (
        ("campaign", chosen.campaign), ("occurrence", chosen.occurrence),
        ("channel", chosen.channel)) if value is not None]
    parts.append("states " + ",".join(s.value for s in chosen.states))
    if request.older_than_s is not None:
        parts.append(f"older than {request.older_than_s:g}s")
    if request.until is not None:
        parts.append(f"until {request.until:.3f}")
    if request.reason:
        parts.append(f"reason: {request.reason}")
    return "; ".join(parts)


def change_for(request: BulkRequest, intent: Intent, now: float) -> Change | None:
    """The change the action makes of one intent (None: a cancel request instead)."""
    reason = request.reason or f"bulk {request.action} by {request.by}"
    if request.action == "reopen":
        return Change(key=intent.key, from_state=State.DEAD, to_state=State.RETRYABLE,
                      event="redriven", next_attempt_at=now, reset_failures=True,
                      worker=request.by, reason=reason)
    if request.action == "delay":
        # Never past the freshness deadline: an intent delayed beyond it is taken up when
        # it expires, and expired then, rather than held as a backlog until the delay ends.
        until = request.until if intent.expires_at is None or request.until is None \
            else min(request.until, intent.expires_at)
        return Change(key=intent.key, from_state=intent.state, to_state=State.RETRYABLE,
                      event="delayed", next_attempt_at=until, worker=request.by,
                      reason=reason)
    if intent.state is State.CLAIMED:
        return None
    to = State.CANCELLED if request.action == "cancel" else State.DEAD
    return Change(key=intent.key, from_state=intent.state, to_state=to,
                  event="cancelled" if to is State.CANCELLED else "dead", worker=request.by,
                  reason=reason)


class BulkStore(Ledger, Selections, Protocol):
    """What a bulk action reaches: the selection it reads and the ledger it changes."""


async def run(store: BulkStore, request: BulkRequest, *, now: float, dry_run: bool = False,
              batch: int = BATCH, transport: Transport | None = None) -> BulkResult:
    """Count the selection, then (unless ``dry_run``) act on it ``batch`` at a time;
    ``reopen`` publishes the reopened intents' messages on ``transport``."""
    chosen = selection(request, now=now)
    if request.action == "reopen" and transport is None:
        raise InvalidInput("action", "reopen publishes messages: it needs the transport")
    counts = await store.intent_select_counts(chosen)
    if dry_run:
        return BulkResult(action=request.action, dry_run=True, selected=counts, changed=0)
    changed = requested = 0
    after: str | None = None
    # Paged by key over a snapshot of the selection's bounds: a delay moves intents into
    # retryable, which the selection may read again on a later page; the key order
    # reads each key once.
    while True:
        page = await store.intent_select(chosen, after=after, limit=batch)
        if not page:
            break
        after = page[-1].key
        changes = [c for c in (change_for(request, i, now) for i in page) if c is not None]
        if changes:
            applied = await store.intent_apply_many(changes, now=now)
            changed += len(applied)
            if request.action == "reopen" and applied and transport is not None:
                by_key = {i.key: i for i in page}
                await publish(transport, [(key, by_key[key].channel, now, by_key[key].lane,
                                           by_key[key].group_key)
                                          for key in applied], now=now)
        for intent in page:
            if intent.state is State.CLAIMED:
                reason = request.reason or f"bulk cancel by {request.by}"
                if await store.intent_request_cancel(intent.key, now=now,
                                                     reason=reason) is not None:
                    requested += 1
        if len(page) < batch:
            break
    detail = _describe(request, chosen)
    target = request.campaign or request.occurrence or request.channel or "-"
    await store.event_append_many([Event(
        key=f"bulk/{request.action}/{target}", channel=request.channel or "-",
        type=f"bulk_{request.action.replace('-', '_')}", at=now, worker=request.by,
        detail=f"{changed} changed" + (f", {requested} cancel requested" if requested else "")
        + f": {detail}")])
    log.warning("bulk action", extra={"action": request.action, "by": request.by,
                                      "changed": changed, "requested": requested,
                                      "selection": detail})
    return BulkResult(action=request.action, dry_run=False, selected=counts, changed=changed,
                      cancel_requested=requested)
