"""Worker markers on PostgreSQL (``tidings.core.liveness.Registry``): a row per running
worker in table ``workers``, and a session-level advisory lock the worker holds on a
connection of its own (``worker_register``). The lock lives exactly as long as that
backend: a killed worker's socket closes, its backend ends and ``pg_locks`` no longer
shows the lock. The heartbeat goes over the same connection, so a beat that succeeds
also proves the lock is still held."""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg

from tidings.core.errors import StoreError
from tidings.core.liveness import Ended, WorkerMark, application_name
from tidings.stores.postgres_db import CONNECT_TIMEOUT_S, Conn, PostgresDatabase


class PostgresRegistry:
    """The ``Registry`` port on table ``workers`` and advisory locks."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db
        self._sql = db.sql
        self._conn: Conn | None = None
        self._worker_id: str | None = None
        db.retain()

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()

    async def _dedicated(self) -> Conn:
        try:
            conn: Conn = await psycopg.AsyncConnection.connect(
                self.db.url, autocommit=True, connect_timeout=int(CONNECT_TIMEOUT_S),
                application_name=application_name(label=self.db.application_label))
        except psycopg.Error as exc:
            raise StoreError(f"{self.db.safe_url}: {exc}") from exc
        return conn

    async def register(self, worker_id: str, *, host: str, pid: int, now: float) -> bool:
        """Register on a fresh connection of its own and take the marker's lock there."""
        await self._drop()
        conn = await self._dedicated()
        try:
            cur = await conn.execute(self._sql["worker_register"], {
                "worker_id": worker_id, "host": host, "pid": pid, "now": now})
            row = await cur.fetchone()
        except psycopg.Error as exc:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()
            raise StoreError(f"{self.db.safe_url}: {exc}") from exc
        if row is None:  # ended, not yet settled
            await conn.close()
            return False
        if not row[0]:
            await conn.close()
            raise StoreError(f"worker {worker_id!r}: its marker lock is held by another session")
        self._conn, self._worker_id = conn, worker_id
        return True

    async def beat(self, worker_id: str, *, now: float) -> bool:
        """Beat over the marker's own connection (a lost connection means a lost lock:
        StoreError, and the worker registers again once its row is settled)."""
        for attempt in (1, 2):
            conn = self._conn
            if conn is None or conn.broken or conn.closed:
                await self._drop()
                conn = await self._relock(worker_id)
                if conn is None:
                    return False
            try:
                cur = await conn.execute(self._sql["worker_beat"],
                                         {"worker_id": worker_id, "now": now})
                break
            except psycopg.Error as exc:
                await self._drop()
                if attempt == 2 or not conn.broken:
                    raise StoreError(f"{self.db.safe_url}: {exc}") from exc
                # The session was lost since the last beat: once more on a new one.
        if cur.rowcount:
            return True
        await self._drop()  # declared gone: the lock goes with the session
        return False

    async def _relock(self, worker_id: str) -> Conn | None:
        """A new connection holding the marker's lock again; None if declared gone."""
        conn = await self._dedicated()
        try:
            cur = await conn.execute(self._sql["worker_relock"], {"worker_id": worker_id})
            row = await cur.fetchone()
        except psycopg.Error as exc:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()
            raise StoreError(f"{self.db.safe_url}: {exc}") from exc
        if row is None or not row[0]:
            await conn.close()
            if row is None:
                return None
            raise StoreError(f"worker {worker_id!r}: its marker lock is still held by its "
                             "old session")
        self._conn = conn
        return conn

    async def _pooled(self, query: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        sql = self._sql[query]

        async def fn(conn: Conn) -> list[tuple[Any, ...]]:
            cur = await conn.execute(sql, params)
            return await cur.fetchall() if cur.description else [(cur.rowcount,)]

        return await self.db.transaction(fn, block=False)

    async def running(self) -> list[WorkerMark]:
        return [WorkerMark(worker_id=w, host=h, pid=p, heartbeat_at=float(b),
                           ended_at=None if e is None else float(e), marker_held=bool(m))
                for w, h, p, b, e, m in await self._pooled("worker_list", {})]

    async def end(self, mark: WorkerMark, *, now: float, by: str) -> bool:
        [(count,)] = await self._pooled("worker_end", {
            "worker_id": mark.worker_id, "now": now, "ended_by": by,
            "heartbeat_at": mark.heartbeat_at})
        return bool(count)

    async def settle(self, worker_id: str, *, now: float) -> None:
        await self._pooled("worker_settle", {"worker_id": worker_id, "now": now})

    async def ended(self, worker_id: str) -> Ended | None:
        rows = await self._pooled("worker_ended", {"worker_id": worker_id})
        if not rows or rows[0][0] is None:
            return None
        ended_at, ended_by, settled_at = rows[0]
        return Ended(ended_at=float(ended_at), ended_by=ended_by, settled=settled_at is not None)

    async def disconnect(self, mark: WorkerMark) -> int:
        [(count,)] = await self._pooled("worker_disconnect", {
            "application_name": application_name(mark.host, mark.pid)})
        return int(count)

    async def remove(self, worker_id: str) -> None:
        conn = self._conn
        if conn is not None and not conn.broken and self._worker_id == worker_id:
            try:
                await conn.execute(self._sql["worker_remove"], {"worker_id": worker_id})
            finally:
                await self._drop()
            return
        await self._pooled("worker_remove", {"worker_id": worker_id})

    async def close(self) -> None:
        await self._drop()
        await self.db.release()
