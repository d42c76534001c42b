"""Turns (``tidings.delivery.pacing.turns``): sends waiting for a pacer slot ask one at a
time, lowest lane first, in arrival order within a lane; a waiter cancelled before or
just as its turn comes never keeps the turn from the others."""

from __future__ import annotations

import asyncio

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
