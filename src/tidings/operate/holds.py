"""Delivery holds: a channel, campaign or occurrence whose work waits, untouched.

A hold stops *delivery* (admission has its own switches): a worker that claims an
intent of a held scope parks it (``parked``, no send) and acks its message, so a
held campaign of a million queued intents costs one write per intent and then
nothing: no message comes back, no sweep republishes it (the reconciler reads only
enqueued and retryable intents), and oldest-message age stays honest. A release
removes the hold and republishes the scope's parked intents in bounded batches (an
intent another hold still covers stays parked); a release cut short is finished by
releasing again, and an intent parked as its hold was released (a worker that read
the hold a moment before) is resumed by the holds sweep. Expiry still applies: the
sweep (every reconciler loop) expires parked intents whose freshness deadline passed,
with an ``expired_while_held`` event that ``tidings status`` counts. Nothing is
deleted.

Every hold and release is an audit event naming who did it. What a worker does
with a hold right after its claim is ``tidings.delivery.hold_gate``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from tidings.admission.relay import publish
from tidings.core.errors import InvalidInput, unknown_name
from tidings.core.keys import check_line
from tidings.core.model import Event, Intent
from tidings.core.states import State
from tidings.delivery.hold_gate import (
    EXPIRED_WHILE_HELD,
    HoldStore,
    covering,
)
from tidings.operate.readmodel import ActiveHold, HoldsReport
from tidings.stores.base import (
    Change,
    Hold,
    Occurrences,
    Selection,
    Selections,
)
from tidings.transports.base import Transport

log = logging.getLogger("tidings.holds")

#: What a hold names: every intent of a channel, of a campaign, or of one occurrence.
SCOPES = ("channel", "campaign", "occurrence")
#: Intents per transaction of a release or a sweep.
BATCH = 500


def check_scope(scope: str) -> str:
    if scope not in SCOPES:
        raise InvalidInput("scope", f"must be one of {', '.join(SCOPES)}, not {scope!r}")
    return scope


async def check_target(store: Occurrences, scope: str, name: str, *, channels: Collection[str],
                       campaigns: Collection[str]) -> None:
    """Refuse (InvalidInput naming the scope) a hold of what is not declared or known."""
    check_scope(scope)
    declared = {"channel": channels, "campaign": campaigns}.get(scope)
    if declared is not None and name not in declared:
        raise InvalidInput(scope, unknown_name(scope, name, sorted(declared)))
    if scope == "occurrence" and await store.occurrence_get(name) is None:
        raise InvalidInput(scope, f"no occurrence {name!r} (its id is campaign/date, "
                                  "as tidings status shows)")


def parked_in(scope: str, name: str) -> Selection:
    """The parked intents of one scope."""
    return Selection(states=(State.PARKED,),
                     channel=name if scope == "channel" else None,
                     campaign=name if scope == "campaign" else None,
                     occurrence=name if scope == "occurrence" else None)


def leaving_out(selection: Selection, active: Sequence[Hold]) -> Selection:
    """``selection`` without the intents ``active`` covers (the store filters them)."""
    def names(scope: str) -> tuple[str, ...]:
        return tuple(h.name for h in active if h.scope == scope)

    return replace(selection, not_channels=names("channel"), not_campaigns=names("campaign"),
                   not_occurrences=names("occurrence"))


def _audit_key(scope: str, name: str) -> str:
    return f"hold/{scope}/{name}"


def _channel_of(scope: str, name: str) -> str:
    return name if scope == "channel" else "-"


async def hold(store: HoldStore, *, scope: str, name: str, by: str, now: float,
               reason: str | None = None) -> Hold | None:
    """Hold a scope; the hold if this call made it (None: it was held already)."""
    check_scope(scope)
    check_line(by, "by", max_length=200)
    if reason is not None:
        check_line(reason, "reason")
    made = await store.hold_insert(scope=scope, name=name, now=now, by=by, reason=reason)
    if made is not None:
        await store.event_append_many([Event(
            key=_audit_key(scope, name), channel=_channel_of(scope, name), type="hold",
            at=now, state="held", worker=by, detail=reason)])
        log.warning("delivery held", extra={"scope": scope, "target": name, "by": by,
                                            "reason": reason})
    return made


@dataclass(frozen=True, kw_only=True)
class ReleaseResult:
    released: Hold | None
    """The hold removed now (None: there was none; parked intents are still resumed)."""
    republished: int
    expired: int
    still_held: int
    """Parked intents of the scope that another hold still covers (left parked)."""


async def release(store: HoldStore, transport: Transport, *, scope: str, name: str, by: str,
                  now: float, batch: int = BATCH) -> ReleaseResult:
    """Remove a hold and resume its scope's parked intents, ``batch`` at a time."""
    check_scope(scope)
    removed = await store.hold_delete(scope=scope, name=name)
    await store.event_append_many([Event(
        key=_audit_key(scope, name), channel=_channel_of(scope, name), type="hold_released",
        at=now, state="released", worker=by,
        detail=None if removed is not None else "no hold was in place")])
    # What another hold still covers is left out by the store, so a release beside a
    # large hold reads only what it resumes.
    selection = leaving_out(parked_in(scope, name), await store.hold_all())
    republished = expired = 0
    after: str | None = None
    while True:
        page = await store.intent_select(selection, after=after, limit=batch)
        if not page:
            break
        after = page[-1].key
        changes = [_expire(i, by) if i.expires_at is not None and now >= i.expires_at
                   else Change(key=i.key, from_state=State.PARKED, to_state=State.ENQUEUED,
                               event="released", worker=by, reason=f"{scope} {name} released")
                   for i in page]
        applied = set(await store.intent_apply_many(changes, now=now))
        # Enqueued first, then published: a crash between leaves an enqueued intent
        # without its message, which the reconciler's lost-message sweep republishes.
        again = [(c.key, i.channel, now, i.lane, i.group_key)
                 for c, i in zip(changes, page, strict=True)
                 if c.key in applied and c.to_state is State.ENQUEUED]
        if again:
            republished += await publish(transport, again, now=now)
        expired += sum(1 for c in changes if c.key in applied and c.to_state is State.EXPIRED)
        if len(page) < batch:
            break
    still_held = sum((await store.intent_select_counts(parked_in(scope, name))).values())
    log.warning("delivery released", extra={
        "scope": scope, "target": name, "by": by, "republished": republished,
        "expired": expired, "still_held": still_held})
    return ReleaseResult(released=removed, republished=republished, expired=expired,
                         still_held=still_held)


def _expire(intent: Intent, by: str) -> Change:
    return Change(key=intent.key, from_state=State.PARKED, to_state=State.EXPIRED,
                  event=EXPIRED_WHILE_HELD, worker=by,
                  reason="its freshness deadline passed while held")


async def report(store: Selections, events: Mapping[str, Mapping[str, int]]) -> HoldsReport:
    """The holds in place (each with its parked intents) and how many intents expired
    while held (``tidings status``'s ``holds``)."""
    active = []
    for h in await store.hold_all():
        parked = sum((await store.intent_select_counts(parked_in(h.scope, h.name))).values())
        active.append(ActiveHold(scope=h.scope, name=h.name, since=h.held_at, by=h.held_by,
                                 reason=h.reason, parked=parked))
    return HoldsReport(active=tuple(active), expired_while_held=sum(
        e.get(EXPIRED_WHILE_HELD, 0) for e in events.values()))


#: How far back the holds sweep looks for parked intents no hold covers (a worker that
#: read a hold just before its release parks after it): many sweeps' worth.
ORPHANS_WITHIN_S = 60.0


@dataclass(frozen=True, kw_only=True)
class SweepResult:
    expired: int
    resumed: int


async def expire_parked(store: HoldStore, *, now: float, worker: str = "holds",
                        limit: int = BATCH) -> int:
    """Expire parked intents whose freshness deadline passed (one bounded batch)."""
    page = await store.intent_select(Selection(states=(State.PARKED,), expires_by=now),
                                     limit=limit)
    if not page:
        return 0
    applied = await store.intent_apply_many([_expire(i, worker) for i in page], now=now)
    if applied:
        log.info("expired while held", extra={"count": len(applied), "worker": worker})
    return len(applied)


async def resume_orphans(store: HoldStore, transport: Transport, *, now: float,
                         worker: str = "holds", within_s: float = ORPHANS_WITHIN_S,
                         limit: int = BATCH) -> int:
    """Republish intents parked in the last ``within_s`` that no hold covers: a worker
    that read a hold just before its release, and parked after the release had read
    the scope (one bounded batch; the store leaves out what a hold covers)."""
    active = await store.hold_all()
    page = await store.intent_select(leaving_out(Selection(
        states=(State.PARKED,), updated_after=now - within_s), active), limit=limit)
    changes = [Change(key=i.key, from_state=State.PARKED, to_state=State.ENQUEUED,
                      event="released", worker=worker,
                      reason="parked as its hold was released") for i in page
               if covering(active, i) is None]
    applied = set(await store.intent_apply_many(changes, now=now)) if changes else set()
    again = [(i.key, i.channel, now, i.lane, i.group_key) for i in page
             if i.key in applied]
    if again:
        await publish(transport, again, now=now)
        log.warning("parked intents resumed", extra={"count": len(again), "worker": worker})
    return len(again)


async def sweep(store: HoldStore, transport: Transport, *, now: float,
                worker: str = "holds") -> SweepResult:
    """The holds sweep of every reconciler loop: expiry while held, then orphans."""
    expired = await expire_parked(store, now=now, worker=worker)
    return SweepResult(expired=expired,
                       resumed=await resume_orphans(store, transport, now=now, worker=worker))
