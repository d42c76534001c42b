"""Intent states, the transition table, and pure deciders.

Each state says who moves an intent into it and who moves it out. Stores apply a
decision with a guarded update (compare-and-set on state and lease token); a
transition not in ``TRANSITIONS`` raises ``InvalidTransition``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from enum import StrEnum

from tidings.core.errors import InvalidTransition
from tidings.core.outcomes import Accepted, Outcome, Permanent, RateLimited, Transient, Uncertain
from tidings.core.policy import RetryPolicy, rate_limit_pause, retry_delay


class State(StrEnum):
    SELECTED = "selected"
    """Admission wrote it. Out: the relay publishes it (enqueued), or cancel/expiry."""
    ENQUEUED = "enqueued"
    """A message for it is on its channel queue. Out: a worker claims it."""
    CLAIMED = "claimed"
    """A worker holds a lease on it; a message for it meanwhile claims busy, even once
    the lease has expired. Out: the worker records the outcome (accepted, retryable,
    uncertain, rejected, dead; parked under a hold; cancelled or expired before its
    send), or, once the lease expired, the reconciler makes it uncertain (the holder
    may have sent) and never retryable directly: the channel's policy settles it."""
    RETRYABLE = "retryable"
    """A try failed in a way worth retrying, or an uncertain send was found not
    accepted (or resent by policy or an operator). Out: a worker claims it again once
    ``next_attempt_at`` passes, or it is republished."""
    PARKED = "parked"
    """Set aside under a delivery hold (``tidings.operate.holds``): a worker claimed it while its
    channel, campaign or occurrence was held and parked it with no send, acking its
    message. Out: the hold's release (enqueued and republished), the holds sweep when its
    freshness deadline passes (expired), or an operator's bulk cancel or dead-letter."""
    UNCERTAIN = "uncertain"
    """The provider may have accepted it (an answer lost, or a lease expired). Out: the
    reconciler settles it by the channel's policy (``tidings.delivery.uncertain``): accepted or
    dead by lookup or webhook evidence, retryable when the lookup cannot find it or the
    policy is ``resend``, held otherwise."""
    HELD = "held"
    """Uncertain, and nothing may resend it: no lookup settled it, so it waits for
    evidence (a provider webhook naming its key) and, past the channel's ``hold_s``, for
    an operator's audited decision. Out: evidence (accepted, dead) or an operator
    (accepted, retryable, dead); never by itself."""
    ACCEPTED = "accepted"
    """The provider accepted it; the receipt is stored. Out: a provider's verified
    report (``tidings.webhooks.record``): delivered, bounced or complained."""
    DELIVERED = "delivered"
    """The provider reported delivery after acceptance (accepted_at is kept). Out: a
    later report of a bounce or a complaint."""
    BOUNCED = "bounced"
    """The provider reported a bounce after acceptance (accepted_at is kept). Terminal."""
    COMPLAINED = "complained"
    """The recipient complained after delivery (accepted_at is kept). Terminal."""
    REJECTED = "rejected"
    """The provider refused it permanently. Terminal."""
    DEAD = "dead"
    """The retry budget is spent. Terminal, except for an operator's redrive."""
    CANCELLED = "cancelled"
    """Cancelled before a send started. Terminal."""
    EXPIRED = "expired"
    """Its freshness deadline passed before a send started. Terminal."""
    SUPPRESSED = "suppressed"
    """Its address is on the suppression list (``tidings.core.suppression``): the worker's
    gate ended it right after its claim, with no provider call; ``reason`` says why the
    address is suppressed (``hard_bounce``, ``sms_stop``, …). Terminal; counted apart from
    failures, and not eligible for the SLI."""
    THROTTLED = "throttled"
    """A per-recipient throttle (``tidings.core.throttle``) in mode ``drop`` refused its
    send right after its claim, with no provider call; ``reason`` names the rule that
    stopped it. Terminal; counted apart from failures, and not eligible for the SLI."""


S = State
TRANSITIONS: dict[State, frozenset[State]] = {
    # selected -> dead, enqueued -> dead / retryable: an operator's bulk dead-letter or
    # delay (tidings.operate.bulk); retryable -> retryable: a delay moved.
    S.SELECTED: frozenset({S.ENQUEUED, S.CLAIMED, S.CANCELLED, S.EXPIRED, S.DEAD}),
    # selected -> claimed: the relay published but died before marking it enqueued.
    S.ENQUEUED: frozenset({S.CLAIMED, S.CANCELLED, S.EXPIRED, S.RETRYABLE, S.DEAD}),
    S.CLAIMED: frozenset(
        {S.ACCEPTED, S.RETRYABLE, S.UNCERTAIN, S.REJECTED, S.DEAD, S.CANCELLED, S.EXPIRED,
         S.PARKED, S.SUPPRESSED, S.THROTTLED}
    ),
    S.RETRYABLE: frozenset({S.ENQUEUED, S.CLAIMED, S.CANCELLED, S.EXPIRED, S.DEAD,
                            S.RETRYABLE}),
    S.PARKED: frozenset({S.ENQUEUED, S.CANCELLED, S.EXPIRED, S.DEAD}),
    S.UNCERTAIN: frozenset({S.ACCEPTED, S.RETRYABLE, S.HELD, S.DEAD}),
    S.HELD: frozenset({S.ACCEPTED, S.RETRYABLE, S.DEAD}),
    S.ACCEPTED: frozenset({S.DELIVERED, S.BOUNCED, S.COMPLAINED}),
    S.DELIVERED: frozenset({S.BOUNCED, S.COMPLAINED}),
    S.BOUNCED: frozenset(),
    S.COMPLAINED: frozenset(),
    S.REJECTED: frozenset(),
    S.DEAD: frozenset({S.RETRYABLE}),  # operator redrive only
    S.CANCELLED: frozenset(),
    S.EXPIRED: frozenset(),
    S.SUPPRESSED: frozenset(),
    S.THROTTLED: frozenset(),
}

#: States a worker never moves an intent out of: a redelivery is a duplicate.
DONE: frozenset[State] = frozenset(
    {S.ACCEPTED, S.DELIVERED, S.BOUNCED, S.COMPLAINED, S.REJECTED, S.DEAD, S.CANCELLED, S.EXPIRED,
     S.SUPPRESSED, S.THROTTLED}
)
#: States a worker may claim from.
CLAIMABLE: frozenset[State] = frozenset({S.SELECTED, S.ENQUEUED, S.RETRYABLE})
#: States a cancel ends at once (a claimed intent is flagged for its worker instead).
CANCELLABLE: frozenset[State] = CLAIMABLE | {S.PARKED}
#: States counted as accepted by the channel (provider events keep accepted_at).
ACCEPTED_FAMILY: frozenset[State] = frozenset({S.ACCEPTED, S.DELIVERED, S.BOUNCED, S.COMPLAINED})
#: States the reconciler settles by evidence or policy, never a worker.
UNSETTLED: frozenset[State] = frozenset({S.UNCERTAIN, S.HELD})
#: Terminal dispositions reported per channel.
TERMINAL: frozenset[State] = DONE


#: The state a provider's report of each type moves an accepted intent to.
REPORTED: dict[str, State] = {"delivered": S.DELIVERED, "bounced": S.BOUNCED,
                              "complained": S.COMPLAINED}


@dataclass(frozen=True, kw_only=True)
class ReportMove:
    """Where a provider's report moves an intent: to ``to``, from any of ``sources``
    (accepted-family states the table lets reach ``to``), else nowhere."""

    to: State
    sources: frozenset[State]


def report_move(report: str) -> ReportMove | None:
    """The move a provider's report of type ``report`` makes (None: it moves nothing,
    as ``failed`` does). Stores apply it as a guarded update from ``sources``, so a
    replayed report, one arriving out of order (delivered after bounced) and one about
    an intent outside the accepted family change nothing."""
    to = REPORTED.get(report)
    if to is None:
        return None
    return ReportMove(to=to, sources=frozenset(
        s for s in ACCEPTED_FAMILY if to in TRANSITIONS[s]))


def check(from_state: State, to_state: State) -> None:
    """Raise InvalidTransition unless the table allows ``from_state -> to_state``."""
    if to_state not in TRANSITIONS[from_state]:
        raise InvalidTransition(from_state.value, to_state.value)


@dataclass(frozen=True, kw_only=True)
class Decision:
    """What to do with a claimed intent after its provider call."""

    to: State
    event: str
    reason: str | None = None
    next_attempt_at: float | None = None
    count_failure: bool = False
    channel_pause_until: float | None = None
    receipt: str | None = None
    request_id: str | None = None
    raised: bool = False
    """The send raised instead of answering (``decide_raised``)."""
    code: str | None = None
    """A permanent refusal's ``Permanent.code`` (``RECIPIENT_STOPPED``), for the worker
    to act on (``tidings.core.suppression.from_refusal``)."""


def decide(
    outcome: Outcome,
    *,
    failures: int,
    policy: RetryPolicy,
    now: float,
    rng: random.Random,
    consecutive_rate_limits: int = 1,
) -> Decision:
    """Map a provider outcome to a transition out of ``claimed``.

    ``failures`` is the number of transient failures the intent had before this one.
    """

    match outcome:
        case Accepted(receipt=receipt, request_id=request_id, via=via):
            return Decision(to=S.ACCEPTED, event="accepted", receipt=receipt,
                            request_id=request_id,
                            reason=f"sent via {via}" if via is not None else None)
        case RateLimited(retry_after_s=retry_after, request_id=request_id):
            pause = rate_limit_pause(retry_after, consecutive_rate_limits, policy, rng)
            return Decision(
                to=S.RETRYABLE, event="rate_limited", reason=outcome.reason,
                next_attempt_at=now + pause, channel_pause_until=now + pause,
                request_id=request_id,
            )
        case Transient(reason=reason, request_id=request_id):
            spent = failures + 1
            if policy.spent(spent):
                return Decision(
                    to=S.DEAD, event="dead",
                    reason=f"retry budget spent after {spent} transient failures: {reason}",
                    count_failure=True, request_id=request_id,
                )
            return Decision(
                to=S.RETRYABLE, event="transient_failure", reason=reason,
                next_attempt_at=now + retry_delay(spent, policy, rng), count_failure=True,
                request_id=request_id,
            )
        case Permanent(reason=reason, request_id=request_id, code=code):
            return Decision(to=S.REJECTED, event="rejected", reason=reason, request_id=request_id,
                            code=code)
        case Uncertain(reason=reason, request_id=request_id):
            # Spends the budget like a raise during the send: a provider that never
            # answers for sure ends dead, not resent for ever (``Reconciler``).
            return Decision(to=S.UNCERTAIN, event="uncertain", reason=reason,
                            request_id=request_id, count_failure=True)
    raise TypeError(f"not an outcome: {outcome!r}")  # pragma: no cover


def decide_raised(
    what: str,
    *,
    may_have_left: bool,
    failures: int,
    policy: RetryPolicy,
    now: float,
    rng: random.Random,
) -> Decision:
    """Map a send that raised ``what`` instead of answering to a transition out of
    ``claimed``.

    Raised before the request could have left (composing, pacing, the last checks): a
    transient failure, retried with backoff until the budget is spent. Raised once it
    may have left (inside the provider's ``send``, or mapping its answer): uncertain, for
    the reconciler to settle by lookup like any other uncertain send. Both spend the
    budget, so an adapter that raises on every send ends dead, not retried for ever.
    """

    if not may_have_left:
        failed = decide(Transient(reason=f"raised before the send: {what}"),
                        failures=failures, policy=policy, now=now, rng=rng)
        return replace(failed, raised=True)
    return Decision(to=S.UNCERTAIN, event="uncertain", count_failure=True, raised=True,
                    reason=f"raised during the send, which may have reached the provider: "
                           f"{what}")


def before_send(*, cancel_requested: bool, expires_at: float | None, now: float) -> State | None:
    """The state a freshly claimed intent must go to instead of being sent, if any."""
    if cancel_requested:
        return S.CANCELLED
    if expires_at is not None and now >= expires_at:
        return S.EXPIRED
    return None
