"""Time as a port: the only module that reads the wall clock.

Everything else takes ``now`` as an argument or asks an injected ``Clock``; tests
use ``FakeClock`` and advance it instead of sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

log = logging.getLogger("tidings.clock")

#: A correction (or a host's own clock off the reference) past this is logged.
NOTED_SKEW_S = 1.0


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


class ReferenceClock:
    """The store's clock, kept between readings by this host's monotonic clock.

    Leases, heartbeats, pacing windows and expiry compare times written by one process
    with times read by another, on other hosts: they must come from one clock. The
    reference is the store's (``Lifecycle.reference_time``: PostgreSQL's
    ``clock_timestamp()``, for SQLite the time the kernel stamps on a file write beside
    the database). ``calibrate`` reads it a few times and keeps the reading with the
    shortest round trip, taking its midpoint as the moment it was read; ``now`` is then
    this host's monotonic clock plus that offset. A host whose wall clock is wrong, or
    is stepped while it runs, keeps the reference's time: the monotonic clock is never
    stepped, and its rate drifts by parts per million. ``keep`` reads the reference
    again every ``every_s`` (so a reference that was itself stepped is followed) and
    logs a correction or a host clock off the reference by more than a second.

    ``now`` never goes back: a calibration that finds the reference behind what was
    already handed out holds time still until the reference catches up, so no lease or
    window this process wrote is shortened.
    """

    def __init__(self, read: Callable[[], Awaitable[float]], *, offset: float = 0.0,
                 samples: int = 3, monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self._read = read
        self.offset = offset
        self.samples = max(1, samples)
        self._monotonic = monotonic
        self._wall = wall
        # Until the first calibration: this host's wall clock.
        self._base = wall() - monotonic()
        self._last = -math.inf
        self.calibrated = False
        self.uncertainty_s = math.inf
        """Half the round trip of the reading kept: how far ``now`` may be off the
        reference (plus the reference's own resolution)."""
        self.host_skew_s = 0.0
        """This host's wall clock minus the reference, at the last calibration."""

    def now(self) -> float:
        t = self._monotonic() + self._base
        if t > self._last:
            self._last = t
        return self._last + self.offset

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    async def calibrate(self) -> float:
        """Read the reference; return the correction applied to ``now`` (seconds)."""
        best: tuple[float, float, float] | None = None
        for _ in range(self.samples):
            before = self._monotonic()
            reference = await self._read()
            after = self._monotonic()
            if not math.isfinite(reference):
                raise ValueError(f"the store's clock read {reference!r}")
            trip = after - before
            if best is None or trip < best[0]:
                # The reference as of ``after``: read half a round trip earlier.
                best = (trip, reference - (before + after) / 2,
                        self._wall() - (reference + trip / 2))
        assert best is not None
        trip, base, host_skew = best
        correction = 0.0 if not self.calibrated else base - self._base
        if self.calibrated and abs(correction) > NOTED_SKEW_S:
            log.warning("the store's clock moved; following it",
                        extra={"moved_s": round(correction, 3)})
        if abs(host_skew) > NOTED_SKEW_S and (
                not self.calibrated or abs(host_skew - self.host_skew_s) > NOTED_SKEW_S):
            # A field, not in the text: log scrubbing reads "+3600.000" as a phone number.
            log.warning("this host's clock is off the store's; keeping the store's time",
                        extra={"host_skew_s": round(host_skew, 3)})
        self._base, self.uncertainty_s, self.host_skew_s = base, trip / 2, host_skew
        self.calibrated = True
        return correction

    async def keep(self, every_s: float) -> None:
        """Calibrate every ``every_s`` seconds until cancelled; a reading that fails
        (the store down) keeps the last offset, and is tried again next time."""
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.calibrate()
            except Exception as exc:  # logged; the monotonic clock runs on meanwhile
                log.info("reading the store's clock failed; keeping the last offset",
                         extra={"error": str(exc)})


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
