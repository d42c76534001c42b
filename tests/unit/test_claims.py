"""The claim decision every store applies, as a pure function."""

import pytest

from tidings.claims import claim_kind, redelivery_event
from tidings.states import DONE, State
from tidings.stores.base import ClaimKind

NOW = 100.0


@pytest.mark.parametrize("state", [State.SELECTED, State.ENQUEUED, State.RETRYABLE])
def test_claimable_states_are_claimed(state: State) -> None:
    assert claim_kind(state, next_attempt_at=None, lease_expires_at=None, now=NOW) == (
        ClaimKind.CLAIMED, None)


def test_a_retryable_intent_waits_for_its_next_attempt() -> None:
    assert claim_kind(State.RETRYABLE, next_attempt_at=NOW + 5, lease_expires_at=None,
                      now=NOW) == (ClaimKind.NOT_DUE, NOW + 5)
    assert claim_kind(State.RETRYABLE, next_attempt_at=NOW, lease_expires_at=None,
                      now=NOW)[0] is ClaimKind.CLAIMED


def test_a_lease_live_or_expired_is_busy_until_the_reconciler_ends_it() -> None:
    for expires in (NOW + 10, NOW - 10):
        assert claim_kind(State.CLAIMED, next_attempt_at=None, lease_expires_at=expires,
                          now=NOW) == (ClaimKind.BUSY, expires)


def test_finished_intents_are_duplicates_and_uncertain_ones_held() -> None:
    for state in DONE:
        assert claim_kind(state, next_attempt_at=None, lease_expires_at=None,
                          now=NOW)[0] is ClaimKind.DONE
    # held or uncertain: the reconciler's (or an operator's) to settle, never a send
    for state in (State.UNCERTAIN, State.HELD):
        assert claim_kind(state, next_attempt_at=None, lease_expires_at=None,
                          now=NOW)[0] is ClaimKind.HELD
    assert redelivery_event(State.ACCEPTED) == "duplicate_observed"
    assert redelivery_event(State.CANCELLED) == redelivery_event(State.EXPIRED) == "discarded"
