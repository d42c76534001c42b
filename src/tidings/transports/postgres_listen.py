"""``LISTEN tidings_ready``: one connection per process wakes its idle consumers.

Every transaction that puts messages on a queue notifies ``tidings_ready`` with
``"<schema>:<queue>"``; PostgreSQL delivers it at commit (never on rollback) to every
listening connection of the database, on every machine. The listener keeps one
dedicated connection (outside the pool, which must not hold a session-level LISTEN),
reconnects with backoff when it is lost, and wakes every queue after reconnecting,
since notifications sent meanwhile are gone. While it is disconnected, consumers fall
back to polling (``connected`` is False).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

import psycopg

from tidings.transports.wakeups import Wakeups

log = logging.getLogger(__name__)

#: Longest pause between reconnection attempts, in seconds.
RECONNECT_CAP_S = 5.0


class ReadyListener:
    """Listens for ready notifications of one database schema and wakes ``wakeups``."""

    def __init__(self, url: str, safe_url: str, sql: Mapping[str, str],
                 wakeups: Wakeups) -> None:
        self._url = url
        self._safe_url = safe_url
        self._sql = sql
        self._wakeups = wakeups
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def start(self) -> None:
        """Start listening in the background (idempotent)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="tidings-listen")

    async def wait_connected(self, timeout_s: float) -> bool:
        """Wait until listening (tests, and callers that want no polling at all)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), timeout=timeout_s)
        return self.connected

    async def _run(self) -> None:
        pause = 0.1
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                        self._url, autocommit=True, connect_timeout=5) as conn:
                    cur = await conn.execute(self._sql["listen_schema"])
                    row = await cur.fetchone()
                    prefix = f"{row[0] if row else ''}:"
                    await conn.execute(self._sql["listen_ready"])
                    self._connected.set()
                    pause = 0.1
                    self._wakeups.wake()  # what was published while not listening
                    async for note in conn.notifies():
                        if note.payload.startswith(prefix):
                            self._wakeups.wake(note.payload[len(prefix):])
            except Exception as exc:  # whatever broke it, listen again
                if self.connected:
                    log.warning("lost the LISTEN connection to %s (%s); polling until it "
                                "is back", self._safe_url, type(exc).__name__)
            finally:
                self._connected.clear()
            await asyncio.sleep(pause)
            pause = min(RECONNECT_CAP_S, pause * 2)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
