"""Uncertain sends are settled by evidence, never resent blindly: the per-channel policy,
the reconciler that applies it, and the operator's audited decisions. Embedded store,
fake clock."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from support.lost_answers import LostAnswers
from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.errors import ConfigurationError, InvalidInput
from tidings.core.model import Intent
from tidings.core.outcomes import Lookup, LookupStatus
from tidings.core.states import TRANSITIONS, State
from tidings.delivery.uncertain import (
    OperatorDecision,
    Policy,
    UncertainPolicy,
    after_lookup,
    on_operator,
    on_policy,
    parse_age,
    policy_for,
)
from tidings.operate import operations
from tidings.operate.readmodel import to_json
from tidings.runtime import Runtime, build_runtime
from tidings.stores.base import Change

T0 = 1_780_000_000.0


@dataclass
class World:
    rt: Runtime
    clock: FakeClock
    provider: LostAnswers

    async def send_all(self, *keys: str) -> None:
        """Given intents for ``keys`` whose sends all lost their answer."""
        await self.rt.notify_many([
            NotifyRequest(key=k, recipient={"id": f"r-{k}", "email": f"{k}@example.com"},
                          channels=["email"], template="t/v1") for k in keys])
        worker = self.rt.worker("email", "w1")
        while await worker.run_once():
            pass

    async def state(self, key: str) -> State:
        intent = await self.rt.store.intent_get(f"{key}:email")
        assert intent is not None
        return intent.state

    async def reconcile(self) -> Any:
        return await self.rt.reconciler().run_pass(now=self.clock.now())

    async def queued(self) -> int:
        depth = await self.rt.transport.depth("email", now=self.clock.now() + 10_000)
        return depth.ready + depth.delayed

    async def events(self, key: str) -> list[Any]:
        return await self.rt.store.events_for(f"{key}:email")


async def open_world(tmp_path: Path, provider: LostAnswers,
                     channel: Mapping[str, Any] | None = None) -> World:
    clock = FakeClock(T0)
    settings = Settings.parse({
        "store": f"sqlite:///{tmp_path / 't.db'}",
        "reconciler": {"uncertain_after_s": 1.0},
        "channels": {"email": dict(channel or {})},
    })
    rt = await build_runtime(settings, clock=clock, providers={"email": provider})
    return World(rt=rt, clock=clock, provider=provider)


Make = Callable[..., Awaitable[World]]


@pytest.fixture
async def make(tmp_path: Path) -> AsyncIterator[Make]:
    """``await make(provider={...}, channel={...})``: a world, closed after the test."""
    opened: list[World] = []

    async def factory(provider: Mapping[str, Any] | None = None,
                      channel: Mapping[str, Any] | None = None) -> World:
        one = await open_world(tmp_path, LostAnswers(**(provider or {})), channel)
        opened.append(one)
        return one

    yield factory
    for one in opened:
        await one.rt.close()


@pytest.fixture
async def world(make: Make) -> World:
    return await make()


def intent(*, updated_at: float = T0, state: State = State.UNCERTAIN) -> Intent:
    return Intent(key="k:email", channel="email", recipient_id="r", address="a@example.com",
                  template="t", data="{}", campaign=None, occurrence=None, state=state,
                  due_at=T0, expires_at=None, created_at=T0, updated_at=updated_at,
                  selected_at=T0, enqueued_at=T0, accepted_at=None, finished_at=None,
                  attempts=1, failures=0, lease_owner=None, lease_token=1,
                  lease_expires_at=None, next_attempt_at=None, receipt=None,
                  provider_request_id=None, disposition=None, reason="no answer",
                  cancel_requested=False)


# ---------------------------------------------------------------- the policy (pure)


def test_the_default_is_lookup_where_the_provider_can_be_asked_and_hold_elsewhere() -> None:
    assert policy_for("email", LostAnswers(supports_lookup=True)).mode is Policy.LOOKUP
    held = policy_for("email", LostAnswers(supports_lookup=False))
    assert held.mode is Policy.HOLD and held.chosen is False
    # resend is never a default, not even where the provider deduplicates
    assert policy_for("email", LostAnswers(deduplicates=True)).mode is Policy.HOLD


@pytest.mark.parametrize(("provider", "settings", "field"), [
    (LostAnswers(), {"mode": "lookup"}, "channels.email.uncertain"),
    (LostAnswers(), {"mode": "resend", "dedupe_window_s": 60.0},
     "channels.email.dedupe_window_s"),
    (LostAnswers(deduplicates=True), {"mode": "hold", "dedupe_window_s": 60.0},
     "channels.email.dedupe_window_s"),
    (LostAnswers(), {"mode": "hold", "lookup_settle_s": 5.0}, "channels.email.lookup_settle_s"),
])
def test_a_policy_the_provider_cannot_honour_names_its_field(
        provider: LostAnswers, settings: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        policy_for("email", provider, **settings)
    assert err.value.field == field


async def test_settings_refuse_lookup_on_a_channel_without_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as err:
        await open_world(tmp_path, LostAnswers(), {"uncertain": "lookup"})
    assert err.value.field == "channels.email.uncertain"


def test_held_is_in_the_table_and_only_evidence_or_an_operator_leave_it() -> None:
    assert TRANSITIONS[State.UNCERTAIN] == {State.ACCEPTED, State.RETRYABLE, State.HELD,
                                            State.DEAD}
    assert TRANSITIONS[State.HELD] == {State.ACCEPTED, State.RETRYABLE, State.DEAD}


LOOKUP = UncertainPolicy(mode=Policy.LOOKUP, hold_s=600.0, lookup_settle_s=30.0)


@pytest.mark.parametrize(("found", "to", "event"), [
    (Lookup.of_accepted("m-1"), State.ACCEPTED, "resolved_accepted"),
    (Lookup.of_failed("m-1", "undeliverable"), State.DEAD, "resolved_failed"),
    (Lookup.of_not_found(), State.RETRYABLE, "resolved_retry"),
])
def test_a_lookup_answer_settles_it(found: Lookup, to: State, event: str) -> None:
    verdict = after_lookup(intent(updated_at=T0), LOOKUP, found, now=T0 + 31)
    assert verdict is not None and (verdict.to, verdict.event) == (to, event)


def test_not_found_is_believed_only_once_the_read_api_had_time_to_show_the_send() -> None:
    assert after_lookup(intent(), LOOKUP, Lookup.of_not_found(), now=T0 + 29) is None


@given(age=st.floats(min_value=0, max_value=10 * 600.0))
def test_an_unknown_lookup_is_never_a_resend(age: float) -> None:
    verdict = after_lookup(intent(), LOOKUP, Lookup.of_unknown("HTTP 503"), now=T0 + age)
    if age < LOOKUP.hold_s:
        assert verdict is None
    else:
        assert verdict is not None and verdict.to is State.HELD
        assert "HTTP 503" in verdict.reason


def test_lookup_status_names_the_four_answers() -> None:
    assert [x.status for x in (Lookup.of_accepted("r"), Lookup.of_failed("r"),
                               Lookup.of_not_found(), Lookup.of_unknown("x"))] == [
        LookupStatus.ACCEPTED, LookupStatus.FAILED, LookupStatus.NOT_FOUND,
        LookupStatus.UNKNOWN]
    assert Lookup(found=True, receipt="r").status is LookupStatus.ACCEPTED  # the old shape


@given(age=st.integers(min_value=0, max_value=1000), window=st.integers(min_value=1, max_value=900),
       lease=st.integers(min_value=0, max_value=120))
def test_resend_where_the_provider_deduplicates_stays_inside_its_window(
        age: int, window: int, lease: int) -> None:
    policy = UncertainPolicy(mode=Policy.RESEND, deduplicates=True, dedupe_window_s=window)
    verdict = on_policy(intent(), policy, now=T0 + age, lease_s=lease)
    assert verdict is not None
    # the send may have started a whole lease before it was recorded uncertain
    assert verdict.to is (State.RETRYABLE if age + lease <= window else State.HELD)


def test_resend_without_deduplication_is_an_explicit_at_least_once() -> None:
    verdict = on_policy(intent(), UncertainPolicy(mode=Policy.RESEND), now=T0 + 9e6,
                        lease_s=30)
    assert verdict is not None and verdict.to is State.RETRYABLE
    assert "at-least-once" in verdict.reason


def test_an_operator_decision_names_who_made_it() -> None:
    verdict = on_operator(OperatorDecision.RESEND, who="ana", note="checked the inbox")
    assert verdict.to is State.RETRYABLE and verdict.event == "operator_resend"
    assert verdict.reason == "resend by ana: checked the inbox"


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("15m", 900),
                                                ("2h", 7200), ("1d", 86400), (" 1.5H ", 5400)])
def test_an_age_reads_seconds_minutes_hours_days(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


@given(st.text(max_size=8))
def test_an_age_is_a_number_or_a_clear_error(text: str) -> None:
    try:
        value = parse_age(text, "--older-than")
    except InvalidInput as exc:
        assert exc.field == "--older-than"
    else:
        assert value >= 0 and math.isfinite(value)


# ---------------------------------------------------------------- the reconciler


async def test_without_a_lookup_a_lost_answer_is_held_and_never_resent(world: World) -> None:
    # given a send whose answer was lost, on a provider that cannot be asked
    await world.send_all("a")
    assert await world.state("a") is State.UNCERTAIN and world.provider.sent == ["a:email"]

    # when the reconciler runs, again and again, far past hold_s
    world.clock.advance(2)
    first = await world.reconcile()
    for _ in range(5):
        world.clock.advance(3600)
        last = await world.reconcile()
        worker = world.rt.worker("email", "w2")
        while await worker.run_once():
            pass

    # then it is held, awaiting an operator, and was sent exactly once
    assert first.uncertain_held == 1 and first.uncertain_retried == 0
    assert await world.state("a") is State.HELD
    assert last.awaiting_operator == 1
    assert world.provider.sent == ["a:email"]
    assert await world.queued() == 0
    [held] = [e for e in await world.events("a") if e.type == "held"]
    assert held.worker == "reconciler" and "webhook" in (held.detail or "")


async def test_an_expired_lease_is_uncertain_then_held_never_retried(world: World) -> None:
    # given a worker that claimed, started its send (maybe sent), and died holding its lease
    await world.rt.notify_many([NotifyRequest(
        key="b", recipient={"id": "r", "email": "b@example.com"}, channels=["email"],
        template="t/v1")])
    [claim] = await world.rt.store.intent_claim_many(["b:email"], owner="dead-worker",
                                                     lease_s=30, now=world.clock.now())
    assert claim.token is not None
    assert await world.rt.store.intent_mark_started(
        [("b:email", claim.token)], owner="dead-worker", now=world.clock.now()) == {"b:email"}

    # when its lease expires and the reconciler sweeps twice
    world.clock.advance(31)
    swept = await world.reconcile()
    world.clock.advance(2)
    settled = await world.reconcile()

    # then it became uncertain, then held: a provider without a lookup is never retried
    assert swept.leases_expired == 1 and await world.state("b") is not State.RETRYABLE
    assert swept.leases_released == 0
    assert settled.uncertain_held == 1 and await world.state("b") is State.HELD


async def test_an_expired_lease_with_no_send_started_is_released_and_sent_once(
        world: World) -> None:
    # given a worker that claimed two intents and died before either send started
    await world.rt.notify_many([NotifyRequest(
        key=k, recipient={"id": f"r-{k}", "email": f"{k}@example.com"}, channels=["email"],
        template="t/v1") for k in ("u", "v")])
    claims = await world.rt.store.intent_claim_many(["u:email", "v:email"],
                                                    owner="dead-worker", lease_s=30,
                                                    now=world.clock.now())
    assert all(c.token is not None for c in claims)

    # when its leases expire and the reconciler sweeps
    world.clock.advance(31)
    swept = await world.reconcile()

    # then both are released, not uncertain: nothing can have left, no operator needed
    assert (swept.leases_expired, swept.leases_released) == (2, 2)
    assert [await world.state(k) for k in ("u", "v")] == [State.RETRYABLE] * 2
    [released] = [e for e in await world.events("u") if e.type == "released"]
    assert released.worker == "reconciler" and "no send had started" in (released.detail or "")
    # and a live worker sends each once when its message comes back (this provider
    # loses every answer, so each send is uncertain now: a send that did start)
    assert world.provider.sent == []
    world.clock.advance(3600)
    worker = world.rt.worker("email", "w2")
    while await worker.run_once():
        pass
    assert sorted(world.provider.sent) == ["u:email", "v:email"]
    assert [await world.state(k) for k in ("u", "v")] == [State.UNCERTAIN] * 2


async def test_a_failing_lookup_waits_then_holds_never_resends(make: Make) -> None:
    world = await make(provider={"supports_lookup": True, "raises": True},
                   channel={"hold_s": 600})
    await world.send_all("c")
    world.clock.advance(2)
    waiting = await world.reconcile()
    assert waiting.uncertain_waiting == 1 and await world.state("c") is State.UNCERTAIN

    world.clock.advance(600)
    held = await world.reconcile()

    assert held.uncertain_held == 1 and await world.state("c") is State.HELD
    assert world.provider.sent == ["c:email"] and len(world.provider.asked) == 2
    assert await world.queued() == 0


async def test_a_lookup_that_never_answers_is_cut_off_and_the_pass_goes_on(make: Make) -> None:
    # given an uncertain send whose provider's lookups hang, and a lease that expired
    world = await make(provider={"supports_lookup": True, "hangs": True},
                       channel={"provider": {"timeout_s": 0.01}})
    await world.send_all("c")
    await world.rt.notify_many([NotifyRequest(
        key="gone", recipient={"id": "r-gone", "email": "gone@example.com"},
        channels=["email"], template="t/v1")])
    [gone] = await world.rt.store.intent_claim_many(["gone:email"], owner="dead-worker",
                                                    lease_s=1.0, now=world.clock.now())
    assert gone.token is not None
    await world.rt.store.intent_mark_started([("gone:email", gone.token)], owner="dead-worker",
                                             now=world.clock.now())
    world.clock.advance(2)

    # when the reconciler runs a pass: the lookup is cut off at the send deadline
    # (3 x 0.01 s), and the rest of the pass still happens
    result = await asyncio.wait_for(world.reconcile(), timeout=30)

    assert result.uncertain_waiting == 1 and await world.state("c") is State.UNCERTAIN
    assert result.leases_expired == 1 and await world.state("gone") is State.UNCERTAIN
    assert world.provider.asked == ["c:email"] and world.provider.sent == ["c:email"]


async def test_a_lookup_settles_accepted_failed_and_not_found(make: Make) -> None:
    world = await make(provider={"supports_lookup": True})
    world.provider.answers = {"d1:email": Lookup.of_accepted("pm-1"),
                              "d2:email": Lookup.of_failed("pm-2", "invalid number")}
    await world.send_all("d1", "d2", "d3")
    world.clock.advance(2)

    result = await world.reconcile()

    assert (result.uncertain_accepted, result.uncertain_failed,
            result.uncertain_retried) == (1, 1, 1)
    accepted = await world.rt.store.intent_get("d1:email")
    assert accepted is not None and accepted.receipt == "pm-1"
    assert await world.state("d2") is State.DEAD
    assert await world.state("d3") is State.RETRYABLE and await world.queued() == 1


async def test_resend_happens_only_inside_the_providers_dedupe_window(make: Make) -> None:
    world = await make(provider={"deduplicates": True, "dedupe_window_s": 60.0},
                   channel={"uncertain": "resend"})
    await world.send_all("e1")
    world.clock.advance(2)
    inside = await world.reconcile()  # 2 s + the 30 s lease <= 60 s
    world.clock.advance(1)  # the resend's backoff: its uncertain answer was a failure
    await world.send_all("e2")
    world.clock.advance(40)
    outside = await world.reconcile()  # 40 s + 30 s > 60 s

    # e1 was resent inside the window (and lost again); past it, neither is resent
    assert inside.uncertain_retried == 1 and world.provider.sent.count("e1:email") == 2
    assert outside.uncertain_held == 2 and outside.uncertain_retried == 0
    assert await world.state("e1") is State.HELD and await world.state("e2") is State.HELD


# ---------------------------------------------------------------- the operator


async def test_an_operator_settles_held_intents_each_decision_audited(world: World) -> None:
    await world.send_all("f1", "f2", "f3")
    world.clock.advance(2)
    await world.reconcile()
    rt = world.rt

    accepted = await operations.uncertain_resolve(
        rt.store, rt.transport, decision="accepted", who="ana", now=world.clock.now(),
        keys=["f1:email", "missing:email", "f1:email"], note="in the provider console")
    resent = await operations.uncertain_resolve(
        rt.store, rt.transport, decision="resend", who="ben", now=world.clock.now(),
        keys=["f2:email", "f1:email"])

    assert [r["key"] for r in accepted.resolved] == ["f1:email"]
    assert accepted.skipped == [{"key": "missing:email", "why": "no intent has this key"}]
    assert resent.skipped == [{"key": "f1:email", "why": "is accepted, not uncertain or held"}]
    assert await world.state("f1") is State.ACCEPTED
    assert await world.state("f2") is State.RETRYABLE and await world.queued() == 1
    [decided] = [e for e in await world.events("f1") if e.type == "operator_accepted"]
    assert decided.worker == "operator:ana"
    assert decided.detail == "accepted by ana: in the provider console"

    # the resend goes out once, under the same key; the third stays held
    worker = rt.worker("email", "w2")
    while await worker.run_once():
        pass
    assert world.provider.sent.count("f2:email") == 2
    assert await world.state("f3") is State.HELD


async def test_an_operator_settles_a_selection_by_channel_and_age(world: World) -> None:
    await world.send_all("g1")
    world.clock.advance(2)
    await world.reconcile()
    world.clock.advance(7200)
    await world.send_all("g2")
    world.clock.advance(2)
    await world.reconcile()
    rt = world.rt

    listed = await operations.uncertain_list(rt.store, rt.uncertain_policies(),
                                             now=world.clock.now(), older_than_s=3600)
    result = await operations.uncertain_resolve(
        rt.store, rt.transport, decision="failed", who="ana", now=world.clock.now(),
        channel="email", older_than_s=3600)

    assert [r.key for r in listed] == ["g1:email"] and listed[0].awaiting_operator
    assert [r["key"] for r in result.resolved] == ["g1:email"]
    assert await world.state("g1") is State.DEAD and await world.state("g2") is State.HELD


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"decision": "maybe"}, "as"),
    ({"who": "  "}, "by"),
    ({"who": "a\x00b"}, "by"),
    ({"keys": ["k"], "channel": "email"}, "keys"),
    ({"keys": None}, "keys"),
])
async def test_a_bad_decision_names_its_field(world: World, kwargs: dict[str, Any],
                                              field: str) -> None:
    args: dict[str, Any] = {"decision": "accepted", "who": "ana", "keys": ["k"], **kwargs}
    with pytest.raises(InvalidInput) as err:
        await operations.uncertain_resolve(world.rt.store, world.rt.transport,
                                           now=world.clock.now(), **args)
    assert err.value.field == field


async def test_status_and_plan_show_the_policy_and_the_counts(world: World) -> None:
    await world.send_all("h1", "h2")
    world.clock.advance(2)
    await world.reconcile()
    world.clock.advance(3601)
    await world.send_all("h3")

    counts = await operations.uncertain_counts(world.rt.store, world.rt.uncertain_policies(),
                                               now=world.clock.now())

    email = counts["email"]
    assert (email.uncertain, email.held, email.awaiting_operator) == (1, 2, 2)
    assert email.policy.mode is Policy.HOLD and not email.policy.chosen
    assert to_json(email) == {"policy": "hold", "default": True, "hold_s": 3600.0,
                              "uncertain": 1, "held": 2, "awaiting_operator": 2}


async def test_a_stale_verdict_never_settles_a_newer_uncertain_send(make: Make) -> None:
    # given a send whose answer was lost, on a provider that can be asked
    world = await make(provider={"supports_lookup": True})
    await world.send_all("s")
    key = "s:email"
    store = world.rt.store
    world.clock.advance(2)
    asked = world.provider.lookup

    async def slow_lookup(k: str) -> Lookup:
        # while this sweep waits for its lookup, another sweep resent the intent and the
        # resend's answer was lost too: it is uncertain again, about a newer send
        now = world.clock.now()
        assert await store.intent_apply_many([Change(
            key=key, from_state=State.UNCERTAIN, to_state=State.RETRYABLE,
            event="resolved_retry", next_attempt_at=now)], now=now) == [key]
        [claim] = await store.intent_claim_many([key], owner="w9", lease_s=30, now=now)
        assert await store.intent_apply_many([Change(
            key=key, from_state=State.CLAIMED, to_state=State.UNCERTAIN, event="uncertain",
            lease_token=claim.token)], now=now) == [key]
        return await asked(k)  # not found: it says nothing of the newer send

    world.provider.lookup = slow_lookup  # type: ignore[method-assign]

    # when the first sweep comes back with "not found"
    result = await world.reconcile()

    # then its verdict is not applied to the newer send: nothing is resent
    assert result.uncertain_retried == 0 and await world.queued() == 0
    assert await world.state("s") is State.UNCERTAIN


async def test_a_message_for_a_held_intent_is_acked_without_a_send(world: World) -> None:
    await world.send_all("m")
    world.clock.advance(2)
    await world.reconcile()
    assert await world.state("m") is State.HELD

    # a stray copy of its message (a duplicate publication, a redelivery)
    from tidings.admission.relay import publish

    await publish(world.rt.transport, [("m:email", "email", world.clock.now(), 0)],
                  now=world.clock.now())
    worker = world.rt.worker("email", "w3")
    while await worker.run_once():
        pass

    assert world.provider.sent == ["m:email"] and await world.queued() == 0
    assert await world.state("m") is State.HELD


# ---------------------------------------------------------------- a plug-in's faults


class WrongAnswers(LostAnswers):
    """A plug-in whose lookup answers a string for one key and raises CancelledError
    (while nothing cancelled it) for another."""

    async def lookup(self, key: str) -> Lookup:
        self.asked.append(key)
        if key.startswith("str"):
            return "accepted"  # type: ignore[return-value]
        if key.startswith("cancel"):
            raise asyncio.CancelledError()
        return Lookup.of_accepted("found-it")


async def test_a_lookup_that_answers_wrong_or_raises_cancelled_spoils_only_its_own_key(
        tmp_path: Path) -> None:
    world = await open_world(tmp_path, WrongAnswers(supports_lookup=True))
    try:
        await world.send_all("str-1", "cancel-1", "good-1")
        world.clock.advance(2)

        result = await world.reconcile()  # completes: no AttributeError, no cancellation

        assert result.uncertain_accepted == 1 and await world.state("good-1") is State.ACCEPTED
        assert await world.state("str-1") is State.UNCERTAIN  # unknown: asked again later
        assert await world.state("cancel-1") is State.UNCERTAIN
    finally:
        await world.rt.close()


async def test_a_provider_that_never_answers_for_sure_is_not_sent_to_for_ever(
        tmp_path: Path) -> None:
    # every answer lost, every lookup "not found": each uncertain answer is a failure,
    # each resend waits its backoff, and the budget (5) ends it
    world = await open_world(tmp_path, LostAnswers(supports_lookup=True))
    try:
        await world.send_all("n-1")
        resend_dues = []
        for _ in range(12):
            world.clock.advance(301)  # past uncertain_after_s and any backoff (cap 300 s)
            await world.reconcile()
            intent = await world.rt.store.intent_get("n-1:email")
            assert intent is not None
            if intent.state is State.RETRYABLE:
                assert intent.next_attempt_at is not None
                resend_dues.append(intent.next_attempt_at - world.clock.now())
            world.clock.advance(301)
            await world.send_all()

        assert await world.state("n-1") is State.DEAD
        assert world.provider.sent.count("n-1:email") == 5
        # five lookups said "not found"; the fifth resend is refused by the spent budget
        assert len(resend_dues) == 5 and all(0 <= d <= 300 for d in resend_dues)
    finally:
        await world.rt.close()
