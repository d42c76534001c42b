"""Per-recipient throttles on SQLite (``Throttles``): a batch of reservations is one
write transaction (``BEGIN IMMEDIATE``), so the count each one reads is the count every
other process of the file wrote before it. What a reservation means is
``tidings.core.throttle``'s.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence

from tidings.core.throttle import Ask
from tidings.stores.sqlite_base import SqliteBase


def _reserve(conn: sqlite3.Connection, sql: Mapping[str, str], asked: Ask) -> bool:
    params = {"key": asked.key, "rule": asked.rule, "recipient": asked.recipient,
              "window_start": asked.window_start, "window_end": asked.window_end,
              "limit": asked.limit}
    if conn.execute(sql["throttle_hold_get"], params).fetchone() is not None:
        return True  # counted already: the same intent claimed again in this window
    if conn.execute(sql["throttle_count"], params).fetchone() is None:
        return False
    conn.execute(sql["throttle_hold_insert"], params)
    return True


def _release(conn: sqlite3.Connection, sql: Mapping[str, str], keys: Sequence[str]) -> int:
    released = 0
    for key in dict.fromkeys(keys):
        for rule, recipient, window_start in conn.execute(
                sql["throttle_hold_delete"], {"key": key}).fetchall():
            conn.execute(sql["throttle_uncount"], {"rule": rule, "recipient": recipient,
                                                   "window_start": window_start})
            released += 1
    return released


class SqliteThrottles(SqliteBase):
    """Reserving, handing back and purging throttle counts."""

    async def throttle_reserve(self, asks: Sequence[Ask]) -> list[bool]:
        if not asks:
            return []
        sql = self._sql
        return await self.db.write(lambda conn: [_reserve(conn, sql, a) for a in asks])

    async def throttle_release(self, keys: Sequence[str]) -> int:
        if not keys:
            return 0
        sql = self._sql
        return await self.db.write(lambda conn: _release(conn, sql, keys))

    async def throttle_sends(self, rule: str, recipient: str, window_start: float) -> int:
        rows = await self._read_tuples("throttle_sends", {
            "rule": rule, "recipient": recipient, "window_start": window_start})
        return int(rows[0][0])

    async def throttle_purge(self, *, before: float) -> int:
        sql = self._sql

        def purge(conn: sqlite3.Connection) -> int:
            conn.execute(sql["throttle_purge_holds"], {"before": before})
            return conn.execute(sql["throttle_purge_windows"], {"before": before}).rowcount

        return await self.db.write(purge)
