"""What a message for an intent may do with it: one pure decision every store applies.

A store reads the rows of a batch of keys under its lock and hands them to
``plan_claims``, which decides every key (``claim_kind``) and says what to write: the
guarded lease writes for the keys claimed, and the events. Everything but ``CLAIMED``
is a verdict the worker acts on. The store only runs the plan's writes. A cancel
request is decided the same way (``plan_cancel``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from tidings.core.model import Event, Intent, evolve
from tidings.core.states import CANCELLABLE, CLAIMABLE, DONE, UNSETTLED, State


class ClaimKind(StrEnum):
    CLAIMED = "claimed"
    """The caller now holds the lease (``intent`` and ``token`` are set)."""
    DONE = "done"
    """The intent is terminal: the message is a duplicate; ack it. A
    ``duplicate_observed`` event has been recorded (``discarded`` for a cancelled
    or expired intent, whose message is not a duplicate but moot)."""
    HELD = "held"
    """Uncertain (the reconciler owns it) or parked (a hold's release republishes it):
    ack the message."""
    BUSY = "busy"
    """The intent is claimed under a lease, live or expired; or it is this batch's own
    second copy of a key; or another transaction is writing its row right now. An
    expired lease is not a claimer's to take over: the reconciler ends it, and the
    intent becomes uncertain (the holder may have sent), settled by its channel's
    policy. Retry after ``retry_at``: the lease's expiry (already past for an expired
    lease, so the message comes back at once until the reconciler has moved the
    intent, and then claims HELD), or shortly for a row being written."""
    NOT_DUE = "not_due"
    """Retryable but its ``next_attempt_at`` is in the future; retry after ``retry_at``."""
    MISSING = "missing"
    """No intent has this key: the message is poison."""


@dataclass(frozen=True, kw_only=True)
class Claim:
    key: str
    kind: ClaimKind
    intent: Intent | None = None
    token: int | None = None
    retry_at: float | None = None
    state: State | None = None


@dataclass(frozen=True, kw_only=True)
class Change:
    """A guarded state change: applied only if the intent is in ``from_state``
    (and holds ``lease_token`` when given, and its lease expired by
    ``lease_expired_by`` when given: a lease renewed meanwhile is left alone; and, with
    ``unstarted``, only if no send started under its lease: ``Ledger.intent_mark_started``
    marked none).
    One audit event is appended with it.

    Field effects by target state, applied by every store alike:
    enqueued -> enqueued_at=now; accepted -> accepted_at=now, receipt;
    leaving claimed -> lease cleared; a terminal state -> finished_at=now,
    disposition=to_state, reason; retryable -> next_attempt_at (when it may be tried
    again); uncertain -> next_attempt_at (when it may be settled: None at once).
    """

    key: str
    from_state: State
    to_state: State
    event: str
    lease_token: int | None = None
    lease_expired_by: float | None = None
    reason: str | None = None
    next_attempt_at: float | None = None
    receipt: str | None = None
    provider_request_id: str | None = None
    count_attempt: bool = False
    count_failure: bool = False
    reset_failures: bool = False
    unstarted: bool = False
    worker: str | None = None
    message_id: str | None = None
    detail: str | None = None

#: How soon a claimer looks again at a key whose row another transaction holds right
#: now (a claimer, a sweep, an outcome commit): the row is in flux, not long-held.
LOCKED_RETRY_S = 0.1


def claim_kind(state: State, *, next_attempt_at: float | None,
               lease_expires_at: float | None, now: float) -> tuple[ClaimKind, float | None]:
    """The claim a message gets for an intent in ``state``, and when to look again."""
    if state in CLAIMABLE and not (
        state is State.RETRYABLE and next_attempt_at is not None and next_attempt_at > now
    ):
        return ClaimKind.CLAIMED, None
    if state in DONE:
        return ClaimKind.DONE, None
    if state in UNSETTLED or state is State.PARKED:
        # The reconciler's to resolve, or a hold's to release (which republishes it).
        return ClaimKind.HELD, None
    if state is State.CLAIMED:
        # Live or expired, a lease is the reconciler's to end, not a claimer's.
        return ClaimKind.BUSY, lease_expires_at
    return ClaimKind.NOT_DUE, next_attempt_at  # retryable, not yet due


def redelivery_event(state: State) -> str:
    """The event a message for a finished intent leaves behind.

    A message for a cancelled, expired, suppressed, throttled or dead-lettered intent is moot
    (``discarded``), not a duplicate (an operator's bulk cancel or dead-letter leaves
    messages behind).
    """
    return ("discarded" if state in (State.CANCELLED, State.EXPIRED, State.DEAD,
                                     State.SUPPRESSED, State.THROTTLED)
            else "duplicate_observed")


class LeaseWrite(NamedTuple):
    """One guarded claim write: ``key`` becomes claimed only if it is still in
    ``from_state`` with lease ``token``, as the plan read it."""

    key: str
    from_state: State
    token: int


@dataclass(frozen=True, kw_only=True)
class ClaimPlan:
    """A batch of claims decided: one ``Claim`` per key asked for, in order; the lease
    writes (each for the claimer until ``lease_expires_at``); the events to append."""

    claims: list[Claim]
    leases: list[LeaseWrite]
    events: list[Event]
    lease_expires_at: float


def claim_keys(keys: Sequence[str], message_ids: Sequence[str] | None) -> list[str]:
    """The distinct keys of a claim batch, first seen first.

    ``message_ids``, when given, pair one to one with ``keys`` (ValueError otherwise).
    """
    if message_ids is not None and len(message_ids) != len(keys):
        raise ValueError("message_ids must pair one to one with keys")
    return list(dict.fromkeys(keys))


def plan_claims(
    keys: Sequence[str],
    current: Mapping[str, Intent],
    *,
    owner: str,
    lease_s: float,
    now: float,
    message_ids: Sequence[str] | None = None,
    locked: Collection[str] = (),
) -> ClaimPlan:
    """Decide the claim of each key from its ``current`` intent (absent: missing).

    ``locked`` are keys whose rows exist but another transaction holds right now: busy,
    looked at again after ``LOCKED_RETRY_S``. A key asked twice in one batch is claimed
    once; its second copy is busy until the lease this batch takes expires. A claimed
    key leaves a ``claimed`` event; a finished one the event of its redelivery.
    """
    lease_expires_at = now + lease_s
    claimed_now: set[str] = set()
    claims: list[Claim] = []
    leases: list[LeaseWrite] = []
    events: list[Event] = []
    for i, key in enumerate(keys):
        if key in claimed_now:
            claims.append(Claim(key=key, kind=ClaimKind.BUSY, state=State.CLAIMED,
                                retry_at=lease_expires_at))
            continue
        if key in locked:
            claims.append(Claim(key=key, kind=ClaimKind.BUSY, retry_at=now + LOCKED_RETRY_S))
            continue
        intent = current.get(key)
        if intent is None:
            claims.append(Claim(key=key, kind=ClaimKind.MISSING))
            continue
        message_id = message_ids[i] if message_ids is not None else None
        state = intent.state
        kind, retry_at = claim_kind(state, next_attempt_at=intent.next_attempt_at,
                                    lease_expires_at=intent.lease_expires_at, now=now)
        if kind is ClaimKind.CLAIMED:
            claimed = evolve(intent, state=State.CLAIMED, lease_owner=owner,
                              lease_token=intent.lease_token + 1,
                              lease_expires_at=lease_expires_at,
                              attempts=intent.attempts + 1, updated_at=now)
            leases.append(LeaseWrite(key, state, intent.lease_token))
            events.append(Event(key=key, channel=intent.channel, type="claimed", at=now,
                                state=State.CLAIMED.value, attempt=claimed.attempts,
                                worker=owner, message_id=message_id))
            claims.append(Claim(key=key, kind=kind, intent=claimed,
                                token=claimed.lease_token, state=State.CLAIMED))
            claimed_now.add(key)
            continue
        if kind is ClaimKind.DONE:
            events.append(Event(key=key, channel=intent.channel, type=redelivery_event(state),
                                at=now, state=state.value, attempt=intent.attempts,
                                worker=owner, message_id=message_id))
        claims.append(Claim(key=key, kind=kind, state=state, retry_at=retry_at))
    return ClaimPlan(claims=claims, leases=leases, events=events,
                     lease_expires_at=lease_expires_at)


@dataclass(frozen=True, kw_only=True)
class CancelPlan:
    """What a cancel request does to one intent: ``change`` cancels it at once (its
    event comes with the change); ``flag`` marks a claimed one, whose worker sees the
    request before its send, with ``events``; neither for a finished intent or one
    already flagged. ``state`` is the state the request answers with."""

    state: State
    change: Change | None = None
    flag: bool = False
    events: tuple[Event, ...] = ()


def plan_cancel(key: str, state: State, *, channel: str, attempts: int,
                cancel_requested: bool, now: float, reason: str) -> CancelPlan:
    """Decide a cancel request for ``key``, read in ``state``."""
    if state in CANCELLABLE:
        return CancelPlan(state=State.CANCELLED, change=Change(
            key=key, from_state=state, to_state=State.CANCELLED, event="cancelled",
            reason=reason))
    if state is State.CLAIMED and not cancel_requested:
        return CancelPlan(state=state, flag=True, events=(Event(
            key=key, channel=channel, type="cancel_requested", at=now,
            state=State.CLAIMED.value, attempt=attempts, detail=reason),))
    return CancelPlan(state=state)
