"""Scenario harness: a runtime on a temp SQLite file, a fake clock, and the sandbox twin.

Every scenario is judged by the sandbox's own counts (``SandboxCore.stats()`` and
``SandboxCore.lookup``), not by tidings' ledger alone. The sandbox runs with
``dedupe=False`` so that a second send of a key shows up as ``keys_accepted_twice``
instead of being silently deduplicated.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from support.clock_driver import ClockDriver, ExecutorCalls
from tidings.admission.campaign import Campaign
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.model import Event, Intent, SendRequest
from tidings.core.outcomes import Lookup, Outcome
from tidings.core.states import DONE, State
from tidings.delivery.worker import Worker
from tidings.providers.sandbox import SandboxTwinProvider
from tidings.runtime import Runtime, build_runtime
from tidings.sandbox import SandboxConfig, SandboxCore

T = TypeVar("T")

#: A whole second, so the sandbox's 1-second windows line up with scenario times.
T0 = 1_780_000_000.0
#: Real-time guard against a scenario blocking forever on the fake clock.
HANG_GUARD_S = 60.0  # only against a hang (a loaded machine runs the longest drive in ~30 s)


class SleepSignalClock(FakeClock):
    """A FakeClock that signals when someone starts waiting on it.

    Lets a scenario run a worker as a task, wait until it is parked on the fake clock
    (e.g. waiting for a paused pacer), act, then ``advance``: no real sleeping.
    """

    def __init__(self, start: float = T0, *, auto_advance: bool = False) -> None:
        super().__init__(start, auto_advance=auto_advance)
        self.sleeping = asyncio.Event()
        self._wakes: list[float] = []

    async def sleep(self, seconds: float) -> None:
        wake = self.now() + max(0.0, seconds)
        self._wakes.append(wake)
        self.sleeping.set()
        try:
            await super().sleep(seconds)
        finally:
            self._wakes.remove(wake)

    def next_wake(self) -> float | None:
        """The earliest fake time someone is waiting for, or None."""
        return min(self._wakes, default=None)


@dataclass(frozen=True, kw_only=True)
class Sent:
    """One request the sandbox was asked to handle, at a fake time."""

    key: str
    at: float
    outcome: Outcome


class RecordingProvider:
    """The sandbox twin, plus the exact fake time of every send (the core keeps 1 s windows)."""

    def __init__(self, inner: SandboxTwinProvider, clock: FakeClock) -> None:
        self.inner = inner
        self.clock = clock
        self.name = inner.name
        self.supports_lookup = inner.supports_lookup
        self.sent: list[Sent] = []

    async def send(self, request: SendRequest) -> Outcome:
        at = self.clock.now()
        outcome = await self.inner.send(request)
        self.sent.append(Sent(key=request.key, at=at, outcome=outcome))
        return outcome

    async def lookup(self, key: str) -> Lookup:
        return await self.inner.lookup(key)

    async def close(self) -> None:
        await self.inner.close()


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for name, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(name), Mapping):
            out[name] = _merge(dict(out[name]), value)
        else:
            out[name] = value
    return out


@dataclass(kw_only=True)
class Harness:
    """A runtime wired to the sandbox twin on a fake clock."""

    clock: SleepSignalClock
    core: SandboxCore
    provider: RecordingProvider
    rt: Runtime
    calls: ExecutorCalls
    channel: str = "email"
    t0: float = T0
    _workers: int = field(default=0)

    @staticmethod
    async def guard(awaitable: Awaitable[T]) -> T:
        """Await with a real-time limit, so a scenario stuck on the fake clock fails fast."""
        return await guard(awaitable)

    # ---------------------------------------------------------------- the judge

    def stats(self) -> dict[str, Any]:
        """The sandbox's own counts for the channel."""
        channels: dict[str, Any] = self.core.stats()["channels"]
        return dict(channels[self.channel])

    def accepted_by_sandbox(self, key: str) -> str | None:
        """The receipt the sandbox accepted ``key`` under, or None."""
        found = self.core.lookup(key, self.channel)
        return found[1] if found else None

    def requests_between(self, start: float, end: float) -> list[Sent]:
        """Sends that started at ``start <= t < end`` (fake time)."""
        return [s for s in self.provider.sent if start <= s.at < end]

    def configure(self, **config: Any) -> None:
        """Replace the sandbox's behaviour (counts are kept); dedupe stays off."""
        config.setdefault("dedupe", False)
        self.core.configure(SandboxConfig.from_dict(config))

    # ---------------------------------------------------------------- the ledger

    async def intent(self, key: str) -> Intent:
        intent = await self.rt.store.intent_get(key)
        assert intent is not None, f"no intent {key!r}"
        return intent

    async def all_intents(self) -> list[Intent]:
        return await self.rt.store.intent_find(states=list(State), limit=100_000)

    async def events(self, key: str) -> list[Event]:
        return await self.rt.store.events_for(key)

    async def event_types(self, key: str) -> list[str]:
        return [e.type for e in await self.events(key)]

    async def queue_total(self) -> int:
        depth = await self.rt.transport.depth(self.channel, now=self.clock.now())
        return depth.ready + depth.delayed + depth.in_flight

    # ---------------------------------------------------------------- driving

    def worker(self, worker_id: str | None = None) -> Worker:
        self._workers += 1
        return self.rt.worker(self.channel, worker_id or f"worker-{self._workers}")

    async def notify(self, key: str, address: str | None = None, **kw: Any) -> str:
        recipient = {"id": key.replace(":", "_"), "email": address or f"{key}@example.com"}
        (full,) = await self.rt.notify(key=key, recipient=recipient, channels=[self.channel],
                                       template="t", **kw)
        return full

    async def run_until(self, done: Callable[[], bool], *,
                        observe: Callable[[], None] | None = None) -> None:
        """Let tasks run (a worker's ``run()``, say), moving the fake clock to its next
        wake only while nothing can run without it (``support.clock_driver``), until
        ``done()`` holds; ``observe`` is called at every turn of the loop meanwhile.

        Meanwhile a worker's idle wait on its queue (``Transport.wait``, in real time) is
        a wait on the fake clock: an idle poll takes fake time like any other wait, in
        its place among them, instead of letting fake time run on while it lasts."""
        transport = self.rt.transport
        clock = self.clock

        async def idle_on_the_clock(queue: str, *, timeout_s: float, now: float) -> None:
            await clock.sleep(timeout_s)

        transport.wait = idle_on_the_clock  # type: ignore[method-assign]
        try:
            await guard(ClockDriver(clock, self.calls).run_until(done, observe=observe))
        finally:
            del transport.wait

    async def run_once(self, worker: Worker) -> int:
        return await guard(worker.run_once())

    async def reconcile(self) -> None:
        await guard(self.rt.reconciler().run_pass(now=self.clock.now()))

    async def drive(self, worker: Worker, *, step_s: float = 1.0, max_steps: int = 200) -> None:
        """Run the worker and the reconciler, stepping the fake clock, until every intent is
        terminal and the queue is empty."""
        for _ in range(max_steps):
            await self.run_once(worker)
            await self.reconcile()
            intents = await self.all_intents()
            if all(i.state in DONE for i in intents) and await self.queue_total() == 0:
                return
            self.clock.advance(step_s)
        raise AssertionError("did not settle: "
                             f"{[(i.key, i.state.value) for i in await self.all_intents()]}")

    async def close(self) -> None:
        await self.rt.close()


async def guard(awaitable: Awaitable[T]) -> T:
    """Await with a real-time limit, so a scenario stuck on the fake clock fails fast."""
    return await asyncio.wait_for(awaitable, timeout=HANG_GUARD_S)


async def build_harness(
    db: Path,
    *,
    sandbox: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
    campaigns: Sequence[Campaign] | None = None,
    auto_advance: bool = False,
    seed: int = 0,
    calls: ExecutorCalls | None = None,
) -> Harness:
    clock = SleepSignalClock(T0, auto_advance=auto_advance)
    sandbox_config = dict(sandbox or {})
    sandbox_config.setdefault("dedupe", False)
    core = SandboxCore(SandboxConfig.from_dict(sandbox_config), now=clock.now, seed=seed)
    provider = RecordingProvider(SandboxTwinProvider(core=core, channel="email", clock=clock),
                                 clock)
    data = _merge({"store": f"sqlite:///{db}", "channels": {"email": {}}}, settings or {})
    rt = await build_runtime(Settings.parse(data), clock=clock, providers={"email": provider},
                             campaigns=list(campaigns or []), rng=random.Random(seed))
    return Harness(clock=clock, core=core, provider=provider, rt=rt,
                   calls=calls or ExecutorCalls())


HarnessFactory = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def make_harness(tmp_path: Path) -> AsyncIterator[HarnessFactory]:
    """Build harnesses (each on its own SQLite file); all are closed after the test."""
    made: list[Harness] = []
    with ExecutorCalls().installed() as calls:

        async def make(**kw: Any) -> Harness:
            harness = await build_harness(tmp_path / f"t{len(made)}.db", calls=calls, **kw)
            made.append(harness)
            return harness

        yield make
        for harness in made:
            await harness.close()


@pytest.fixture
async def h(make_harness: HarnessFactory) -> Harness:
    """A default harness: one email channel, a sandbox that accepts everything."""
    return await make_harness()
