"""Worker liveness on the embedded store and the fake clock: a worker whose marker is
gone has its leases ended (to uncertain) and its messages made visible again at once,
long before ``lease_s`` or ``visibility_s``; a worker that comes back cannot commit
under the ended leases, says so once, and registers again only once its work is taken
back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tidings.config.settings import Settings
from tidings.core import pacing as algorithm
from tidings.core.clock import FakeClock
from tidings.core.liveness import LivenessConfig, Marker, WorkerMark, gone, sends_land_by
from tidings.core.model import Event, Received
from tidings.core.outcomes import Lookup
from tidings.core.pacing import PaceLimits
from tidings.core.states import State
from tidings.processes import service
from tidings.recovery.reconciler import Reconciler
from tidings.runtime import Runtime, build_runtime
from tidings.stores.base import Change
from tidings.transports.base import RecordsReceiver

#: A channel on the in-process sandbox, named as such: no channel has a provider by default.
TWIN = {"provider": {"kind": "sandbox-twin"}}

T0 = 1_780_000_000.0
LEASE_S = 300.0
VISIBILITY_S = 600.0
CONFIG = LivenessConfig(beat_s=1.0, stale_after_s=6.0)
HOST = "host-a"


def records_of(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == name]


def mark(**kw: object) -> WorkerMark:
    fields: dict[str, object] = {"worker_id": "w", "host": "elsewhere", "pid": 42,
                                 "heartbeat_at": T0}
    fields.update(kw)
    return WorkerMark(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(("seen", "silent", "alive", "is_gone"), [
    (mark(), 0.0, True, False),
    (mark(), CONFIG.stale_after_s - 0.01, True, False),
    (mark(), CONFIG.stale_after_s, True, True),  # the heartbeat covers any host
    (mark(host=HOST), 0.0, False, True),  # its pid is gone from this very host: at once
    (mark(host=HOST), 0.0, True, False),
    (mark(), 0.0, False, False),  # a pid means nothing on another host
    (mark(marker_held=False), 0.0, True, False),  # lock gone: not before it fenced itself
    (mark(marker_held=False), CONFIG.fence_s, True, True),
    (mark(marker_held=True), CONFIG.fence_s, True, False),
])
def test_the_rule_that_a_worker_is_gone(seen: WorkerMark, silent: float, alive: bool,
                                        is_gone: bool) -> None:
    why = gone(seen, now=T0 + silent, host=HOST, config=CONFIG, alive=lambda _pid: alive)
    assert (why is not None) is is_gone, why


def test_a_worker_fences_itself_before_any_peer_may_declare_it_gone() -> None:
    assert CONFIG.fence_s < CONFIG.stale_after_s


@pytest.mark.parametrize(("seen", "alive", "landed_by"), [
    # Cut off, it may still run: its last send started by the fence, and is cut off
    # (its connection reset) a send deadline later.
    (mark(), True, T0 + CONFIG.fence_s + 15.0),
    (mark(marker_held=False), True, T0 + CONFIG.fence_s + 15.0),
    (mark(host=HOST), True, T0 + CONFIG.fence_s + 15.0),
    (mark(host=HOST), False, None),  # died here: its connections were reset with it
])
def test_when_a_gone_workers_last_send_has_landed(seen: WorkerMark, alive: bool,
                                                  landed_by: float | None) -> None:
    assert sends_land_by(seen, host=HOST, config=CONFIG, send_deadline_s=15.0,
                         alive=lambda _pid: alive) == landed_by


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Runtime]:
    settings = Settings.parse({
        "store": f"sqlite:///{tmp_path / 'live.db'}",
        "worker": {"lease_s": LEASE_S, "visibility_s": VISIBILITY_S, "heartbeat_s": 1.0,
                   "gone_after_s": CONFIG.stale_after_s},
        "channels": {"email": TWIN}})
    runtime = await build_runtime(settings, clock=FakeClock(T0))
    try:
        yield runtime
    finally:
        await runtime.close()


def clock_of(rt: Runtime) -> FakeClock:
    assert isinstance(rt.clock, FakeClock)
    return rt.clock


async def hold_work(rt: Runtime, worker_id: str, count: int,
                    started: int | None = None) -> dict[str, int]:
    """``count`` intents received and claimed by ``worker_id``: key -> lease token. The
    sends of the first ``started`` of them (all by default) are marked started, as a
    worker marks them right before its requests leave."""
    keys = [(await rt.notify(key=f"{worker_id}-{i}", recipient={
        "id": f"r{i}", "email": f"r{i}@example.com"}, channels=["email"], template="t/v1"))[0]
        for i in range(count)]
    assert isinstance(rt.transport, RecordsReceiver)
    rt.transport.receive_as(worker_id)
    now = rt.clock.now()
    received = await rt.transport.receive("email", max_messages=count,
                                          visibility_s=VISIBILITY_S, now=now)
    rt.transport.receive_as(None)
    assert sorted(r.message_id for r in received) == sorted(keys)
    claims = await rt.store.intent_claim_many(keys, owner=worker_id, lease_s=LEASE_S, now=now)
    tokens = {c.key: c.token for c in claims}
    assert all(t is not None for t in tokens.values())
    held = {k: t for k, t in tokens.items() if t is not None}
    starts = list(held.items())[:count if started is None else started]
    assert await rt.store.intent_mark_started(starts, owner=worker_id, now=now) == {
        k for k, _ in starts}
    return held


def reconciler_of(rt: Runtime, host: str = HOST) -> Reconciler:
    reconciler = rt.reconciler()
    reconciler.host = host
    return reconciler


async def test_a_silent_worker_loses_its_leases_and_messages_at_once(rt: Runtime) -> None:
    clock = clock_of(rt)
    gone_one = rt.marker("w-gone")
    live_one = rt.marker("w-live")
    assert gone_one is not None and live_one is not None
    await gone_one.start()
    await live_one.start()
    tokens = await hold_work(rt, "w-gone", 5, started=3)
    kept = await hold_work(rt, "w-live", 2)
    reconciler = reconciler_of(rt)

    # Nothing happens while the heartbeat is fresh ...
    clock.advance(CONFIG.stale_after_s - 1)
    await live_one.step()
    result = await reconciler.end_gone_workers(clock.now())
    assert result.leases_ended == 0
    # ... and once it is stale (the other worker beat meanwhile), far sooner than lease_s
    # or visibility_s, the silent worker's leases end and its messages come back.
    clock.advance(1.0)
    await live_one.step()
    result = await reconciler.end_gone_workers(clock.now())
    assert (result.leases_ended, result.messages_released) == (5, 5)
    assert clock.now() - T0 < LEASE_S / 10
    # The three whose sends had started are uncertain; the two that never started a
    # send are released, to be claimed again with no lookup and no operator.
    assert result.leases_released == 2
    for n, key in enumerate(tokens):
        intent = await rt.store.intent_get(key)
        ended = "lease_ended" if n < 3 else "released"
        assert intent is not None
        assert intent.state == (State.UNCERTAIN if n < 3 else State.RETRYABLE)
        assert ended in [e.type for e in await rt.store.events_for(key)]
    for key in kept:
        intent = await rt.store.intent_get(key)
        assert intent is not None and intent.state == State.CLAIMED
    again = await rt.transport.receive("email", max_messages=50, visibility_s=VISIBILITY_S,
                                       now=clock.now())
    assert sorted(r.message_id for r in again) == sorted(tokens)
    # A second pass finds nothing more to do.
    assert (await reconciler.end_gone_workers(clock.now())).total() == 0


async def test_a_worker_that_comes_back_is_refused_and_says_so_once(
        rt: Runtime, caplog: pytest.LogCaptureFixture) -> None:
    clock = clock_of(rt)
    marker = rt.marker("w-back")
    assert marker is not None
    await marker.start()
    assert marker.live(clock.now())
    tokens = await hold_work(rt, "w-back", 4)
    clock.advance(CONFIG.fence_s)
    assert not marker.live(clock.now())  # no send starts from here on
    clock.advance(CONFIG.stale_after_s - CONFIG.fence_s)
    assert (await reconciler_of(rt).end_gone_workers(clock.now())).leases_ended == 4

    with caplog.at_level(logging.INFO, logger="tidings.liveness"):
        await marker.step()  # finds itself declared gone; its work is settled: back at once
        await marker.step()
        await marker.step()
    told = [r for r in records_of(caplog, "tidings.liveness") if r.msg == "declared gone"]
    assert len(told) == 1 and marker.declared_gone == 1
    assert marker.live(clock.now())
    # Every outcome it still holds is refused by the lease token.
    refused = await rt.store.intent_apply_many([
        Change(key=k, from_state=State.CLAIMED, to_state=State.ACCEPTED, event="accepted",
               lease_token=t, worker="w-back") for k, t in tokens.items()], now=clock.now())
    assert refused == []


async def test_a_worker_back_from_a_partition_sends_nothing_under_what_it_held(
        rt: Runtime) -> None:
    """Its sends waited (for the pacer, say) through the partition; it was declared gone,
    its leases ended, and it registered again: the fence is open, but no send starts
    under a claim made before (``Fence.epoch``), or its intents would go out twice."""
    clock = clock_of(rt)
    marker = rt.marker("w-part")
    assert marker is not None
    await marker.start()
    worker = rt.worker("email", "w-part")
    worker.liveness = marker
    gate = asyncio.Event()
    slot = worker.pacer.slot

    async def held_up(*, early_s: float = 0.0) -> float:
        await gate.wait()
        return await slot(early_s=early_s)

    sent: list[str] = []

    async def send(request: Any) -> Any:
        sent.append(request.key)
        raise AssertionError("sent under an ended lease")

    worker.pacer.slot = held_up  # type: ignore[method-assign]
    worker.provider.send = send  # type: ignore[method-assign]
    key = (await rt.notify(key="part-1", recipient={"id": "r1", "email": "r1@example.com"},
                           channels=["email"], template="t/v1"))[0]
    batch = await rt.transport.receive("email", max_messages=10, visibility_s=VISIBILITY_S,
                                       now=clock.now())
    await worker._take(batch)
    assert worker.held == 1

    clock.advance(CONFIG.stale_after_s)
    assert (await reconciler_of(rt).end_gone_workers(clock.now())).leases_ended == 1
    await marker.step()  # declared gone; its work taken back: registered again
    assert marker.live(clock.now()) and marker.epoch == 2
    gate.set()
    while worker._sends:
        await asyncio.gather(*list(worker._sends))
    assert sent == []
    assert worker.stats.released == 1
    # Its send never started (it waited for the pacer), so its lease was released for
    # another claim, not made uncertain
    intent = await rt.store.intent_get(key)
    assert intent is not None and intent.state == State.RETRYABLE


async def test_a_dead_process_on_this_host_is_seen_at_once(rt: Runtime) -> None:
    clock = clock_of(rt)
    marker = Marker(rt.registry(), "w-dead", clock=clock, config=CONFIG,  # type: ignore[arg-type]
                    host=HOST, pid=2**22 + 7)  # above any pid_max: no such process
    await marker.start()
    await hold_work(rt, "w-dead", 3)
    result = await reconciler_of(rt).end_gone_workers(clock.now())  # not a second later
    assert (result.leases_ended, result.messages_released) == (3, 3)


async def hold_slots(rt: Runtime, worker_id: str, count: int) -> None:
    """``count`` pacer slots of the email channel reserved by ``worker_id`` (none given back)."""
    grant = await rt.store.pacer_transact("email", partial(
        algorithm.reserve, limits=PaceLimits(max_in_flight=8), worker=worker_id, want=count,
        release=0, now=rt.clock.now(), horizon_s=0.1, stale_s=60.0))
    assert len(grant.starts) == count


async def test_a_dead_processs_pacer_slots_are_free_at_once(rt: Runtime) -> None:
    """A kill every few seconds must not leave the channel's max_in_flight held by the
    dead (each for the pacer's stale_s) and starve the workers that run."""
    clock = clock_of(rt)
    marker = Marker(rt.registry(), "w-dead", clock=clock, config=CONFIG,  # type: ignore[arg-type]
                    host=HOST, pid=2**22 + 11)  # above any pid_max: no such process
    await marker.start()
    await hold_slots(rt, "w-dead", 5)
    await hold_slots(rt, "w-live", 3)
    result = await reconciler_of(rt).end_gone_workers(clock.now())
    assert result.pacer_slots_freed == 5
    state = await rt.store.pacer_read("email")
    assert not algorithm.holds_slots(state, worker="w-dead")
    # still counted among the channel's workers, as one that died a moment ago (a peer's
    # claim depth errs on the small side), until the pacer's stale_s
    assert algorithm.live_workers(state, worker="w-live", now=clock.now(), within_s=60) == 2
    grant = await rt.store.pacer_transact("email", partial(
        algorithm.reserve, limits=PaceLimits(max_in_flight=8), worker="w-live", want=5,
        release=0, now=clock.now(), horizon_s=0.1, stale_s=60.0))
    assert len(grant.starts) == 5  # all 8 in flight are the live worker's


async def test_a_silent_workers_pacer_slots_wait_for_the_pacer(rt: Runtime) -> None:
    """Gone by its heartbeat, it may still run with requests in flight: its slots are
    the pacer's to free (stale_s), not the reconciler's."""
    clock = clock_of(rt)
    marker = rt.marker("w-silent")
    assert marker is not None
    await marker.start()
    await hold_slots(rt, "w-silent", 4)
    clock.advance(CONFIG.stale_after_s)
    result = await reconciler_of(rt).end_gone_workers(clock.now())
    assert result.pacer_slots_freed == 0
    assert algorithm.holds_slots(await rt.store.pacer_read("email"), worker="w-silent")


class NotFoundAnywhere:
    """A lookup that never finds the send, and counts how often it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def lookup(self, key: str) -> Lookup:
        self.asked.append(key)
        return Lookup.of_not_found("no such message")


async def test_a_cut_off_workers_sends_are_not_looked_up_before_they_can_have_landed(
        rt: Runtime) -> None:
    """Its process may run on, its last request on the wire: a "not found" asked before
    that request is cut off would be resent beside it (sent twice once it lands)."""
    clock = clock_of(rt)
    marker = rt.marker("w-cut")
    assert marker is not None
    await marker.start()
    tokens = await hold_work(rt, "w-cut", 3)
    reconciler = reconciler_of(rt)
    provider = NotFoundAnywhere()
    reconciler.providers["email"].lookup = provider.lookup  # type: ignore[method-assign]
    deadline = rt.send_deadline_s("email")
    landed_by = T0 + CONFIG.fence_s + deadline

    clock.advance(CONFIG.stale_after_s)
    result = await reconciler.run_pass(now=clock.now())
    assert result.leases_ended == 3
    for key in tokens:
        intent = await rt.store.intent_get(key)
        assert intent is not None and intent.state == State.UNCERTAIN
        assert intent.next_attempt_at == pytest.approx(landed_by)
    clock.set(landed_by - 0.01)
    result = await reconciler.run_pass(now=clock.now())
    assert provider.asked == [] and result.uncertain_waiting == 3
    clock.set(landed_by)
    result = await reconciler.run_pass(now=clock.now())
    assert sorted(provider.asked) == sorted(tokens)
    assert result.uncertain_retried == 3


async def test_a_dead_processs_sends_are_looked_up_at_once(rt: Runtime) -> None:
    clock = clock_of(rt)
    marker = Marker(rt.registry(), "w-died", clock=clock, config=CONFIG,  # type: ignore[arg-type]
                    host=HOST, pid=2**22 + 9)  # above any pid_max: no such process
    await marker.start()
    tokens = await hold_work(rt, "w-died", 2)
    reconciler = reconciler_of(rt)
    provider = NotFoundAnywhere()
    reconciler.providers["email"].lookup = provider.lookup  # type: ignore[method-assign]
    assert (await reconciler.run_pass(now=clock.now())).leases_ended == 2
    for key in tokens:
        intent = await rt.store.intent_get(key)
        assert intent is not None and intent.next_attempt_at is None
    clock.advance(rt.settings.reconciler.uncertain_after_s + 0.01)  # as any uncertain send
    await reconciler.run_pass(now=clock.now())
    assert sorted(provider.asked) == sorted(tokens)


async def test_a_pass_that_died_half_way_is_finished_by_the_next(rt: Runtime) -> None:
    clock = clock_of(rt)
    marker = rt.marker("w-half")
    assert marker is not None
    await marker.start()
    await hold_work(rt, "w-half", 3)
    clock.advance(CONFIG.stale_after_s)
    registry = rt.registry()
    assert registry is not None
    [seen] = [m for m in await registry.running() if m.worker_id == "w-half"]
    assert await registry.end(seen, now=clock.now(), by="a pass that died here")
    # The worker cannot register again while its work is not taken back.
    assert not await registry.register("w-half", host=HOST, pid=1, now=clock.now())
    result = await reconciler_of(rt).end_gone_workers(clock.now())
    assert (result.leases_ended, result.messages_released) == (3, 3)
    assert await registry.register("w-half", host=HOST, pid=1, now=clock.now())


async def test_a_worker_that_beat_meanwhile_is_not_ended(rt: Runtime) -> None:
    clock = clock_of(rt)
    marker = rt.marker("w-slow")
    registry = rt.registry()
    assert marker is not None and registry is not None
    await marker.start()
    clock.advance(CONFIG.stale_after_s)
    [seen] = await registry.running()
    await marker.step()  # its beat lands between the read and the end
    assert not await registry.end(seen, now=clock.now(), by="a peer")
    assert marker.live(clock.now())


async def test_a_clean_stop_removes_the_marker(rt: Runtime) -> None:
    marker = rt.marker("w-stop")
    registry = rt.registry()
    assert marker is not None and registry is not None
    await marker.start()
    await marker.stop()
    assert await registry.running() == []


async def outcomes_under_ended_leases(rt: Runtime, worker_id: str, count: int
                                      ) -> tuple[dict[str, int], list[tuple[Change, Received]]]:
    """``count`` intents ``worker_id`` holds, their leases ended by a peer meanwhile, and
    the acceptances it would commit under them."""
    tokens = await hold_work(rt, worker_id, count)
    await rt.store.intent_apply_many([
        Change(key=k, from_state=State.CLAIMED, to_state=State.UNCERTAIN, event="lease_ended",
               lease_token=t, worker="peer") for k, t in tokens.items()], now=rt.clock.now())
    outcomes = [(Change(key=k, from_state=State.CLAIMED, to_state=State.ACCEPTED,
                        event="accepted", lease_token=t, worker=worker_id),
                 Received(queue="email", message_id=k, body="", receipt=f"{i}:1",
                          receive_count=1, enqueued_at=T0))
                for i, (k, t) in enumerate(tokens.items(), start=1)]
    return tokens, outcomes


async def test_lost_leases_are_told_once_not_once_per_intent(
        rt: Runtime, caplog: pytest.LogCaptureFixture) -> None:
    worker = rt.worker("email", "w-told")
    tokens, outcomes = await outcomes_under_ended_leases(rt, "w-told", 6)
    with caplog.at_level(logging.DEBUG, logger="tidings.worker"):
        await worker._record(outcomes[:3])
        await worker._record(outcomes[3:])
    lost = [r for r in records_of(caplog, "tidings.worker") if r.msg == "lease lost"]
    assert len(lost) == 6
    assert [r.levelno for r in lost].count(logging.WARNING) == 1
    assert worker.stats.lease_lost == 6
    events: list[Event] = [e for k in tokens for e in await rt.store.events_for(k)]
    assert sum(e.type == "lease_lost" for e in events) == 6  # the audit trail keeps each


async def test_a_later_run_of_lost_leases_is_told_again(
        rt: Runtime, caplog: pytest.LogCaptureFixture) -> None:
    clock = clock_of(rt)
    worker = rt.worker("email", "w-twice")

    async def lose_one(n: int) -> None:
        [(key, token)] = (await hold_work(rt, f"w-twice-{n}", 1)).items()
        await rt.store.intent_apply_many([Change(
            key=key, from_state=State.CLAIMED, to_state=State.UNCERTAIN, event="lease_ended",
            lease_token=token, worker="peer")], now=clock.now())
        await worker._record([(
            Change(key=key, from_state=State.CLAIMED, to_state=State.ACCEPTED,
                   event="accepted", lease_token=token, worker="w-twice"),
            Received(queue="email", message_id=key, body="", receipt=f"{n}:1",
                     receive_count=1, enqueued_at=T0))])

    with caplog.at_level(logging.INFO, logger="tidings.worker"):
        await lose_one(1)
        clock.advance(LEASE_S - 1)
        await lose_one(2)  # the same run: quiet
        clock.advance(LEASE_S)
        await lose_one(3)  # a lease later: a new run, told again
    warned = [r for r in records_of(caplog, "tidings.worker")
              if r.msg == "lease lost" and r.levelno == logging.WARNING]
    assert len(warned) == 2


async def test_a_run_of_lost_leases_is_timed_from_when_a_hung_commit_found_it(
        rt: Runtime, caplog: pytest.LogCaptureFixture) -> None:
    """A commit that hung through a partition longer than a lease finds its leases lost
    when the store is back; a loss found a moment later is the same run (quiet)."""
    clock = clock_of(rt)
    worker = rt.worker("email", "w-hung")
    _, outcomes = await outcomes_under_ended_leases(rt, "w-hung", 2)
    store = worker.store
    apply = store.intent_apply_many

    async def hangs_through_a_partition(*args: Any, **kw: Any) -> Any:
        clock.advance(LEASE_S + 5)  # the store was out of reach all that time
        return await apply(*args, **kw)

    with caplog.at_level(logging.INFO, logger="tidings.worker"):
        store.intent_apply_many = hangs_through_a_partition  # type: ignore[method-assign]
        await worker._record(outcomes[:1])
        store.intent_apply_many = apply  # type: ignore[method-assign]
        clock.advance(1.0)
        await worker._record(outcomes[1:])
    warned = [r for r in records_of(caplog, "tidings.worker")
              if r.msg == "lease lost" and r.levelno == logging.WARNING]
    assert len(warned) == 1


class Unreachable:
    """A registry whose store cannot be reached (every call raises)."""

    def __getattr__(self, name: str) -> object:
        async def fail(*_args: object, **_kw: object) -> None:
            raise OSError("connection refused")
        return fail


async def test_an_unreachable_store_closes_the_fence_and_is_told_once(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(T0)
    marker = Marker(Unreachable(), "w-cut", clock=clock, config=CONFIG,  # type: ignore[arg-type]
                    host=HOST, pid=1)
    marker._registered, marker._confirmed_at = True, T0  # started before the cut
    with caplog.at_level(logging.INFO, logger="tidings.liveness"):
        for _ in range(5):
            clock.advance(CONFIG.beat_s)
            await marker.step()
    told = [r for r in records_of(caplog, "tidings.liveness")
            if r.msg.startswith("heartbeat failed")]
    assert len(told) == 1
    assert not marker.live(clock.now())  # 5 s after the last beat: past fence_s


def test_the_store_urls_application_name_follows_the_processs_own() -> None:
    from tidings.core.liveness import application_name

    assert application_name("h", 7) == "tidings h:7"
    assert application_name("h", 7, label="billing") == "tidings h:7 billing"
    # PostgreSQL keeps 63 bytes: the label is what gets cut, never the process's name
    long = application_name("h", 7, label="x" * 100)
    assert long.startswith("tidings h:7 ") and len(long.encode()) == 63


class RecordedWake(asyncio.Event):
    """The reconcile loop's wake, remembering that it was set (the loop clears it)."""

    def __init__(self) -> None:
        super().__init__()
        self.times_set = 0

    def set(self) -> None:
        self.times_set += 1
        super().set()


async def test_a_pass_that_ends_leases_wakes_its_loop_to_settle_them(tmp_path: Path) -> None:
    """A worker started after a kill ends its predecessor's leases in its first pass: the
    uncertain sends are settled once uncertain_after_s has passed, by a pass the loop
    is woken for, not one reconcile_every_s later."""
    settings = Settings.parse({
        "store": f"sqlite:///{tmp_path / 'wake.db'}",
        "worker": {"lease_s": LEASE_S, "visibility_s": VISIBILITY_S},
        "reconciler": {"uncertain_after_s": 0},
        "channels": {"email": TWIN}})
    runtime = await build_runtime(settings, clock=FakeClock(T0))
    try:
        marker = Marker(runtime.registry(), "w-killed",  # type: ignore[arg-type]
                        clock=runtime.clock, config=CONFIG, pid=2**22 + 13)  # no such pid
        await marker.start()
        await hold_work(runtime, "w-killed", 2)
        stopping, wake = asyncio.Event(), RecordedWake()
        reconciler = runtime.reconciler()
        passes: list[int] = []

        async def one_pass(**kw: Any) -> Any:
            result = await Reconciler.run_pass(reconciler, **kw)
            passes.append(result.leases_ended)
            stopping.set()  # this one pass is the scenario
            return result

        reconciler.run_pass = one_pass  # type: ignore[method-assign]
        runtime.reconciler = lambda: reconciler  # type: ignore[method-assign]
        await service.reconcile_loop(runtime, 3600.0, stopping, wake)
        assert passes == [2]
        assert wake.times_set == 1  # the next pass is due now, not in an hour
    finally:
        await runtime.close()
