"""Time as a port: the only module that reads the wall clock.

Everything else takes ``now`` as an argument or asks an injected ``Clock``; tests
use ``FakeClock`` and advance it instead of sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """Wall-clock time in epoch seconds, and a way to wait."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock, optionally shifted by ``offset`` seconds (the demo simulates 09:00)."""

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset

    def now(self) -> float:
        return time.time() + self.offset

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class FakeClock:
    """A clock that only moves when told to.

    With ``auto_advance=True`` a ``sleep`` moves the clock forward itself, so code
    under test that waits (a pacer, a backoff) runs instantly and deterministically.
    Otherwise sleepers wake when ``advance`` passes their deadline.
    """

    def __init__(self, start: float = 1_780_000_000.0, *, auto_advance: bool = False) -> None:
        self._now = start
        self.auto_advance = auto_advance
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self.slept: list[float] = []

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.slept.append(seconds)
        if self.auto_advance:
            self._now += seconds
            await asyncio.sleep(0)
            return
        if seconds == 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._seq), future))
        await future

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline has passed."""
        self.set(self._now + seconds)

    def set(self, when: float) -> None:
        self._now = max(self._now, when)
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)


def skew_s(timestamp: int, now: float) -> float:
    """How far ``timestamp`` (a signed request's Unix seconds) is from ``now``: infinitely
    far for one no float holds (a header of 400 digits), rather than OverflowError."""
    if not math.isfinite(now) or abs(timestamp) > 2**62:
        return math.inf
    return abs(now - timestamp)
