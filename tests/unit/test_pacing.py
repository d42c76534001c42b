"""Pacing: one budget per channel shared by every worker, enforced with a fake clock."""

import asyncio
import bisect
import itertools
from functools import partial

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core import pacing as algorithm
from tidings.core.clock import FakeClock
from tidings.core.errors import ConfigurationError
from tidings.delivery.pacing import MemoryPacerBackend, PaceLimits, Pacer, parse_quota


def test_quota_parsing() -> None:
    assert parse_quota("100/s") == 100
    assert parse_quota("6000/min") == 100
    with pytest.raises(ConfigurationError) as err:
        parse_quota("fast", "channels.email.quota")
    assert err.value.field == "channels.email.quota"


def test_reserve_spaces_starts_across_workers() -> None:
    limits = PaceLimits(quota_per_s=100, safety=1.0)
    reserve = partial(algorithm.reserve, limits=limits, release=0, horizon_s=0.1, stale_s=60)
    state, a = reserve(None, worker="a", want=5, now=10.0)
    state, b = reserve(state, worker="b", want=5, now=10.0)
    starts = sorted(a.starts + b.starts)
    gaps = [round(y - x, 9) for x, y in itertools.pairwise(starts)]
    assert gaps and all(g == 0.01 for g in gaps)


def test_max_in_flight_is_shared_and_freed_by_release_or_staleness() -> None:
    limits = PaceLimits(max_in_flight=3)
    state, a = algorithm.reserve(None, limits=limits, worker="a", want=3, release=0, now=0,
                                 horizon_s=0.1, stale_s=5)
    state, b = algorithm.reserve(state, limits=limits, worker="b", want=3, release=0, now=0,
                                 horizon_s=0.1, stale_s=5)
    assert len(a.starts) == 3 and b.starts == ()
    state, b = algorithm.reserve(state, limits=limits, worker="b", want=3, release=0, now=10,
                                 horizon_s=0.1, stale_s=5)
    assert len(b.starts) == 3  # worker a went silent: its slots were reclaimed


def test_pause_blocks_every_worker_until_it_ends() -> None:
    limits = PaceLimits()
    state, streak = algorithm.pause(None, until=12.0, now=10.0)
    assert streak == 1
    state, grant = algorithm.reserve(state, limits=limits, worker="b", want=1, release=0,
                                     now=11.9, horizon_s=0.1, stale_s=60)
    assert grant.starts == () and grant.retry_at == 12.0
    state, grant = algorithm.reserve(state, limits=limits, worker="b", want=1, release=0,
                                     now=12.0, horizon_s=0.1, stale_s=60)
    assert grant.starts == (12.0,)


async def test_pacers_in_two_workers_never_beat_the_quota() -> None:
    clock = FakeClock(start=100.0)
    backend = MemoryPacerBackend()
    limits = PaceLimits(quota_per_s=50, max_in_flight=1000)
    pacers = [Pacer(channel="sms", limits=limits, backend=backend, clock=clock, worker=w)
              for w in ("w1", "w2")]
    starts: list[float] = []

    async def send(pacer: Pacer) -> None:
        await pacer.acquire()
        starts.append(clock.now())
        await pacer.release()

    tasks = [asyncio.create_task(send(pacers[i % 2])) for i in range(150)]
    while not all(t.done() for t in tasks):
        await asyncio.sleep(0)
        clock.advance(0.001)
    windows: dict[int, int] = {}
    for t in starts:
        windows[int(t)] = windows.get(int(t), 0) + 1
    assert len(starts) == 150
    assert max(windows.values()) <= 50
    full = [windows[w] for w in sorted(windows)[:-1]]
    assert min(full) >= 45  # the budget is used, not wasted


async def test_a_429_in_one_worker_pauses_the_other() -> None:
    clock = FakeClock(start=100.0)
    backend = MemoryPacerBackend()
    limits = PaceLimits(max_in_flight=10)
    a = Pacer(channel="email", limits=limits, backend=backend, clock=clock, worker="a")
    b = Pacer(channel="email", limits=limits, backend=backend, clock=clock, worker="b")
    await a.pause(102.0)
    waiter = asyncio.create_task(b.acquire())
    for _ in range(1999):
        clock.advance(0.001)
        await asyncio.sleep(0)
        assert not waiter.done(), f"started at {clock.now()} inside the pause"
    for _ in range(200):
        clock.advance(0.001)
        await asyncio.sleep(0)
    assert waiter.done() and clock.now() >= 102.0


async def test_late_slots_are_forfeited_not_fired_in_a_burst() -> None:
    clock = FakeClock(start=0.0)
    backend = MemoryPacerBackend()
    pacer = Pacer(channel="email", limits=PaceLimits(quota_per_s=100, safety=1.0),
                  backend=backend, clock=clock, worker="w", late_tolerance_s=0.005)
    await pacer.acquire()  # slot at 0.0
    second = asyncio.create_task(pacer.acquire())
    for _ in range(5):
        await asyncio.sleep(0)  # it reserved the slot at 0.01 and sleeps until then
    clock.advance(0.5)  # the process stalled past it
    while not second.done():
        await asyncio.sleep(0)
        clock.advance(0.001)
    assert pacer.forfeited == 1
    assert clock.now() >= 0.5  # the late slot was not used; a fresh one was


@pytest.mark.parametrize(("quota", "paced"), [
    (1000, 980.0),  # 2 % of a large quota is more than 2 requests
    (200, 196.0),
    (50, 48.0),     # 2 % of 50 would be one request: two are kept
    (10, 8.0),
    (2, 1.0),       # never below half the quota
])
def test_the_pacer_keeps_two_requests_a_second_below_the_quota_at_least(
        quota: float, paced: float) -> None:
    limits = PaceLimits(quota_per_s=quota, safety=0.98)
    assert limits.paced_per_s == paced
    assert limits.interval_s == pytest.approx(1 / paced)


def test_safety_one_asks_for_no_headroom() -> None:
    assert PaceLimits(quota_per_s=50, safety=1.0).paced_per_s == 50


class FailingBackend(MemoryPacerBackend):
    """The memory backend, but its next ``fail`` transactions raise (a locked store)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = 0

    async def pacer_transact(self, channel, fn):  # type: ignore[no-untyped-def]
        if self.fail:
            self.fail -= 1
            raise OSError("pacer state locked")
        return await super().pacer_transact(channel, fn)


async def test_slots_whose_return_failed_are_returned_with_the_next_transaction() -> None:
    # given two requests in flight, the most the channel allows
    clock = FakeClock(start=100.0)
    backend = FailingBackend()
    limits = PaceLimits(max_in_flight=2)
    pacer = Pacer(channel="email", limits=limits, backend=backend, clock=clock, worker="w")
    for _ in range(2):
        await pacer.acquire()
    # when the first release's transaction fails, it raises, and the slot is kept
    backend.fail = 1
    with pytest.raises(OSError):
        await pacer.release()
    await pacer.release()
    # then the second release gave both back: two more starts are free
    state = await backend.pacer_read("email")
    assert state is not None and state["inflight"]["w"][0] == 0
    for _ in range(2):
        await asyncio.wait_for(pacer.acquire(), timeout=1)


async def test_slots_whose_return_failed_in_a_reservation_are_kept() -> None:
    clock = FakeClock(start=100.0, auto_advance=True)
    backend = FailingBackend()
    pacer = Pacer(channel="email", limits=PaceLimits(max_in_flight=8), backend=backend,
                  clock=clock, worker="w")
    for _ in range(8):
        await pacer.acquire()
    for _ in range(7):
        pacer._to_release += 1  # finished, waiting for the next reservation
    backend.fail = 1
    with pytest.raises(OSError):
        await pacer._refill()
    assert pacer._to_release == 7


# ---------------------------------------------------------------- a worker's share


@given(heartbeats=st.dictionaries(st.sampled_from("abcdefgh"),
                                  st.floats(min_value=0, max_value=100), max_size=8),
       within=st.floats(min_value=0, max_value=100))
def test_live_workers_count_those_heard_within_the_window_and_the_asker(
        heartbeats: dict[str, float], within: float) -> None:
    state = {"inflight": {name: [1, at] for name, at in heartbeats.items()}}
    live = algorithm.live_workers(state, worker="me", now=100.0, within_s=within)
    assert live == 1 + sum(1 for at in heartbeats.values() if at >= 100.0 - within)
    # the asker counts once whether or not the state has heard from it yet
    state["inflight"]["me"] = [0, 0.0]
    assert algorithm.live_workers(state, worker="me", now=100.0, within_s=within) == live
    assert algorithm.live_workers(None, worker="me", now=100.0, within_s=within) == 1


async def test_a_workers_share_is_the_paced_rate_over_the_live_workers() -> None:
    # given a channel paced at 100/s (safety 1) and three workers of it (a pacer's waits
    # move the fake clock)
    clock = FakeClock(1000.0, auto_advance=True)
    backend = MemoryPacerBackend()
    limits = PaceLimits(quota_per_s=100, safety=1.0)
    pacers = [Pacer(channel="email", limits=limits, backend=backend, clock=clock, worker=name)
              for name in ("a", "b", "c")]

    # when only one has talked to the shared state, then it counts itself alone
    assert await pacers[0].share_per_s(heard_within_s=5) == pytest.approx(100)

    # when all three have reserved and returned a slot
    for pacer in pacers:
        await pacer.acquire()
        await pacer.release()
        await pacer.flush()

    # then each one's share is a third of the rate
    assert [await p.share_per_s(heard_within_s=5) for p in pacers] == [
        pytest.approx(100 / 3)] * 3

    # and once two have been silent beyond the window (dead, or idle), the third has it all
    clock.advance(6)
    await pacers[2].acquire()
    await pacers[2].release()
    await pacers[2].flush()
    assert await pacers[2].share_per_s(heard_within_s=5) == pytest.approx(100)


async def test_an_unpaced_channel_has_no_share() -> None:
    pacer = Pacer(channel="email", limits=PaceLimits(max_in_flight=8),
                  backend=MemoryPacerBackend(), clock=FakeClock(), worker="a")
    assert await pacer.share_per_s(heard_within_s=5) is None
    interval_only = Pacer(channel="email", limits=PaceLimits(min_interval_s=0.5),
                          backend=MemoryPacerBackend(), clock=FakeClock(), worker="a")
    assert await interval_only.share_per_s(heard_within_s=5) == pytest.approx(2.0)


# ---------------------------------------------------------------- a stalled store


QUOTA = 200
SAFETY = 0.97  # what tests/acceptance/test_fleet_hosts.py runs at
RTT_S = 0.001


class StallingBackend(MemoryPacerBackend):
    """The memory backend behind a network: every call takes ``RTT_S``, and a call made
    while the store is stalled (``stalled`` = (from, until)) answers at ``until``, as when
    a cut-off process holds the pacer row's lock, or the server stops answering."""

    def __init__(self, clock: FakeClock, rtt_s: float = RTT_S) -> None:
        super().__init__()
        self.clock = clock
        self.rtt_s = rtt_s
        self.stalled = (0.0, 0.0)

    async def _trip(self) -> None:
        begin, end = self.stalled
        now = self.clock.now()
        await self.clock.sleep((end - now) if begin <= now < end else self.rtt_s)

    async def pacer_transact(self, channel, fn):  # type: ignore[no-untyped-def]
        await self._trip()
        return await super().pacer_transact(channel, fn)

    async def pacer_read(self, channel: str):  # type: ignore[no-untyped-def]
        await self._trip()
        return await super().pacer_read(channel)

    async def pacer_pause(self, channel: str, until: float) -> None:
        await self._trip()
        await super().pacer_pause(channel, until)

    async def pacer_paused_until(self, channel: str) -> float:
        await self._trip()
        return await super().pacer_paused_until(channel)


def busiest_second(starts: list[float]) -> int:
    """The most starts in any sliding one-second window [t, t + 1)."""
    times = sorted(starts)
    return max((bisect.bisect_left(times, t + 1.0) - i for i, t in enumerate(times)),
               default=0)


async def drive(clock: FakeClock, until: float, step_s: float = 0.0005) -> None:
    """Move the fake clock to ``until`` in small steps, letting every task run between."""
    while clock.now() < until:
        clock.advance(step_s)
        for _ in range(4):
            await asyncio.sleep(0)


async def run_fleet(stall: tuple[float, float], seconds: float, *, check_s: float = 0.0,
                    rtt_s: float = RTT_S) -> tuple[list[float], list[Pacer]]:
    """Six processes' pacers at ``QUOTA``/s with ``SAFETY``, forty sends each always
    waiting; each send holds its slot 20 ms (the provider's answer). Returns when every
    request left (after ``check_s`` of the caller's own checks between its slot and its
    start), in seconds from the start; every call of the store takes ``rtt_s``."""
    clock = FakeClock(start=0.0)
    backend = StallingBackend(clock, rtt_s)
    backend.stalled = stall
    limits = PaceLimits(quota_per_s=QUOTA, safety=SAFETY)
    pacers = [Pacer(channel="email", limits=limits, backend=backend, clock=clock,
                    worker=f"w{n}") for n in range(6)]
    starts: list[float] = []

    async def sender(pacer: Pacer) -> None:
        while True:
            if check_s:
                at = await pacer.slot(early_s=2 * check_s)
                await clock.sleep(check_s)  # e.g. a cancellation re-read from the store
                await pacer.start(at)
            else:
                await pacer.acquire()
            starts.append(clock.now())
            await clock.sleep(0.02)
            await pacer.release()

    tasks = [asyncio.create_task(sender(p)) for p in pacers for _ in range(40)]
    try:
        await drive(clock, seconds)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return starts, pacers


async def test_a_stalled_store_never_makes_a_sliding_second_over_the_quota() -> None:
    # given six processes sending at the quota through one shared pacer state, when the
    # store stalls for 2.5 s (a cut-off worker holds the pacer row's lock until the
    # reconciler ends its session) and then answers again
    starts, _ = await run_fleet(stall=(2.0, 4.5), seconds=7.0)

    # then no sliding second (as the receiver counts) holds more than the quota: starts
    # that came due during the stall are not made at once beside the on-time ones
    assert busiest_second(starts) <= QUOTA, busiest_second(starts)
    # and the budget is used before the stall and once the store answers again
    paced = QUOTA * SAFETY
    before = sum(1 for t in starts if 1.0 <= t < 2.0)
    after = sum(1 for t in starts if 5.0 <= t < 6.0)
    assert before >= 0.97 * paced and after >= 0.97 * paced, (before, after)


async def test_a_store_slower_than_the_late_tolerance_still_has_the_budget_used() -> None:
    # given a store whose every answer takes 30 ms, three times the pacer's tolerance for
    # a late start (a loaded server, a distant one)
    starts, pacers = await run_fleet(stall=(0.0, 0.0), seconds=4.0, rtt_s=0.03)

    # then the look for a pause, begun ahead of each start, is in by then: the starts
    # are on time, never over the quota, and the budget is used
    assert busiest_second(starts) <= QUOTA
    used = sum(1 for t in starts if 2.0 <= t < 3.0)
    assert used >= 0.97 * QUOTA * SAFETY, used
    # (a few at first, before the look's lead has learnt the store's pace)
    assert sum(p.forfeited for p in pacers) < 0.02 * len(starts)


async def test_checks_that_outlast_the_slot_take_a_later_one_not_a_late_start() -> None:
    # given callers whose own checks between slot and start take 10 ms where they took
    # the slot 20 ms early, and a store that stalls 2.5 s
    starts, _ = await run_fleet(stall=(2.0, 4.5), seconds=7.0, check_s=0.01)
    # then no sliding second is over the quota, and the budget is used after the stall
    assert busiest_second(starts) <= QUOTA
    assert sum(1 for t in starts if 5.0 <= t < 6.0) >= 0.97 * QUOTA * SAFETY


async def test_starts_a_stall_made_late_take_fresh_slots_though_they_held_the_whole_budget(
        ) -> None:
    # given two callers holding the channel's whole in-flight budget (two slots)
    clock = FakeClock(start=0.0)
    pacer = Pacer(channel="email", limits=PaceLimits(quota_per_s=100, max_in_flight=2),
                  backend=MemoryPacerBackend(), clock=clock, worker="w")
    slots = [await pacer.slot(early_s=0.05) for _ in range(2)]

    # when the process stalls past both starts before it makes them
    clock.advance(0.5)
    starting = asyncio.gather(*(pacer.start(at) for at in slots))
    for _ in range(2000):
        if starting.done():
            break
        await asyncio.sleep(0)
        clock.advance(0.001)

    # then each late slot was given back before another was taken (holding it while
    # waiting for the next, the two would wait for each other for ever), and both start
    # on fresh slots, after the stall
    assert starting.done(), "the callers wait for each other's slots"
    assert all(at >= 0.5 for at in starting.result()) and pacer.forfeited == 2


async def test_sends_started_in_one_turn_share_one_reservation() -> None:
    # given an unpaced channel with room for every send of a batch
    clock = FakeClock(start=100.0)
    backend = MemoryPacerBackend()
    pacer = Pacer(channel="email", limits=PaceLimits(max_in_flight=500), backend=backend,
                  clock=clock, worker="w")
    # when a worker starts a claimed batch of 200 sends together, as it does
    starts = [asyncio.ensure_future(pacer.acquire()) for _ in range(200)]
    await asyncio.gather(*starts)
    # then one write of the shared state handed out all 200 slots, not one and then 199
    assert pacer.reservations == 1
    state = await backend.pacer_read("email")
    assert state is not None and state["inflight"]["w"][0] == 200


async def test_a_batch_answered_429_together_pauses_once_and_counts_once() -> None:
    # given a channel whose sends of one batch request were all answered 429
    clock = FakeClock(start=100.0)
    backend = MemoryPacerBackend()
    writes: list[float] = []
    real_pause = backend.pacer_pause

    async def pause(channel: str, until: float) -> None:
        writes.append(until)
        await real_pause(channel, until)

    backend.pacer_pause = pause  # type: ignore[method-assign]
    pacer = Pacer(channel="email", limits=PaceLimits(max_in_flight=500), backend=backend,
                  clock=clock, worker="w")
    # when each of its 100 sends asks for the pause, a few microseconds apart
    streaks = [await pacer.pause(105.0 + i * 1e-5) for i in range(100)]
    # then the pause was written once, and the streak moved once
    assert len(writes) == 1 and set(streaks) == {1}
    assert await backend.pacer_paused_until("email") == 105.0
    # and a later, longer pause is a new one
    assert await pacer.pause(110.0) == 2 and len(writes) == 2
