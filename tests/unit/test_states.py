"""The transition table and the pure deciders."""

import random

import pytest

from tidings.core.errors import InvalidTransition
from tidings.core.outcomes import Accepted, Permanent, RateLimited, Transient, Uncertain
from tidings.core.policy import RetryPolicy
from tidings.core.states import (
    DONE,
    TRANSITIONS,
    State,
    before_send,
    check,
    decide,
    decide_raised,
)

NOW = 1_000.0
POLICY = RetryPolicy(max_failures=3, base_s=1.0, cap_s=10.0)


def test_every_state_has_a_row_and_targets_are_states() -> None:
    assert set(TRANSITIONS) == set(State)
    for targets in TRANSITIONS.values():
        assert targets <= set(State)


def test_a_transition_not_in_the_table_raises() -> None:
    with pytest.raises(InvalidTransition) as err:
        check(State.ACCEPTED, State.RETRYABLE)
    assert err.value.from_state == "accepted" and err.value.to_state == "retryable"
    check(State.CLAIMED, State.ACCEPTED)


def test_terminal_states_are_absorbing_except_provider_events_and_redrive() -> None:
    for state in DONE:
        allowed = TRANSITIONS[state]
        if state == State.DEAD:
            assert allowed == {State.RETRYABLE}
        elif state in (State.ACCEPTED, State.DELIVERED):
            assert allowed <= {State.DELIVERED, State.BOUNCED, State.COMPLAINED}
        else:
            assert allowed == frozenset()


def decide_(outcome, failures=0, streak=1):
    return decide(outcome, failures=failures, policy=POLICY, now=NOW, rng=random.Random(1),
                  consecutive_rate_limits=streak)


def test_accepted_keeps_the_receipt() -> None:
    d = decide_(Accepted(receipt="r1", request_id="q1"))
    assert (d.to, d.receipt, d.request_id) == (State.ACCEPTED, "r1", "q1")


def test_rate_limited_with_retry_after_pauses_the_channel_exactly_that_long() -> None:
    d = decide_(RateLimited(retry_after_s=2.0))
    assert d.to == State.RETRYABLE
    assert d.channel_pause_until == NOW + 2.0 == d.next_attempt_at
    assert not d.count_failure  # 429 never spends the retry budget


def test_rate_limited_without_retry_after_backs_off_within_bounds() -> None:
    pauses = [decide(RateLimited(), failures=0, policy=POLICY, now=NOW, rng=random.Random(s),
                     consecutive_rate_limits=3).channel_pause_until for s in range(200)]
    assert all(p is not None for p in pauses)
    spans = [p - NOW for p in pauses if p is not None]
    assert min(spans) >= POLICY.rate_limit_floor_s  # never a tight loop
    assert max(spans) <= POLICY.rate_limit_floor_s * 2 * 4  # full jitter under base * 2**2
    assert len({round(s, 6) for s in spans}) > 100  # jittered, not one fixed value


@pytest.mark.parametrize("retry_after", [float("nan"), float("inf"), -float("inf"), -5.0])
def test_a_retry_after_no_clock_can_reach_still_pauses_within_bounds(retry_after: float) -> None:
    # A plug-in provider's arithmetic, not a parsed header: NaN is no Retry-After at
    # all, the infinities and negatives are clamped. Each pause is a time a store holds.
    d = decide_(RateLimited(retry_after_s=retry_after))
    pause = (d.channel_pause_until or 0.0) - NOW
    assert d.next_attempt_at == d.channel_pause_until
    assert 0.0 <= pause <= POLICY.rate_limit_cap_s


def test_transient_retries_then_dies_when_the_budget_is_spent() -> None:
    first = decide_(Transient(reason="503"), failures=0)
    assert first.to == State.RETRYABLE and first.count_failure
    assert NOW <= (first.next_attempt_at or 0) <= NOW + 1.0
    last = decide_(Transient(reason="503"), failures=2)
    assert last.to == State.DEAD
    assert last.reason is not None and "retry budget spent after 3" in last.reason


def test_permanent_is_rejected_and_uncertain_is_uncertain() -> None:
    assert decide_(Permanent(reason="bad address")).to == State.REJECTED
    assert decide_(Uncertain(reason="timeout")).to == State.UNCERTAIN


def test_before_send_checks_cancellation_then_expiry() -> None:
    assert before_send(cancel_requested=True, expires_at=None, now=NOW) == State.CANCELLED
    assert before_send(cancel_requested=False, expires_at=NOW, now=NOW) == State.EXPIRED
    assert before_send(cancel_requested=False, expires_at=NOW + 1, now=NOW) is None


def raised_(*, may_have_left: bool, failures: int = 0):
    return decide_raised("OSError: Too many connections", may_have_left=may_have_left,
                         failures=failures, policy=POLICY, now=NOW, rng=random.Random(1))


def test_a_raise_before_the_send_is_a_transient_failure_that_spends_the_budget() -> None:
    first = raised_(may_have_left=False)
    assert (first.to, first.event, first.count_failure, first.raised) == (
        State.RETRYABLE, "transient_failure", True, True)
    assert NOW <= (first.next_attempt_at or 0) <= NOW + POLICY.base_s
    assert first.reason == "raised before the send: OSError: Too many connections"
    last = raised_(may_have_left=False, failures=POLICY.max_failures - 1)
    assert (last.to, last.event, last.raised) == (State.DEAD, "dead", True)
    assert last.reason == ("retry budget spent after 3 transient failures: "
                           "raised before the send: OSError: Too many connections")


def test_a_raise_once_the_request_may_have_left_is_uncertain_even_with_the_budget_spent() -> None:
    for failures in range(POLICY.max_failures + 1):
        d = raised_(may_have_left=True, failures=failures)
        # never dead here: the provider may have accepted it; the reconciler asks
        assert (d.to, d.event, d.count_failure, d.raised) == (
            State.UNCERTAIN, "uncertain", True, True)
        assert d.next_attempt_at is None and d.channel_pause_until is None
    assert d.reason == ("raised during the send, which may have reached the provider: "
                        "OSError: Too many connections")
    check(State.CLAIMED, State.UNCERTAIN)
    check(State.CLAIMED, State.RETRYABLE)
    check(State.UNCERTAIN, State.RETRYABLE)


def test_outcomes_are_not_raised() -> None:
    assert not decide_(Transient(reason="503")).raised
    assert not decide_(Uncertain(reason="timeout")).raised


# ---------------------------------------------------------------- provider reports


def test_a_report_moves_only_accepted_family_intents_forward() -> None:
    from tidings.core.states import ACCEPTED_FAMILY, report_move

    delivered, bounced, complained = (report_move(t) for t in
                                      ("delivered", "bounced", "complained"))
    assert delivered is not None and bounced is not None and complained is not None
    assert (delivered.to, delivered.sources) == (State.DELIVERED, {State.ACCEPTED})
    assert (bounced.to, bounced.sources) == (State.BOUNCED, {State.ACCEPTED, State.DELIVERED})
    assert complained.sources == {State.ACCEPTED, State.DELIVERED}
    assert all(m.sources <= ACCEPTED_FAMILY for m in (delivered, bounced, complained))
    assert report_move("failed") is None
