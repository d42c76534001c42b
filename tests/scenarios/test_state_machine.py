"""A stateful property test of the delivery core.

Hypothesis drives the real worker, reconciler, SQLite store and SQL transport on a fake
clock through random interleavings of: intents created, workers run, provider answers
scripted (accepted, 429 with and without Retry-After, 5xx, 4xx, uncertain with and
without the provider having accepted), time passing beyond leases, workers dying after
their claim or after their send, reconciler sweeps, cancels, provider events after
acceptance and operator redrives of dead intents.

After every step it checks:

- the audit trail of every key is a path through ``states.TRANSITIONS`` that ends at
  the ledger's state, so no key ever holds two live leases (claimed -> claimed is not
  a transition) and leases are cleared on the way out of ``claimed``;
- terminal states are absorbing: accepted stays in the accepted family (provider
  events only); rejected, cancelled and expired never change;
- failures never exceed the retry budget;
- no send under a stale lease: at every send the token the worker holds is the intent's
  current token, the worker owns the lease, and it has not expired (fake time);
- the sandbox (the judge) never accepted a key twice, and every key the ledger calls
  accepted is one the sandbox accepted, with the same receipt.

The ``settle`` step then checks liveness: with a healthy provider every intent reaches a
terminal state, and a key the sandbox accepted always ends in the accepted family.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import shutil
import tempfile
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.errors import KeyConflict, TidingsError
from tidings.core.model import Message, SendRequest
from tidings.core.outcomes import (
    Accepted,
    Lookup,
    Outcome,
    Permanent,
    RateLimited,
    Transient,
    Uncertain,
)
from tidings.core.states import ACCEPTED_FAMILY, DONE, TRANSITIONS, State
from tidings.runtime import Runtime, build_runtime
from tidings.sandbox import SandboxConfig, SandboxCore
from tidings.stores.base import Change, Claim, ClaimKind

T = TypeVar("T")

T0 = 1_780_000_000.0
EMAIL = "email"
KEYS = 5
MAX_FAILURES = 2
LEASE_S = 30.0
VISIBILITY_S = 60.0
#: Events that record something without moving the intent's state.
NOT_TRANSITIONS = frozenset(
    {"duplicate_observed", "discarded", "lease_lost", "cancel_requested", "republished"})
#: Standing fates under which an intent still reaches a terminal state.
FINISHING = frozenset({"accepted", "transient", "permanent", "uncertain_accepted"})
#: Once in one of these, an intent never leaves it (the accepted family aside).
ABSORBING = frozenset({State.REJECTED, State.CANCELLED, State.EXPIRED})
OUTCOMES = ("accepted", "rate_limited", "rate_limited_long", "rate_limited_bare", "transient",
            "permanent", "uncertain_accepted", "uncertain_lost")


class Crash(Exception):
    """The worker process died here."""


@dataclass(frozen=True, kw_only=True)
class SendRecord:
    """What the ledger said about a key at the moment a worker sent it."""

    key: str
    worker: str | None
    held_token: int | None
    at: float
    state: State
    owner: str | None
    token: int
    lease_expires_at: float | None


class ScriptedProvider:
    """A provider whose answers the state machine chooses; acceptances go to the sandbox.

    A send is answered by the next scripted outcome, else by its key's standing fate
    (e.g. an address that keeps failing), else accepted. Every send is recorded with
    the lease its worker held and the ledger's view at that fake instant.
    """

    name = "scripted"
    supports_lookup = True

    def __init__(self, core: SandboxCore, clock: FakeClock) -> None:
        self.core = core
        self.clock = clock
        self.script: list[str] = []
        self.fates: dict[str, str] = {}
        self.sends: list[SendRecord] = []
        self.runtime: Runtime | None = None
        self.held: dict[tuple[str, str], int] = {}

    def calm(self) -> dict[str, str]:
        """Drop the fates that would never let an intent finish (429s, timeouts); keep
        failing and rejecting addresses. Returns the fates to restore afterwards."""
        fates = self.fates
        self.fates = {k: f for k, f in fates.items() if f in FINISHING}
        self.script.clear()
        return fates

    async def send_as(self, worker: str, request: SendRequest) -> Outcome:
        at = self.clock.now()
        held = self.held.get((worker, request.key))
        kind = self.script.pop(0) if self.script else self.fates.get(request.key, "accepted")
        assert self.runtime is not None
        intent = await self.runtime.store.intent_get(request.key)
        assert intent is not None
        self.sends.append(SendRecord(
            key=request.key, worker=worker, held_token=held, at=at, state=intent.state,
            owner=intent.lease_owner, token=intent.lease_token,
            lease_expires_at=intent.lease_expires_at))
        if kind in ("accepted", "uncertain_accepted"):
            answer = self.core.handle(EMAIL, request.key, request.to)
            assert answer.receipt is not None, answer
            if kind == "accepted":
                return Accepted(receipt=answer.receipt, request_id=answer.request_id)
            return Uncertain(reason="reply lost", request_id=answer.request_id)
        if kind == "rate_limited":
            return RateLimited(retry_after_s=2.0)
        if kind == "rate_limited_long":
            # Longer than a lease: whoever waits for the pacer outlives its lease.
            return RateLimited(retry_after_s=LEASE_S * 1.5)
        if kind == "rate_limited_bare":
            return RateLimited(retry_after_s=None)
        if kind == "transient":
            return Transient(reason="HTTP 503")
        if kind == "permanent":
            return Permanent(reason="HTTP 422")
        return Uncertain(reason="timed out before the provider accepted it")

    async def send(self, request: SendRequest) -> Outcome:
        raise AssertionError("workers send through a WorkerProvider")

    async def lookup(self, key: str) -> Lookup:
        found = self.core.lookup(key, EMAIL)
        return Lookup(found=True, receipt=found[1]) if found else Lookup(found=False)

    async def close(self) -> None:
        return None


class WorkerProvider:
    """The provider as one worker process uses it: its sends are attributed to it."""

    def __init__(self, shared: ScriptedProvider, worker: str) -> None:
        self.shared = shared
        self.worker = worker
        self.name = shared.name
        self.supports_lookup = shared.supports_lookup

    async def send(self, request: SendRequest) -> Outcome:
        return await self.shared.send_as(self.worker, request)

    async def lookup(self, key: str) -> Lookup:
        return await self.shared.lookup(key)

    async def close(self) -> None:
        return None


class WorkerStore:
    """The store as one worker process sees it: records its claims, and can die at commit."""

    def __init__(self, inner: Any, provider: ScriptedProvider, *, crash_at_commit: bool) -> None:
        self.inner = inner
        self.provider = provider
        self.crash_at_commit = crash_at_commit

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def intent_claim_many(self, keys: Sequence[str], **kw: Any) -> list[Claim]:
        claims: list[Claim] = await self.inner.intent_claim_many(keys, **kw)
        for claim in claims:
            if claim.kind is ClaimKind.CLAIMED:
                assert claim.token is not None
                self.provider.held[(kw["owner"], claim.key)] = claim.token
        return claims

    async def intent_apply_many(self, changes: Sequence[Change], **kw: Any) -> list[str]:
        if self.crash_at_commit:
            raise Crash("died after its sends, before committing their outcomes")
        applied: list[str] = await self.inner.intent_apply_many(changes, **kw)
        return applied


class DeliveryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(tempfile.mkdtemp(prefix="tidings-sm-"))
        self.clock = FakeClock(T0, auto_advance=True)
        self.core = SandboxCore(SandboxConfig(dedupe=False), now=self.clock.now, seed=0)
        self.provider = ScriptedProvider(self.core, self.clock)
        self.ids = itertools.count()
        self.absorbed: dict[str, State] = {}
        self.asked: dict[str, float | None] = {}  # each key's expiry, as first notified
        data = {
            "store": f"sqlite:///{self.dir / 'sm.db'}",
            "channels": {EMAIL: {"max_in_flight": 1000}},
            # Short backoff: a retry is due by the next worker run (timing is the
            # checklist's business; this machine is about states and leases).
            "retry": {"max_failures": MAX_FAILURES, "base_s": 0.02, "cap_s": 0.02},
            "worker": {"lease_s": LEASE_S, "visibility_s": VISIBILITY_S, "max_receives": 1000},
        }
        self.rt = self.run(build_runtime(Settings.parse(data), clock=self.clock,
                                         providers={EMAIL: self.provider},
                                         rng=random.Random(0)))
        self.provider.runtime = self.rt

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout=20))

    def teardown(self) -> None:
        try:
            self.run(self.rt.close())
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
        finally:
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # ---------------------------------------------------------------- helpers

    def key(self, i: int) -> str:
        return f"k{i}:{EMAIL}"

    def worker(self, *, crash_at_commit: bool = False) -> Any:
        """A new worker process; it starts a moment after the previous one."""
        self.clock.advance(0.05)
        w = self.rt.worker(EMAIL, f"w{next(self.ids)}")
        w.store = WorkerStore(self.rt.store, self.provider, crash_at_commit=crash_at_commit)
        w.provider = WorkerProvider(self.provider, w.worker_id)
        return w

    # ---------------------------------------------------------------- rules

    @initialize(expiring=st.lists(st.booleans(), min_size=KEYS - 1, max_size=KEYS - 1),
                failing=st.sets(st.integers(0, KEYS - 1), max_size=2),
                fates=st.dictionaries(st.integers(0, KEYS - 1), st.sampled_from(OUTCOMES),
                                      max_size=2))
    def intents_on_the_queue(self, expiring: list[bool], failing: set[int],
                             fates: dict[int, str]) -> None:
        """All keys but the last exist from the start, some with a freshness deadline;
        some addresses keep failing (5xx), and some keys have another standing fate."""
        for i, expires in enumerate(expiring):
            self.notify(i, expires)
        for i in failing:
            self.address_keeps_failing(i)
        for i, fate in fates.items():
            self.provider_mood(i, fate)

    @rule(i=st.integers(0, KEYS - 1), expiring=st.booleans())
    def notify(self, i: int, expiring: bool) -> None:
        """A new intent, a repeated notify of an existing key (a no-op, answered
        existing), or another request under it (another expiry: refused, nothing
        written)."""
        key = f"k{i}"
        expires_at = self.clock.now() + 120 if expiring else None
        repeat = key in self.asked and (self.asked[key] is None) == (expires_at is None)
        if repeat:
            expires_at = self.asked[key]
            if expires_at is not None and expires_at <= self.clock.now():
                return  # a deadline already past is bad input, not a repeat

        def call() -> Any:
            return self.rt.notify(key=key, recipient={"id": f"c{i}", "email": f"c{i}@x.io"},
                                  channels=[EMAIL], template="t", expires_at=expires_at)

        if key in self.asked and not repeat:
            with contextlib.suppress(KeyConflict):
                self.run(call())
                raise AssertionError(f"another expiry under {key!r} was not refused")
            return
        made = self.run(call())
        assert (made.existing if repeat else made.created) == tuple(made)
        self.asked[key] = expires_at

    @rule(outcomes=st.lists(st.sampled_from(OUTCOMES), max_size=KEYS))
    def claim_and_send(self, outcomes: list[str]) -> None:
        """A worker receives a batch and handles it completely; the provider answers the
        sends in order with ``outcomes`` (then accepts)."""
        self.provider.script[:] = outcomes
        self.run(self.worker().run_once())
        self.provider.script.clear()

    @rule(outcomes=st.lists(st.sampled_from(OUTCOMES), max_size=KEYS))
    def race(self, outcomes: list[str]) -> None:
        """Two workers and a reconciler sweep at once (one event loop, one store)."""
        self.provider.script[:] = outcomes
        first, second = self.worker(), self.worker()

        async def together() -> None:
            await asyncio.gather(first.run_once(), second.run_once(),
                                 self.rt.reconciler().run_pass(now=self.clock.now()))

        self.run(together())
        self.provider.script.clear()

    @rule(i=st.integers(0, KEYS - 1), fate=st.sampled_from((None, *OUTCOMES)))
    def provider_mood(self, i: int, fate: str | None) -> None:
        """From now on the provider answers every send of this key the same way."""
        if fate is None:
            self.provider.fates.pop(self.key(i), None)
        else:
            self.provider.fates[self.key(i)] = fate

    @rule(i=st.integers(0, KEYS - 1))
    def address_keeps_failing(self, i: int) -> None:
        """Every send to this key's address gets a 503 from now on."""
        self.provider.fates[self.key(i)] = "transient"

    @rule(seconds=st.sampled_from([0.5, 3.0, LEASE_S + 1, VISIBILITY_S + 1, 301.0]))
    def time_passes(self, seconds: float) -> None:
        """Includes running past a lease, and past a message's visibility timeout."""
        self.clock.advance(seconds)

    @rule()
    def crash_after_claim(self) -> None:
        """A worker claims a batch, then dies before sending anything."""
        w = self.worker()
        batch = self.run(self.rt.transport.receive(EMAIL, max_messages=10,
                                                   visibility_s=VISIBILITY_S,
                                                   now=self.clock.now()))
        keys = [Message.decode(r.body).key for r in batch]
        if keys:
            self.run(w.store.intent_claim_many(keys, owner=w.worker_id, lease_s=LEASE_S,
                                               now=self.clock.now(),
                                               message_ids=[r.message_id for r in batch]))

    @rule(outcomes=st.lists(st.sampled_from(OUTCOMES), max_size=KEYS))
    def crash_after_send(self, outcomes: list[str]) -> None:
        """A worker sends its batch, then dies before committing any outcome."""
        self.provider.script[:] = outcomes
        w = self.worker(crash_at_commit=True)
        with contextlib.suppress(Crash):
            self.run(w.run_once())
        self.provider.script.clear()

    @rule()
    def reconcile(self) -> None:
        self.run(self.rt.reconciler().run_pass(now=self.clock.now()))

    @rule()
    def redrive_dead(self) -> None:
        """An operator puts dead intents and their dead letters back."""
        now = self.clock.now()
        dead = self.run(self.rt.store.intent_find(states=[State.DEAD]))
        changes = [Change(key=i.key, from_state=State.DEAD, to_state=State.RETRYABLE,
                          event="redriven", next_attempt_at=now, reset_failures=True,
                          reason="operator redrive") for i in dead]
        applied = set(self.run(self.rt.store.intent_apply_many(changes, now=now)))
        letters = self.run(self.rt.transport.dead_letters(EMAIL, limit=1000))
        ids = [d.id for d in letters if d.message_id in applied]
        self.run(self.rt.transport.redrive(EMAIL, ids, now=now))

    @rule(i=st.integers(0, KEYS - 1))
    def cancel(self, i: int) -> None:
        with contextlib.suppress(TidingsError):  # not created yet
            self.run(self.rt.cancel(self.key(i)))

    @rule(i=st.integers(0, KEYS - 1),
          event=st.sampled_from([State.DELIVERED, State.BOUNCED, State.COMPLAINED]))
    def provider_event(self, i: int, event: State) -> None:
        intent = self.run(self.rt.store.intent_get(self.key(i)))
        if intent is None or event not in TRANSITIONS[intent.state]:
            return
        self.run(self.rt.store.intent_apply_many(
            [Change(key=intent.key, from_state=intent.state, to_state=event,
                    event=event.value)], now=self.clock.now()))

    @rule()
    def settle(self) -> None:
        """Liveness: once the provider stops refusing for good, sweeps and workers finish
        every intent, and the ledger and the sandbox agree on which were accepted."""
        fates = self.provider.calm()
        for _ in range(40):
            self.run(self.worker().run_once())
            self.run(self.rt.reconciler().run_pass(now=self.clock.now()))
            intents = self.run(self.rt.store.intent_find(states=list(State)))
            if all(i.state in DONE for i in intents):
                break
            self.clock.advance(LEASE_S + 1)
        else:
            raise AssertionError(f"not settled: {[(i.key, i.state) for i in intents]}")
        for intent in intents:
            accepted = self.core.lookup(intent.key, EMAIL) is not None
            assert accepted == (intent.state in ACCEPTED_FAMILY), (intent.key, intent.state)
        self.provider.fates = fates

    # ---------------------------------------------------------------- invariants

    @invariant()
    def trail_is_a_path_through_the_transition_table(self) -> None:
        for i in range(KEYS):
            intent = self.run(self.rt.store.intent_get(self.key(i)))
            if intent is None:
                continue
            events = self.run(self.rt.store.events_for(intent.key))
            path = [State(e.state) for e in events if e.type not in NOT_TRANSITIONS]
            types = [e.type for e in events]
            # Born selected, or enqueued when admission queued its message in the same
            # transaction.
            assert path[0] in (State.SELECTED, State.ENQUEUED), types
            for before, after in itertools.pairwise(path):
                assert after in TRANSITIONS[before], (intent.key, before, after, types)
            assert path[-1] is intent.state, (intent.key, types)
            if intent.state is State.CLAIMED:
                assert intent.lease_owner is not None and intent.lease_expires_at is not None
            else:
                assert intent.lease_owner is None and intent.lease_expires_at is None

    @invariant()
    def terminal_states_are_absorbing(self) -> None:
        for i in range(KEYS):
            intent = self.run(self.rt.store.intent_get(self.key(i)))
            if intent is None:
                continue
            before = self.absorbed.get(intent.key)
            if before in ACCEPTED_FAMILY:
                assert intent.state in ACCEPTED_FAMILY, (intent.key, before, intent.state)
                assert intent.accepted_at is not None and intent.receipt is not None
            elif before is not None:
                assert intent.state is before, (intent.key, before, intent.state)
            if intent.state in ACCEPTED_FAMILY or intent.state in ABSORBING:
                self.absorbed[intent.key] = intent.state

    @invariant()
    def failures_stay_within_the_retry_budget(self) -> None:
        for intent in self.run(self.rt.store.intent_find(states=list(State))):
            assert 0 <= intent.failures <= MAX_FAILURES, (intent.key, intent.failures)
            if intent.state is State.DEAD:
                assert intent.failures == MAX_FAILURES

    @invariant()
    def no_send_under_a_stale_lease(self) -> None:
        for sent in self.provider.sends:
            assert sent.state is State.CLAIMED, sent
            assert sent.owner == sent.worker, sent
            assert sent.held_token == sent.token, sent
            assert sent.lease_expires_at is not None and sent.at < sent.lease_expires_at, sent

    @invariant()
    def the_sandbox_accepted_each_key_at_most_once_and_agrees_with_the_ledger(self) -> None:
        stats = self.core.stats()["channels"].get(EMAIL, {})
        assert stats.get("keys_accepted_twice", 0) == 0, stats.get("keys_accepted_twice_sample")
        for intent in self.run(self.rt.store.intent_find(states=list(ACCEPTED_FAMILY))):
            found = self.core.lookup(intent.key, EMAIL)
            assert found is not None and found[1] == intent.receipt, intent.key


DeliveryMachine.TestCase.settings = settings(
    max_examples=30, stateful_step_count=30, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestDeliveryMachine = DeliveryMachine.TestCase
