"""Idle consumers waiting for a queue, and what wakes them.

A consumer that found its queue empty waits here instead of polling: until the
earliest hidden or delayed message becomes visible, until a publish wakes the queue,
or until its timeout. The consumer registers before asking when the next message is
due, so a publish that commits in between still wakes it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable


class Wakeups:
    """Per-queue futures of the consumers of this process that are waiting."""

    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}

    def wake(self, queue: str | None = None) -> None:
        """Wake the waiters of ``queue`` (of every queue with None)."""
        queues = list(self._waiters) if queue is None else [queue]
        for name in queues:
            for future in self._waiters.get(name, ()):
                if not future.done():
                    future.set_result(None)

    async def wait(self, queue: str, timeout_s: float,
                   ready_in: Callable[[], Awaitable[float | None]]) -> None:
        """Wait up to ``timeout_s``, less if ``ready_in()`` (seconds until the next
        message is visible, None for an empty queue) says so, or until woken."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(queue, set())
        waiters.add(future)
        try:
            due_in = await ready_in()
            if due_in is not None:
                timeout_s = min(timeout_s, due_in)
            if timeout_s <= 0 or future.done():
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(future, timeout=timeout_s)
        finally:
            waiters.discard(future)
            if not waiters:
                self._waiters.pop(queue, None)
