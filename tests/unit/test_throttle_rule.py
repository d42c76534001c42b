"""The per-recipient throttle's rule (``tidings.core.throttle``), with a fake clock.

A model of the store's count (a dict) stands in for the store here; the stores' own
counts are the conformance suite's (tests/conformance/test_store_throttles.py).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.clock import FakeClock
from tidings.core.states import State
from tidings.core.throttle import (
    DEFERRED_EVENT,
    Mode,
    Rule,
    Rules,
    ask,
    refused,
    releases,
)

T0 = 1_790_000_000.0


@given(window_s=st.floats(min_value=0.5, max_value=7 * 86400.0),
       offset=st.floats(min_value=0.0, max_value=1e7))
def test_now_falls_in_its_window_and_windows_tile(window_s: float, offset: float) -> None:
    rule = Rule(name="channel:sms", limit=3, window_s=window_s)
    now = T0 + offset
    start, end = rule.window_of(now)
    assert start <= now < end
    # (to the float spacing of epoch seconds: 2.4e-7 s near 1.8e9)
    assert math.isclose(end - start, window_s, abs_tol=1e-6)
    # the next window starts where this one ends
    assert rule.window_of(end)[0] == pytest.approx(end, abs=1e-6)


@given(limit=st.integers(min_value=1, max_value=5),
       window_s=st.sampled_from([1.0, 60.0, 3600.0]),
       steps=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]),
                                st.floats(min_value=0.0, max_value=30.0)),
                      min_size=1, max_size=60))
def test_no_recipient_gets_more_than_the_limit_in_any_window(
        limit: int, window_s: float, steps: list[tuple[str, float]]) -> None:
    # given a rule and sends to few recipients at moments a fake clock moves between
    clock = FakeClock(T0)
    rule = Rule(name="channel:sms", limit=limit, window_s=window_s, mode=Mode.DROP)
    counts: dict[tuple[str, float], int] = {}
    sent: list[tuple[str, float]] = []
    for n, (recipient, advance) in enumerate(steps):
        clock.advance(advance)
        asked = ask(rule, key=f"k{n}", recipient=recipient, now=clock.now())
        held = counts.get((recipient, asked.window_start), 0)
        if held < asked.limit:  # what the store's conditional upsert does
            counts[(recipient, asked.window_start)] = held + 1
            sent.append((recipient, clock.now()))
        else:
            throttled = refused(rule, asked)
            assert (throttled.to_state, throttled.until) == (State.THROTTLED, None)
            assert rule.name in throttled.reason
    # then, judged by the send times alone, no window holds more than the limit
    per_window: dict[tuple[str, float], int] = {}
    for recipient, at in sent:
        start = rule.window_of(at)[0]
        per_window[(recipient, start)] = per_window.get((recipient, start), 0) + 1
    assert all(v <= limit for v in per_window.values())


@given(now=st.floats(min_value=T0, max_value=T0 + 1e6),
       window_s=st.floats(min_value=1.0, max_value=86400.0))
def test_a_deferred_send_comes_back_at_the_next_window_start(now: float,
                                                             window_s: float) -> None:
    rule = Rule(name="campaign:promo/sms", limit=1, window_s=window_s, mode=Mode.DEFER)
    asked = ask(rule, key="k", recipient="r", now=now)
    deferred = refused(rule, asked)
    assert (deferred.to_state, deferred.event) == (State.RETRYABLE, DEFERRED_EVENT)
    assert deferred.until is not None and deferred.until > now
    assert rule.window_of(deferred.until)[0] == pytest.approx(deferred.until, abs=1e-6)


def test_a_campaign_rule_overrides_the_channel_rule_for_its_sends_only() -> None:
    channel = Rule(name="channel:sms", limit=3, window_s=86400.0)
    promo = Rule(name="campaign:promo/sms", limit=1, window_s=86400.0)
    rules = Rules({"sms": channel}, {("promo", "sms"): promo})
    assert rules.rule_for("sms", "promo") is promo
    assert rules.rule_for("sms", "weekly") is channel
    assert rules.rule_for("sms", None) is channel
    assert rules.rule_for("email", "promo") is None
    assert not rules.for_channel("email")


def test_only_a_send_that_surely_did_not_happen_hands_its_reservation_back() -> None:
    assert {s for s in State if releases(s)} == {State.RETRYABLE, State.REJECTED, State.DEAD}


@pytest.mark.parametrize(("limit", "window_s", "field"), [
    (0, 60.0, "limit"), (True, 60.0, "limit"), (1, 0.0, "window_s"),
    (1, math.inf, "window_s"), (1, math.nan, "window_s")])
def test_a_bad_rule_is_refused_naming_its_field(limit: int, window_s: float,
                                                field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Rule(name="channel:sms", limit=limit, window_s=window_s)
