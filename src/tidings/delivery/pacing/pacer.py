"""The process side of pacing: hands out start slots to a worker's send tasks.

Slots come from the shared state in small batches (``horizon_s`` ahead), so a
process talks to the backend a few times per second, not once per request. A slot
started late by more than ``late_tolerance_s`` is forfeited rather than fired late:
firing it would crowd the next second's window. Finished slots are returned in
batches with the next reservation.

The guarantee is about the receiver's sliding second: the shared state spaces the
slots' start times across every process, and a request leaves at most
``late_tolerance_s`` after its slot's start. So nothing that can take long sits
between the two: a caller takes its slot ahead of the start (``slot``) and runs its
own last checks then, the look for another process's 429 begins ahead of the start
too, and ``start`` judges lateness after both, right before the request leaves.
After a stall (of the store, or of this process) the slots it made late are given
up, not used at once beside the on-time starts of the other processes.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from tidings.core import pacing as algorithm
from tidings.core.clock import Clock
from tidings.core.pacing import PaceLimits
from tidings.stores.base import PacerBackend

T = TypeVar("T")

#: The most a look for another process's 429 begins ahead of the start it clears.
MAX_LOOK_LEAD_S = 0.05
#: Per look, how fast the lead forgets a slow look.
LOOK_LEAD_DECAY = 0.97
#: A 429 whose pause ends within this of one in force is that pause (``Pacer.pause``).
SAME_PAUSE_S = 0.1


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
        self._behind = 0
        self._to_release = 0
        self._retry_at = 0.0
        self._paused_until = 0.0
        self._checked_at = float("-inf")
        self._looking: asyncio.Future[None] | None = None
        self._look_lead = 0.002
        self.streak = 0
        self.forfeited = 0
        self.reservations = 0

    @property
    def paused_until(self) -> float:
        return self._paused_until

    async def acquire(self) -> float:
        """Wait for a start slot and for its start; return the start. The caller must
        ``release()`` when its request ends."""
        return await self.start(await self.slot())

    async def slot(self, *, early_s: float = 0.0, behind: int = 0) -> float:
        """Take a start slot and return up to ``early_s`` before its start (its time,
        returned; earlier if the look for a pause needs longer); the caller runs its own
        last checks meanwhile, then ``start()`` right before its request leaves. The
        slot is the caller's until ``release()``.

        ``behind`` counts the sends queued behind this caller for their own slots (a
        worker's turns ask one at a time): a reservation made now takes slots for them
        too, so that one write of the shared state serves them all, not one each."""
        self._waiting += 1
        self._behind = behind
        try:
            while True:
                now = self._clock.now()
                if self._paused_until > now:
                    # A pause this process has heard of: no slot is used before it ends.
                    self._drop_slots()
                    await self._clock.sleep(self._paused_until - now)
                    continue
                at = await self._next_slot()
                if at is None:
                    await self._clock.sleep(max(0.0, self._retry_at - self._clock.now()))
                    continue
                now = self._clock.now()
                if self._paused_until > now or self._is_late(at, now):
                    # Reserved before a pause, or before a stall of this process or of
                    # the store: its time has passed, and it is not used late.
                    self._forfeit(late=self._paused_until <= now)
                    continue
                # Early enough for the look ahead of the start too (see ``start``).
                ahead = max(early_s, self._look_lead)
                if at - ahead > now:
                    await self._clock.sleep(at - ahead - now)
                return at
        finally:
            self._waiting -= 1
            self._behind = 0

    async def start(self, at: float) -> float:
        """Wait for the start ``at`` of the caller's slot; return when the request may
        leave: on time (at most ``late_tolerance_s`` after it), the channel not paused.
        A start that cannot be made so is forfeited, and the next free slot is waited for
        instead (its start returned): a late start would land beside the on-time starts
        of the other processes, and the receiver would count more than the budget in one
        second.

        Nothing awaited here delays a start past its slot unnoticed: the look for
        another process's 429 begins ahead of the start by about its own round trip,
        and lateness is judged once its answer is in."""
        while True:
            look_at = at - self._look_lead
            now = self._clock.now()
            if look_at > now:
                await self._clock.sleep(look_at - now)
            await self._look_for_pause()
            now = self._clock.now()
            if at > now:
                await self._clock.sleep(at - now)
                now = self._clock.now()
            paused = self._paused_until > now
            if not paused and not self._is_late(at, now):
                return at
            if paused:
                self._drop_slots()
            # Given back before the next is taken: callers each holding a slot while
            # waiting for another could hold the whole in-flight budget between them.
            self._forfeit(late=not paused)
            try:
                at = await self.slot()
            except BaseException:
                # The caller still releases the slot it had: that release is not to
                # count twice.
                self._to_release -= 1
                raise

    def _is_late(self, at: float, now: float) -> bool:
        # Without an interval a slot is only an in-flight token: late or not, it is good.
        return now - at > self._late and self.limits.interval_s > 0

    def _forfeit(self, *, late: bool) -> None:
        """Give a slot up unused: its in-flight place goes back with the next transaction;
        its time is not handed out again (it has passed, or falls in a pause)."""
        self.forfeited += late
        self._to_release += 1

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
        """Pause the whole channel (every process) until ``until``; return the 429 streak.

        A pause that ends no later than one already in force (give or take
        ``SAME_PAUSE_S``) is that one: the messages of one batch request answered 429
        together, or sends refused in the same instant, pause once and count once in
        the streak, not once each."""
        if until <= self._paused_until + SAME_PAUSE_S:
            return self.streak
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
        # How far ahead of a start the next looks begin: the slowest recent look, decaying
        # (a store slow for a moment keeps its looks early for a while), bounded so that
        # what the look says is never much older than the start it clears.
        took = self._clock.now() - now
        self._look_lead = min(MAX_LOOK_LEAD_S, max(took, self._look_lead * LOOK_LEAD_DECAY))

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

    def _reserve(self, want: int, release: int) -> Callable[
            [dict[str, Any] | None], tuple[dict[str, Any], algorithm.Grant]]:
        def reserve(state: dict[str, Any] | None) -> tuple[dict[str, Any], algorithm.Grant]:
            return algorithm.reserve(state, limits=self.limits, worker=self._worker, want=want,
                                     release=release, now=self._clock.now(),
                                     horizon_s=self._horizon, stale_s=self._stale)
        return reserve

    async def _refill(self) -> None:
        if self.limits.interval_s <= 0:
            # A worker starts a claimed batch's sends together, in one turn of the loop;
            # on an unpaced channel (a slot is only an in-flight token, never late) the
            # first to get here yields once so that the rest are waiting too, and one
            # reservation (one write of the shared state) serves the whole batch instead
            # of this send alone and then the others. A paced channel's reservations are
            # bounded by the horizon instead: a larger one would only start later.
            await asyncio.sleep(0)
        release, self._to_release = self._to_release, 0
        want = max(self._waiting + self._behind, 1)
        try:
            # ``now`` is read when the backend applies the reservation, not before: after a
            # wait for the state's lock, starts are handed out from then, not from a time
            # that has passed (such starts would only be forfeited).
            grant = await self._backend.pacer_transact(self.channel, self._reserve(want, release))
        except Exception:
            self._to_release += release  # not given back: kept for the next transaction
            raise
        self.reservations += 1
        self._slots.extend(grant.starts)
        self._retry_at = grant.retry_at
        self._paused_until = max(self._paused_until, grant.paused_until)
        self.streak = grant.streak
        self._checked_at = self._clock.now()

    async def _look_for_pause(self) -> None:
        # Another process's 429 must stop this one too: look at the shared state at
        # most every ``pause_check_s``. Starts that come due while a look is in flight
        # share it instead of each reading the state again.
        now = self._clock.now()
        if now - self._checked_at >= self._pause_check:
            if self._looking is None or self._looking.done():
                self._looking = asyncio.ensure_future(self._look(now))
            await asyncio.shield(self._looking)
