"""Drive a fake clock only while the code under test is idle.

A scenario that runs a worker as a task on a fake clock must move the clock itself.
Moved on a guess (after a ``sleep(0)``, say) the fake time runs ahead of the store's
thread, and what the scenario sees depends on how fast that thread was on the day.
``ClockDriver`` moves it only once nothing can run without it:

- no call is in flight on an executor (the SQLite store, its queue and the shared pacer
  state all run on the database thread through ``loop.run_in_executor``; so does
  ``asyncio.to_thread``), and
- the event loop has no callback ready to run besides the driver's own,

then it sets the clock to the earliest wake anyone is waiting for (``next_wake``) and
lets everything due then run to its next wait. Every fake instant is thereby worked
through to the end before the next one starts, whatever the speed of the machine.
When nothing waits on the fake clock at all, it polls in real time.

A wait in real time (``asyncio.wait_for`` in a transport's idle wait) is invisible to
the driver, which would let fake time run on while it lasts: the scenario harness puts
that wait on the fake clock while it drives (``Harness.run_until``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol

#: How long the driver sleeps in real time when nothing waits on the fake clock.
REAL_POLL_S = 0.001


class DrivenClock(Protocol):
    """What the driver needs of a fake clock."""

    def now(self) -> float: ...

    def set(self, when: float) -> None: ...

    def next_wake(self) -> float | None: ...


class ExecutorCalls:
    """The calls in flight on the running loop's executors, counted while installed.

    Install it before the code under test starts (a task created earlier may already
    have submitted a call the driver would not see)."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.quiet = asyncio.Event()
        self.quiet.set()

    @contextlib.contextmanager
    def installed(self) -> Iterator[ExecutorCalls]:
        loop = asyncio.get_running_loop()
        submit = loop.run_in_executor

        def counted(executor: Any, func: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
            future = submit(executor, func, *args)
            self.in_flight += 1
            self.quiet.clear()
            future.add_done_callback(self._landed)
            return future

        loop.run_in_executor = counted  # type: ignore[method-assign]
        try:
            yield self
        finally:
            loop.run_in_executor = submit  # type: ignore[method-assign]

    def _landed(self, _future: asyncio.Future[Any]) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self.quiet.set()


class ClockDriver:
    """Moves ``clock`` to its next wake whenever the event loop is idle (``calls``
    counts what is in flight on the executors)."""

    def __init__(self, clock: DrivenClock, calls: ExecutorCalls) -> None:
        self.clock = clock
        self.calls = calls
        self.steps = 0

    async def settle(self, observe: Callable[[], None] | None = None) -> None:
        """Return once no task can run before the clock moves; ``observe`` is called at
        every turn of the loop meanwhile."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(0)
            if observe is not None:
                observe()
            if self.calls.in_flight:
                await self.calls.quiet.wait()
                continue
            # CPython's queue of callbacks ready to run: empty means every other task is
            # parked on a future (the fake clock's, an event another task sets, a timer).
            if not loop._ready:  # type: ignore[attr-defined]
                return

    async def run_until(self, done: Callable[[], bool], *,
                        observe: Callable[[], None] | None = None) -> None:
        """Let the code under test run, moving the clock wake by wake while it is idle,
        until ``done()`` holds at an idle moment."""
        while True:
            await self.settle(observe)
            if done():
                return
            wake = self.clock.next_wake()
            if wake is None:
                await asyncio.sleep(REAL_POLL_S)
                continue
            self.steps += 1
            self.clock.set(max(wake, self.clock.now()))
