"""Failover (``tidings.core.failover``, ``tidings.delivery.failover``): a send moves to
the next provider only on proof that the one before did not accept it; each provider
is tried at most once per send; a provider taken out comes back through one probe at a
time; a lookup finds a key on whichever provider has it."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.errors import ConfigurationError
from tidings.core.failover import (
    Circuit,
    CircuitRule,
    CircuitState,
    proves_not_accepted,
    provider_said,
    providers_key,
)
from tidings.core.model import SendRequest
from tidings.core.outcomes import (
    Accepted,
    Lookup,
    Outcome,
    Permanent,
    RateLimited,
    Transient,
    Uncertain,
)
from tidings.core.policy import RetryPolicy
from tidings.core.states import State, decide
from tidings.delivery.failover import FailoverProvider
from tidings.delivery.pacing import MemoryPacerBackend, PaceLimits, Pacer
from tidings.operate import operations
from tidings.operate.snapshot import snapshot
from tidings.stores.sqlite import SqliteStore
from tidings.transports.sqlite import SqliteTransport

RULE = CircuitRule(failures_to_open=3, window_s=10.0, open_s=15.0)


class Scripted:
    """A provider that answers from a script (the last answer repeats) and counts."""

    supports_lookup = True

    def __init__(self, name: str, answers: Sequence[Outcome],
                 found: Lookup | None = None) -> None:
        self.name = name
        self.answers = list(answers)
        self.sent: list[str] = []
        self.found = found or Lookup.of_not_found()
        self.asked: list[str] = []

    async def send(self, request: SendRequest) -> Outcome:
        self.sent.append(request.key)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    async def lookup(self, key: str) -> Lookup:
        self.asked.append(key)
        return self.found

    async def close(self) -> None:
        return None


def request(n: int = 0) -> SendRequest:
    return SendRequest(key=f"k{n}", channel="email", to=f"r{n}@example.com", recipient_id=f"r{n}",
                       template="t/v1", data={})


REFUSED = Transient(reason="request not sent: ConnectError")
OK = Accepted(receipt="r-1")


def failover(*providers: Scripted, clock: FakeClock | None = None) -> FailoverProvider:
    return FailoverProvider([(p.name, p) for p in providers], rule=RULE,
                            clock=clock or FakeClock(start=1000.0))


def test_only_a_transient_answer_proves_non_acceptance() -> None:
    assert proves_not_accepted(REFUSED)
    for outcome in (OK, Uncertain(reason="read timeout"), RateLimited(retry_after_s=1.0),
                    Permanent(reason="HTTP 422")):
        assert not proves_not_accepted(outcome)


def test_the_circuit_opens_on_failures_within_its_window_and_not_on_spread_ones() -> None:
    spread = Circuit(RULE)
    for t in (0.0, 11.0, 22.0, 33.0):  # never three within 10 s
        spread.failed(t)
    assert spread.state(33.0) is CircuitState.CLOSED

    burst = Circuit(RULE)
    for t in (0.0, 1.0, 2.0):
        burst.failed(t)
    assert burst.state(2.0) is CircuitState.OPEN and not burst.take(16.9)
    # after open_s, one probe at a time
    assert burst.state(17.0) is CircuitState.HALF_OPEN
    assert burst.take(17.0) and not burst.take(17.0)
    burst.failed(17.5)  # the probe failed: out for another open_s
    assert burst.state(18.0) is CircuitState.OPEN and burst.opened == 2
    assert burst.take(32.5)
    burst.answered(32.6)  # the probe's answer brings it back
    assert burst.state(32.6) is CircuitState.CLOSED and burst.take(32.6) and burst.take(32.6)


def test_a_probe_whose_answer_was_lost_leaves_the_circuit_half_open_for_another() -> None:
    circuit = Circuit(RULE)
    for t in (0.0, 0.1, 0.2):
        circuit.failed(t)
    assert circuit.take(20.0)
    circuit.gave_up()
    assert circuit.state(20.0) is CircuitState.HALF_OPEN and circuit.take(20.1)


async def test_a_refused_send_goes_on_at_once_and_the_fallback_is_named() -> None:
    a, b = Scripted("a", [REFUSED]), Scripted("b", [OK])
    outcome = await failover(a, b).send(request())
    assert a.sent == ["k0"] and b.sent == ["k0"]
    assert outcome == Accepted(receipt="r-1", via="b")
    decision = decide(outcome, failures=0, policy=RetryPolicy(), now=0.0,
                      rng=__import__("random").Random(0))
    assert decision.to is State.ACCEPTED and decision.reason == "sent via b"


@pytest.mark.parametrize("answer", [Uncertain(reason="read timeout"),
                                    RateLimited(retry_after_s=2.0),
                                    Permanent(reason="HTTP 422: bad address")])
async def test_an_answer_that_is_no_proof_never_moves_the_send(answer: Outcome) -> None:
    a, b = Scripted("a", [answer]), Scripted("b", [OK])
    outcome = await failover(a, b).send(request())
    assert type(outcome) is type(answer) and b.sent == []
    assert getattr(outcome, "reason", "").endswith(" (via a)")  # the provider named


async def test_a_provider_taken_out_is_skipped_then_probed_and_brought_back(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(start=1000.0)
    a, b = Scripted("a", [REFUSED, REFUSED, REFUSED, OK]), Scripted("b", [OK])
    provider = failover(a, b, clock=clock)
    for n in range(3):
        await provider.send(request(n))
    assert provider.failover.circuits(clock.now())["a"] is CircuitState.OPEN
    await provider.send(request(3))
    assert a.sent == ["k0", "k1", "k2"] and b.sent == ["k0", "k1", "k2", "k3"]
    clock.advance(15.0)
    assert (await provider.send(request(4))) == Accepted(receipt="r-1", via="a")  # the probe
    assert a.sent[-1] == "k4" and provider.failover.circuits(clock.now())["a"] is \
        CircuitState.CLOSED
    assert provider.failover.moved == 4
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("provider a is out: no send is tried on it for 15 s") and
               "ConnectError" in m for m in said), said
    assert any(m.startswith("provider a is back") for m in said), said


async def test_a_workers_progress_counts_what_each_provider_carried_and_refused() -> None:
    from tidings.delivery.worker import WorkerStats
    from tidings.processes.progress import worker_totals

    a, b = Scripted("a", [REFUSED, OK]), Scripted("b", [OK])
    provider = failover(a, b)
    for n in range(3):
        await provider.send(request(n))
    totals = worker_totals(WorkerStats(), provider)
    assert (totals["moved"], totals["via_a"], totals["via_b"], totals["refused_by_a"]) == \
        (1, 2, 1, 1)
    assert "moved" not in worker_totals(WorkerStats(), a)


async def test_every_provider_refusing_is_one_transient_answer_naming_each() -> None:
    a, b = Scripted("a", [REFUSED]), Scripted("b", [Transient(reason="HTTP 503")])
    outcome = await failover(a, b).send(request())
    assert isinstance(outcome, Transient)
    assert "a: request not sent" in outcome.reason and "b: HTTP 503" in outcome.reason


async def test_every_circuit_open_answers_transient_without_a_call() -> None:
    clock = FakeClock(start=0.0)
    a, b = Scripted("a", [REFUSED]), Scripted("b", [REFUSED])
    provider = failover(a, b, clock=clock)
    for n in range(3):
        await provider.send(request(n))
    sent = len(a.sent) + len(b.sent)
    outcome = await provider.send(request(9))
    assert isinstance(outcome, Transient) and "circuits open" in outcome.reason
    assert len(a.sent) + len(b.sent) == sent


async def test_a_lookup_finds_the_key_wherever_it_went_and_not_found_needs_every_one() -> None:
    found = Lookup.of_accepted("b-9")
    a, b = Scripted("a", [OK]), Scripted("b", [OK], found=found)
    answer = await failover(a, b).lookup("k1")
    assert answer.found and answer.receipt == "b-9" and a.asked == ["k1"]

    down = Scripted("a", [OK], found=Lookup.of_unknown("connection refused"))
    assert (await failover(down, Scripted("b", [OK])).lookup("k1")).unknown
    nowhere = await failover(Scripted("a", [OK]), Scripted("b", [OK])).lookup("k1")
    assert not nowhere.found and not nowhere.unknown


OUTCOMES = st.sampled_from([REFUSED, OK, Uncertain(reason="lost"),
                            RateLimited(retry_after_s=1.0), Permanent(reason="no")])


@given(st.lists(st.lists(OUTCOMES, min_size=1, max_size=6), min_size=2, max_size=4),
       st.integers(min_value=1, max_value=12), st.floats(min_value=0.0, max_value=20.0))
async def test_no_send_reaches_a_provider_after_one_that_may_have_accepted_it(
        scripts: list[list[Outcome]], sends: int, step_s: float) -> None:
    clock = FakeClock(start=0.0)
    given_out: list[tuple[str, str, Outcome]] = []

    class Logged(Scripted):
        async def send(self, request: SendRequest) -> Outcome:
            outcome = await super().send(request)
            given_out.append((request.key, self.name, outcome))
            return outcome

    providers = [Logged(f"p{i}", script) for i, script in enumerate(scripts)]
    order = [p.name for p in providers]
    provider = failover(*providers, clock=clock)
    for n in range(sends):
        outcome = await provider.send(request(n))
        tried = [(name, answer) for key, name, answer in given_out if key == f"k{n}"]
        names = [name for name, _ in tried]
        # in the channel's order, each provider at most once
        assert names == sorted(set(names), key=order.index)
        # every provider before the last one tried proved it did not accept the send
        assert all(proves_not_accepted(answer) for _, answer in tried[:-1])
        if tried and not proves_not_accepted(tried[-1][1]):
            # the send's outcome is the answer of the provider that may have it
            assert type(outcome) is type(tried[-1][1])
        else:
            assert isinstance(outcome, Transient)
        clock.advance(step_s)


async def test_a_provider_with_a_quota_of_its_own_carries_no_more_than_it() -> None:
    # given a fallback paced at 10/s on its own, and a first provider that is down
    clock = FakeClock(start=100.0)
    pacer = Pacer(channel="email@b", limits=PaceLimits(quota_per_s=10.0, safety=1.0),
                  backend=MemoryPacerBackend(), clock=clock, worker="w")
    a, b = Scripted("a", [REFUSED]), Scripted("b", [OK])
    provider = FailoverProvider([("a", a), ("b", b)], rule=RULE, clock=clock,
                                pacers={"b": pacer})
    times: list[float] = []
    original = b.send

    async def timed(request: SendRequest) -> Outcome:
        times.append(clock.now())
        return await original(request)

    b.send = timed  # type: ignore[method-assign]
    # when 30 sends go through it together
    sending = asyncio.gather(*(provider.send(request(n)) for n in range(30)))
    for _ in range(20_000):
        if sending.done():
            break
        await asyncio.sleep(0)
        clock.advance(0.001)
    outcomes = await sending
    # then all are accepted there, started a tenth of a second apart (each request
    # leaves at most the pacer's late tolerance, 10 ms, after its slot)
    assert all(o == Accepted(receipt="r-1", via="b") for o in outcomes)
    times.sort()
    assert all(b - a >= 0.09 for a, b in itertools.pairwise(times))
    assert times[-1] - times[0] >= 2.89


async def test_a_provider_out_and_back_is_kept_in_the_store_and_shown_by_status(
        tmp_path: Path) -> None:
    # given a channel whose first provider refuses, reporting to a real store as the
    # runtime wires it (tidings.runtime.Runtime.provider_said)
    store = await SqliteStore.open(f"sqlite:///{tmp_path / 'tidings.db'}")
    await store.migrate(now=1000.0)
    try:
        async def report(name: str, out: bool, at: float, reason: str) -> None:
            await store.pacer_transact(providers_key("email"), lambda state: (provider_said(
                state, name=name, out=out, at=at, worker="host:1", reason=reason), None))

        clock = FakeClock(start=1000.0)
        a, b = Scripted("a", [REFUSED, REFUSED, REFUSED, OK]), Scripted("b", [OK])
        provider = FailoverProvider([("a", a), ("b", b)], rule=RULE, clock=clock,
                                    report=report)
        for n in range(3):
            await provider.send(request(n))

        # when status and metrics read the store
        out = await snapshot(store, SqliteTransport(store.db), channels=["email"],
                             now=1001.0, window_s=60.0)
        state = operations.status(out, campaigns={}, channels=["email"])
        # then the first provider is out, said by the worker, with the refusal
        [shown] = state.channels["email"].providers
        assert (shown.name, shown.out, shown.worker) == ("a", True, "host:1")
        assert "ConnectError" in shown.reason and shown.since.startswith("1970-01-01T00:16")

        # and once a probe is answered, it is back
        clock.advance(15.0)
        await provider.send(request(9))
        out = await snapshot(store, SqliteTransport(store.db), channels=["email"],
                             now=1016.0, window_s=60.0)
        [shown] = operations.status(out, campaigns={}, channels=["email"]).channels[
            "email"].providers
        assert (shown.name, shown.out, shown.reason) == ("a", False, "answered a probe")
    finally:
        await store.close()


def test_a_circuit_hears_what_another_process_said() -> None:
    circuit = Circuit(RULE)
    # out, said 5 s ago: out for the rest of open_s, then probed as its own would be
    assert circuit.heard(out=True, at=95.0, now=100.0)
    assert circuit.state(100.0) is CircuitState.OPEN and not circuit.take(109.9)
    assert circuit.state(110.0) is CircuitState.HALF_OPEN
    # back, said after it went out: closed at once
    assert circuit.heard(out=False, at=101.0, now=102.0)
    assert circuit.state(102.0) is CircuitState.CLOSED
    # a word older than open_s, or older than this process's own opening, changes nothing
    assert not Circuit(RULE).heard(out=True, at=80.0, now=100.0)
    own = Circuit(RULE)
    for t in (200.0, 200.1, 200.2):
        own.failed(t)
    assert not own.heard(out=False, at=150.0, now=201.0)
    assert own.state(201.0) is CircuitState.OPEN


async def test_a_process_spares_its_own_refusals_once_another_took_a_provider_out(
        caplog: pytest.LogCaptureFixture) -> None:
    # given what another worker said a second ago: provider a is out
    caplog.set_level(logging.INFO, logger="tidings.worker")
    clock = FakeClock(start=1000.0)
    said: dict[str, Any] = provider_said(None, name="a", out=True, at=999.0,
                                         worker="other:1", reason="HTTP 503")

    async def hear() -> dict[str, Any]:
        return said

    a, b = Scripted("a", [OK]), Scripted("b", [OK])
    provider = FailoverProvider([("a", a), ("b", b)], rule=RULE, clock=clock, hear=hear)
    # when this process sends
    assert (await provider.send(request(1))) == Accepted(receipt="r-1", via="b")
    # then it never tried a, and says why
    assert a.sent == [] and b.sent == ["k1"]
    assert any("provider a is out, as worker other:1 said" in r.getMessage()
               for r in caplog.records)
    # and once another worker says a is back, the next look (a second on) sends there
    said = provider_said(said, name="a", out=False, at=1000.5, worker="other:2",
                         reason="answered a probe")
    clock.advance(1.0)
    assert (await provider.send(request(2))) == Accepted(receipt="r-1", via="a")


async def test_a_long_pause_moves_the_send_on_only_where_the_channel_says_so() -> None:
    clock = FakeClock(start=1000.0)
    long_pause = RateLimited(retry_after_s=120.0, reason="HTTP 429")
    # by default a 429 waits, whatever its pause
    a, b = Scripted("a", [long_pause]), Scripted("b", [OK])
    outcome = await failover(a, b, clock=clock).send(request(1))
    assert isinstance(outcome, RateLimited) and b.sent == []

    # with on_pause_over_s, a longer pause moves it on, and the provider is out until
    # its pause ends
    rule = CircuitRule(on_pause_over_s=30.0)
    a, b = Scripted("a", [long_pause, OK]), Scripted("b", [OK])
    provider = FailoverProvider([("a", a), ("b", b)], rule=rule, clock=clock)
    assert (await provider.send(request(2))) == Accepted(receipt="r-1", via="b")
    assert provider.failover.circuits(clock.now())["a"] is CircuitState.OPEN
    clock.advance(119.0)
    await provider.send(request(3))
    assert a.sent == ["k2"]  # still paused
    clock.advance(1.0)
    assert (await provider.send(request(4))) == Accepted(receipt="r-1", via="a")

    # a shorter pause, or no one else to carry it, still pauses the channel
    short = RateLimited(retry_after_s=10.0, reason="HTTP 429")
    a, b = Scripted("a", [short]), Scripted("b", [OK])
    provider = FailoverProvider([("a", a), ("b", b)], rule=rule, clock=clock)
    assert isinstance(await provider.send(request(5)), RateLimited) and b.sent == []
    a, b = Scripted("a", [long_pause]), Scripted("b", [long_pause])
    provider = FailoverProvider([("a", a), ("b", b)], rule=rule, clock=clock)
    paused = await provider.send(request(6))
    assert isinstance(paused, RateLimited) and paused.retry_after_s == 120.0


def test_settings_name_what_a_channel_with_fallbacks_may_not_combine() -> None:
    base = {"provider": {"kind": "sandbox", "url": "http://a.test"},
            "fallbacks": [{"kind": "sandbox", "url": "http://b.test"}]}
    with pytest.raises(ConfigurationError) as batch:
        Settings.parse({"channels": {"email": {**base, "batch": {"max_messages": 10}}}})
    assert batch.value.field == "channels.email.fallbacks"
    with pytest.raises(ConfigurationError) as resend:
        Settings.parse({"channels": {"email": {**base, "uncertain": "resend"}}})
    assert resend.value.field == "channels.email.fallbacks"
    with pytest.raises(ConfigurationError) as named:
        Settings.parse({"channels": {"email": {
            **base, "failover": {"quotas": {"postmark": "10/s"}}}}})
    assert named.value.field == "channels.email.failover.quotas.postmark"
    assert "sandbox, sandbox-2" in named.value.message
    with pytest.raises(ConfigurationError) as quota:
        Settings.parse({"channels": {"email": {
            **base, "failover": {"quotas": {"sandbox-2": "lots"}}}}})
    assert quota.value.field.startswith("channels.email.failover.quotas")
    assert Settings.parse({"channels": {"email": {
        **base, "failover": {"quotas": {"sandbox-2": "10/s"}}}}}).channels[
            "email"].failover.quotas == {"sandbox-2": "10/s"}
    with pytest.raises(ConfigurationError) as kind:
        Settings.parse({"channels": {"email": {**base, "fallbacks": [{"kind": "pigeon"}]}}})
    assert kind.value.field == "channels.email.fallbacks.0.kind"
