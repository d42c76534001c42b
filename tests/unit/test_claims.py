"""The claim decision every store applies, and the plan of a claim batch, as pure functions."""

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.claims import (
    LOCKED_RETRY_S,
    ClaimPlan,
    LeaseWrite,
    claim_keys,
    claim_kind,
    plan_cancel,
    plan_claims,
    redelivery_event,
)
from tidings.core.model import Event, Intent
from tidings.core.states import CANCELLABLE, CLAIMABLE, DONE, State, check
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


# ---------------------------------------------------------------- plan_claims

OWNER = "w1"
LEASE_S = 30.0


def intent(key: str, state: State, *, token: int = 4, attempts: int = 2,
           next_attempt_at: float | None = None,
           lease_expires_at: float | None = None) -> Intent:
    return Intent(
        key=key, channel="email", recipient_id="r", address="a@example.com", template="t",
        data="{}", campaign=None, occurrence=None, state=state, due_at=NOW - 1,
        expires_at=None, created_at=1.0, updated_at=2.0, selected_at=1.0, enqueued_at=1.0,
        accepted_at=None, finished_at=None, attempts=attempts, failures=0,
        lease_owner=None, lease_token=token, lease_expires_at=lease_expires_at,
        next_attempt_at=next_attempt_at, receipt=None, provider_request_id=None,
        disposition=None, reason=None, cancel_requested=False)


def plan(keys: list[str], current: dict[str, Intent], **kw: Any) -> ClaimPlan:
    return plan_claims(keys, current, owner=OWNER, lease_s=LEASE_S, now=NOW, **kw)


def test_a_claimable_intent_is_leased_with_a_guarded_write_and_an_event() -> None:
    # given an enqueued intent holding lease token 4 after two attempts
    current = {"a": intent("a", State.ENQUEUED, token=4, attempts=2)}

    # when its message claims it
    result = plan(["a"], current, message_ids=["m-a"])

    # then the claim holds the next token, the write is guarded by what was read
    (claim,) = result.claims
    assert claim.kind is ClaimKind.CLAIMED and claim.token == 5
    assert claim.intent == replace(current["a"], state=State.CLAIMED, lease_owner=OWNER,
                                   lease_token=5, lease_expires_at=NOW + LEASE_S,
                                   attempts=3, updated_at=NOW)
    assert result.leases == [LeaseWrite("a", State.ENQUEUED, 4)]
    assert result.lease_expires_at == NOW + LEASE_S
    assert result.events == [Event(key="a", channel="email", type="claimed", at=NOW,
                                   state="claimed", attempt=3, worker=OWNER,
                                   message_id="m-a")]


def test_verdicts_write_nothing_and_only_a_finished_intent_leaves_an_event() -> None:
    current = {
        "done": intent("done", State.ACCEPTED, attempts=1),
        "moot": intent("moot", State.CANCELLED, attempts=0),
        "held": intent("held", State.UNCERTAIN),
        "busy": intent("busy", State.CLAIMED, lease_expires_at=NOW - 5),
        "later": intent("later", State.RETRYABLE, next_attempt_at=NOW + 9),
    }
    keys = ["done", "moot", "held", "busy", "later", "gone", "locked"]
    result = plan(keys, current, locked={"locked"}, message_ids=[f"m-{k}" for k in keys])

    assert [(c.key, c.kind, c.retry_at) for c in result.claims] == [
        ("done", ClaimKind.DONE, None), ("moot", ClaimKind.DONE, None),
        ("held", ClaimKind.HELD, None), ("busy", ClaimKind.BUSY, NOW - 5),
        ("later", ClaimKind.NOT_DUE, NOW + 9), ("gone", ClaimKind.MISSING, None),
        ("locked", ClaimKind.BUSY, NOW + LOCKED_RETRY_S)]
    assert result.leases == []
    assert [(e.key, e.type, e.state, e.attempt, e.message_id) for e in result.events] == [
        ("done", "duplicate_observed", "accepted", 1, "m-done"),
        ("moot", "discarded", "cancelled", 0, "m-moot")]


def test_message_ids_must_pair_with_keys() -> None:
    with pytest.raises(ValueError, match="message_ids"):
        claim_keys(["a", "b"], ["m-a"])
    assert claim_keys(["b", "a", "b"], None) == ["b", "a"]


STATES = st.sampled_from([State.ENQUEUED, State.SELECTED, State.RETRYABLE, State.CLAIMED,
                          State.UNCERTAIN, State.ACCEPTED, State.EXPIRED, State.DEAD])


@given(keys=st.lists(st.sampled_from("abcdef"), max_size=12),
       states=st.dictionaries(st.sampled_from("abcdef"), STATES),
       locked=st.sets(st.sampled_from("abcdef")),
       due=st.booleans())
def test_any_batch_gets_one_answer_per_key_and_at_most_one_lease_per_key(
        keys: list[str], states: dict[str, State], locked: set[str], due: bool) -> None:
    current = {k: intent(k, s, next_attempt_at=NOW - 1 if due else NOW + 1,
                         lease_expires_at=NOW + 3) for k, s in states.items()}
    locked -= set(current)  # a locked row is one the read skipped
    result = plan(keys, current, locked=locked)

    # one claim per key asked, in order
    assert [c.key for c in result.claims] == keys
    # a key is leased once, from what was read, and its first copy is the claim
    leased = [lease.key for lease in result.leases]
    assert len(leased) == len(set(leased))
    for lease in result.leases:
        assert (lease.from_state, lease.token) == (current[lease.key].state, 4)
        copies = [c for c in result.claims if c.key == lease.key]
        assert copies[0].kind is ClaimKind.CLAIMED
        assert all(c.kind is ClaimKind.BUSY and c.retry_at == NOW + LEASE_S
                   for c in copies[1:])
    # nothing claimable stays unclaimed; nothing else is leased
    for claim in result.claims:
        if claim.key in locked:
            assert claim.kind is ClaimKind.BUSY and claim.retry_at == NOW + LOCKED_RETRY_S
        elif claim.key not in current:
            assert claim.kind is ClaimKind.MISSING
    assert set(leased) == {k for k in keys if k in current and current[k].state in CLAIMABLE
                           and (due or current[k].state is not State.RETRYABLE)}
    # one event per lease and per redelivery of a finished intent
    done = sum(1 for c in result.claims if c.kind is ClaimKind.DONE)
    assert len(result.events) == len(leased) + done


@pytest.mark.parametrize("state", list(State))
@pytest.mark.parametrize("flagged", [False, True])
def test_a_cancel_request_is_decided_from_the_state_alone(state: State, flagged: bool) -> None:
    # given an intent in ``state`` (its cancel already flagged or not)
    plan = plan_cancel("k", state, channel="email", attempts=2, cancel_requested=flagged,
                       now=NOW, reason="customer asked")
    if state in CANCELLABLE:
        # then an unsent intent is cancelled at once by a change the table allows
        assert plan.change is not None and plan.state is State.CANCELLED
        check(plan.change.from_state, plan.change.to_state)
        assert (plan.change.key, plan.change.reason, plan.flag, plan.events) == (
            "k", "customer asked", False, ())
    elif state is State.CLAIMED and not flagged:
        # then a claimed one is flagged for its worker, with the event saying so
        assert (plan.state, plan.change, plan.flag) == (State.CLAIMED, None, True)
        assert plan.events == (Event(key="k", channel="email", type="cancel_requested", at=NOW,
                                     state="claimed", attempt=2, detail="customer asked"),)
    else:
        # then a finished or already flagged one is left as it is
        assert (plan.state, plan.change, plan.flag, plan.events) == (state, None, False, ())
