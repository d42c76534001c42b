"""Worker markers on SQLite (``tidings.core.liveness.Registry``): a row per running worker
with its host, pid and heartbeat, in table ``workers`` of the store's database."""

from __future__ import annotations

import sqlite3

from tidings.core.liveness import Ended, WorkerMark
from tidings.stores.sqlite_db import SqliteDatabase


class SqliteRegistry:
    """The ``Registry`` port on table ``workers``."""

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db
        self._sql = db.sql
        db.retain()

    async def _changed(self, query: str, params: dict[str, object]) -> bool:
        sql = self._sql[query]
        return bool(await self.db.write(lambda conn: conn.execute(sql, params).rowcount))

    async def register(self, worker_id: str, *, host: str, pid: int, now: float) -> bool:
        return await self._changed("worker_register", {
            "worker_id": worker_id, "host": host, "pid": pid, "now": now})

    async def beat(self, worker_id: str, *, now: float) -> bool:
        return await self._changed("worker_beat", {"worker_id": worker_id, "now": now})

    async def running(self) -> list[WorkerMark]:
        sql = self._sql["worker_list"]

        def fn(conn: sqlite3.Connection) -> list[WorkerMark]:
            return [WorkerMark(worker_id=w, host=h, pid=p, heartbeat_at=float(b),
                               ended_at=None if e is None else float(e),
                               marker_held=None if m is None else bool(m))
                    for w, h, p, b, e, m in conn.execute(sql)]

        return await self.db.read(fn)

    async def end(self, mark: WorkerMark, *, now: float, by: str) -> bool:
        return await self._changed("worker_end", {
            "worker_id": mark.worker_id, "now": now, "ended_by": by,
            "heartbeat_at": mark.heartbeat_at})

    async def settle(self, worker_id: str, *, now: float) -> None:
        await self._changed("worker_settle", {"worker_id": worker_id, "now": now})

    async def ended(self, worker_id: str) -> Ended | None:
        sql = self._sql["worker_ended"]

        def fn(conn: sqlite3.Connection) -> tuple[float | None, str | None, float | None] | None:
            row: tuple[float | None, str | None, float | None] | None = conn.execute(
                sql, {"worker_id": worker_id}).fetchone()
            return row

        row = await self.db.read(fn)
        if row is None:
            return None
        ended_at, ended_by, settled_at = row
        if ended_at is None:
            return None
        return Ended(ended_at=float(ended_at), ended_by=ended_by, settled=settled_at is not None)

    async def disconnect(self, mark: WorkerMark) -> int:
        """Nothing to end: a SQLite worker holds no session anyone else could see."""
        return 0

    async def remove(self, worker_id: str) -> None:
        await self._changed("worker_remove", {"worker_id": worker_id})

    async def close(self) -> None:
        await self.db.release()
