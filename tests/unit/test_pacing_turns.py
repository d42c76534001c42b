"""Turns (``tidings.delivery.pacing.turns``): sends waiting for a pacer slot ask one at a
time, lowest lane first, in arrival order within a lane; a waiter cancelled before or
just as its turn comes never keeps the turn from the others."""

from __future__ import annotations

import asyncio
import itertools

from tidings.core.clock import FakeClock
from tidings.delivery.pacing import MemoryPacerBackend, PaceLimits, Pacer
from tidings.delivery.pacing.turns import Turns


async def test_turns_go_lowest_lane_first_then_in_arrival_order() -> None:
    turns = Turns()
    order: list[str] = []
    await turns.take(1)  # someone holds the turn while the others arrive

    async def send(name: str, lane: int) -> None:
        await turns.take(lane)
        order.append(name)
        await asyncio.sleep(0)
        turns.give()

    tasks = [asyncio.create_task(send(name, lane)) for name, lane in
             (("bulk-1", 1), ("bulk-2", 1), ("reset", 0), ("bulk-3", 1), ("invoice", 0))]
    await asyncio.sleep(0)
    turns.give()
    await asyncio.gather(*tasks)

    assert order == ["reset", "invoice", "bulk-1", "bulk-2", "bulk-3"]


async def test_a_cancelled_waiter_never_holds_the_turn() -> None:
    turns = Turns()
    await turns.take(0)
    gone = asyncio.create_task(turns.take(0))
    handed = asyncio.create_task(turns.take(1))
    after = asyncio.create_task(turns.take(1))
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    turns.give()  # skips the cancelled waiter: ``handed`` has the turn
    handed.cancel()  # ...and is cancelled before it runs: the turn passes on
    await asyncio.sleep(0)
    await asyncio.wait_for(after, 1.0)
    turns.give()
    await asyncio.wait_for(turns.take(0), 1.0)  # free again


async def test_sends_asking_in_turns_share_the_pacers_reservations() -> None:
    # given a channel paced at 200/s, and 40 sends of one worker waiting for their
    # slots in turns (one asks the pacer at a time), as a worker with lanes does
    clock = FakeClock(start=100.0)
    pacer = Pacer(channel="email", limits=PaceLimits(quota_per_s=200.0, safety=1.0),
                  backend=MemoryPacerBackend(), clock=clock, worker="w")
    turns = Turns()
    starts: list[float] = []

    async def send() -> None:
        await turns.take(1)
        try:
            at = await pacer.slot(early_s=0.02, behind=turns.waiting)
        finally:
            turns.give()
        starts.append(await pacer.start(at))
        await pacer.release()

    sends = asyncio.gather(*(send() for _ in range(40)))
    for _ in range(20_000):
        if sends.done():
            break
        await asyncio.sleep(0)
        clock.advance(0.0005)
    await sends

    # then every send started, spaced by the pace, and a reservation (a write of the
    # shared state) served the sends whose starts fell in its horizon (0.1 s) together:
    # a handful of writes, not one per send (40 before the pacer was told who waits)
    assert len(starts) == 40 and pacer.forfeited == 0
    assert all(b - a >= 0.005 - 1e-9 for a, b in itertools.pairwise(sorted(starts)))
    assert pacer.reservations <= 10, pacer.reservations
