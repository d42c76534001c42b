"""What a message for an intent may do with it: one pure decision every store applies.

A store reads the intent's row under its lock, asks ``claim_kind``, and writes the
lease only for ``CLAIMED``; everything else is a verdict the worker acts on.
"""

from __future__ import annotations

from tidings.states import CLAIMABLE, DONE, UNSETTLED, State
from tidings.stores.base import ClaimKind


def claim_kind(state: State, *, next_attempt_at: float | None,
               lease_expires_at: float | None, now: float) -> tuple[ClaimKind, float | None]:
    """The claim a message gets for an intent in ``state``, and when to look again."""
    if state in CLAIMABLE and not (
        state is State.RETRYABLE and next_attempt_at is not None and next_attempt_at > now
    ):
        return ClaimKind.CLAIMED, None
    if state in DONE:
        return ClaimKind.DONE, None
    if state in UNSETTLED:
        return ClaimKind.HELD, None
    if state is State.CLAIMED:
        # Live or expired, a lease is the reconciler's to end, not a claimer's.
        return ClaimKind.BUSY, lease_expires_at
    return ClaimKind.NOT_DUE, next_attempt_at  # retryable, not yet due


def redelivery_event(state: State) -> str:
    """The event a message for a finished intent leaves behind.

    A message for a cancelled or expired intent is moot (``discarded``), not a duplicate.
    """
    return "discarded" if state in (State.CANCELLED, State.EXPIRED) else "duplicate_observed"
