"""The process side of pacing: hands out start slots to a worker's send tasks.

Slots come from the shared state in small batches (``horizon_s`` ahead), so a
process talks to the backend a few times per second, not once per request. A slot
started late by more than ``late_tolerance_s`` is forfeited rather than fired late:
firing it would crowd the next second's window. Finished slots are returned in
batches with the next reservation.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol, TypeVar

from tidings.clock import Clock
from tidings.pacing import algorithm
from tidings.pacing.algorithm import PaceLimits

T = TypeVar("T")


class PacerBackend(Protocol):
    """Atomic read-modify-write of a channel's pacer state, shared by processes: the
    pacer's role of the store (every ``Store`` is one), or ``MemoryPacerBackend``."""

    async def pacer_transact(
        self, channel: str, fn: Callable[[dict[str, Any] | None], tuple[dict[str, Any], T]]
    ) -> T:
        """Atomically read the channel's pacer state (None if new), apply ``fn``
        (pure), write its new state, return its result. Shared by every process."""
        ...

    async def pacer_read(self, channel: str) -> dict[str, Any] | None: ...

    async def pacer_pause(self, channel: str, until: float) -> None:
        """Pause the channel until ``until`` (never shortening a pause) in one write
        that does not wait for ``pacer_transact``: what a 429 must reach at once."""
        ...

    async def pacer_paused_until(self, channel: str) -> float:
        """Until when ``pacer_pause`` paused the channel (0.0 if never)."""
        ...


class Pacer:
    """Paces one channel for one worker process against the channel's shared budget."""

    def __init__(
        self,
        *,
        channel: str,
        limits: PaceLimits,
        backend: PacerBackend,
        clock: Clock,
        worker: str,
        horizon_s: float = 0.1,
        late_tolerance_s: float = 0.01,
        stale_s: float = 120.0,
        pause_check_s: float | None = None,
    ) -> None:
        self.channel = channel
        self.limits = limits
        self._backend = backend
        self._clock = clock
        self._worker = worker
        self._horizon = horizon_s
        self._late = late_tolerance_s
        self._stale = stale_s
        # How stale this process's view of another process's 429 pause may be. A paced
        # channel (starts at least 2 ms apart) can afford a look before every start,
        # which narrows the window in which a pause is not yet seen to the time the
        # pausing process takes to write it; a fast unpaced one looks every 10 ms.
        self._pause_check = (pause_check_s if pause_check_s is not None
                             else 0.0 if limits.interval_s >= 0.002 else 0.01)
        self._slots: deque[float] = deque()
        self._lock = asyncio.Lock()
        self._waiting = 0
        self._to_release = 0
        self._retry_at = 0.0
        self._paused_until = 0.0
        self._checked_at = float("-inf")
        self._looking: asyncio.Future[None] | None = None
        self.streak = 0
        self.forfeited = 0
        self.reservations = 0

    @property
    def paused_until(self) -> float:
        return self._paused_until

    async def acquire(self) -> None:
        """Wait for a start slot; the caller must ``release()`` when its request ends."""
        self._waiting += 1
        try:
            while True:
                start = await self._next_slot()
                if start is None:
                    await self._clock.sleep(max(0.0, self._retry_at - self._clock.now()))
                    continue
                now = self._clock.now()
                if start > now:
                    await self._clock.sleep(start - now)
                    now = self._clock.now()
                if now - start > self._late and self.limits.interval_s > 0:
                    # A late start would crowd the next window. Without an interval the
                    # slot is only an in-flight token: late or not, it is good.
                    self.forfeited += 1
                    self._to_release += 1
                    continue
                if (now - self._checked_at >= self._pause_check
                        or self._paused_until > now) and await self._is_paused(now):
                    self._to_release += 1
                    continue
                return
        finally:
            self._waiting -= 1

    async def release(self) -> None:
        """Hand a finished slot back (batched with the next reservation)."""
        self._to_release += 1
        if self._to_release >= max(1, self.limits.max_in_flight // 4) and not self._lock.locked():
            await self.flush()

    async def flush(self) -> None:
        """Return finished slots now (call when idle so other processes may use them)."""
        async with self._lock:
            if self._to_release == 0:
                return
            count, self._to_release = self._to_release, 0
            try:
                await self._backend.pacer_transact(
                    self.channel,
                    partial(algorithm.give_back, worker=self._worker, release=count,
                            now=self._clock.now()),
                )
            except Exception:
                self._to_release += count  # not given back: kept for the next transaction
                raise

    async def announce(self) -> None:
        """Let the channel's other workers hear of this one now (``share_per_s``), before
        its first reservation."""
        await self._backend.pacer_transact(
            self.channel, partial(algorithm.give_back, worker=self._worker, release=0,
                                  now=self._clock.now()))

    async def share_per_s(self, *, heard_within_s: float) -> float | None:
        """This process's share of the channel's start rate: the rate the pacer aims at,
        split evenly over the workers heard from within ``heard_within_s`` (see
        ``algorithm.live_workers``); None for a channel with no rate (no quota and no
        minimum interval)."""
        interval = self.limits.interval_s
        if interval <= 0:
            return None
        state = await self._backend.pacer_read(self.channel)
        workers = algorithm.live_workers(state, worker=self._worker, now=self._clock.now(),
                                         within_s=heard_within_s)
        return 1.0 / interval / workers

    async def pause(self, until: float) -> int:
        """Pause the whole channel (every process) until ``until``; return the 429 streak."""
        self._paused_until = max(self._paused_until, until)
        self._drop_slots()
        # First the one-statement pause every other process reads before its next start
        # (a pacer transaction may first wait for the state's lock); then the state,
        # for reservations and the streak.
        await self._backend.pacer_pause(self.channel, until)
        self.streak = await self._backend.pacer_transact(
            self.channel, partial(algorithm.pause, until=until, now=self._clock.now())
        )
        return self.streak

    async def succeeded(self) -> None:
        """An accepted request ends a 429 streak."""
        if self.streak:
            self.streak = 0
            await self._backend.pacer_transact(self.channel, algorithm.clear_streak)

    async def _look(self, now: float) -> None:
        paused_until = await self._backend.pacer_paused_until(self.channel)
        self._checked_at = now
        self._paused_until = max(self._paused_until, paused_until)

    def _drop_slots(self) -> None:
        self._to_release += len(self._slots)
        self._slots.clear()

    async def _next_slot(self) -> float | None:
        if self._slots and not self._lock.locked():
            # A slot in hand and no refill under way: nothing awaits between this look
            # and the pop, so the lock, there to keep refills one at a time, is not
            # taken once per send.
            return self._slots.popleft()
        async with self._lock:
            if not self._slots:
                await self._refill()
            return self._slots.popleft() if self._slots else None

    async def _refill(self) -> None:
        release, self._to_release = self._to_release, 0
        want = max(self._waiting, 1)
        try:
            grant = await self._backend.pacer_transact(
                self.channel,
                partial(algorithm.reserve, limits=self.limits, worker=self._worker, want=want,
                        release=release, now=self._clock.now(), horizon_s=self._horizon,
                        stale_s=self._stale),
            )
        except Exception:
            self._to_release += release  # not given back: kept for the next transaction
            raise
        self.reservations += 1
        self._slots.extend(grant.starts)
        self._retry_at = grant.retry_at
        self._paused_until = max(self._paused_until, grant.paused_until)
        self.streak = grant.streak
        self._checked_at = self._clock.now()

    async def _is_paused(self, now: float) -> bool:
        # Another process's 429 must stop this one too: look at the shared state
        # at most every ``pause_check_s``. Starts that come due while a look is in
        # flight share it (it began within ``pause_check_s`` of them) instead of each
        # reading the state again.
        if now - self._checked_at >= self._pause_check:
            if self._looking is None or self._looking.done():
                self._looking = asyncio.ensure_future(self._look(now))
            await asyncio.shield(self._looking)
        if self._paused_until > now:
            self._drop_slots()
            self._retry_at = self._paused_until
            return True
        return False
