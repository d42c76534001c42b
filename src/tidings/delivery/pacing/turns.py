"""Turns: a worker's sends ask the pacer for their slots one at a time, lowest lane first.

A worker holds up to a second of its pacer share in claimed sends, each waiting in its
own task for a start slot. Without an order among them, a ``transactional`` send
received a moment after a batch of ``bulk`` ones waits for all of them to start. With
turns, the sends waiting for a slot queue here by ``(lane, arrival)`` and one at a time
asks the pacer, so a lower lane's send takes the next slot this worker gets. The turn
is given up as soon as the pacer answers (shortly before the slot's start), so the
pacer always has the next ask in hand before the slot after it is due. The pacer is
told how many wait behind the turn, so that its reservations (a write of the shared
state) take slots for all of them at once rather than one write per slot.

Only for a paced channel with more than one lane: an unpaced channel's slots come at
once, and there is nothing to order.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools


class Turns:
    """One turn at a time, handed out by ``(lane, arrival)``."""

    def __init__(self) -> None:
        self._busy = False
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    @property
    def waiting(self) -> int:
        """How many wait for the turn (a cancelled waiter may still be counted)."""
        return len(self._waiting)

    async def take(self, lane: int) -> None:
        """Wait for the turn; the caller must ``give()`` it back."""
        if not self._busy and not self._waiting:
            self._busy = True
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (lane, next(self._arrivals), fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                # Handed the turn just as it was cancelled: pass it on.
                self.give()
            raise

    def give(self) -> None:
        """Hand the turn to the first waiting (a cancelled waiter is skipped)."""
        while self._waiting:
            _, _, fut = heapq.heappop(self._waiting)
            if not fut.done():
                fut.set_result(None)  # the turn passes on: still busy
                return
        self._busy = False
