"""Per-recipient throttles on PostgreSQL (``Throttles``): a batch of reservations is one
transaction, each a conditional upsert of its count (``sends < limit``) that locks the
count's row, so workers on every host share one count per recipient and window. The
batch takes its count rows in (rule, recipient, window) order, so two batches that
share recipients cannot deadlock. What a reservation means is ``tidings.core.throttle``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tidings.core.throttle import Ask
from tidings.stores.postgres_base import PostgresBase
from tidings.stores.postgres_db import Conn


async def _reserve(conn: Conn, sql: Mapping[str, str], asked: Ask) -> bool:
    params = {"key": asked.key, "rule": asked.rule, "recipient": asked.recipient,
              "window_start": asked.window_start, "window_end": asked.window_end,
              "limit": asked.limit}
    cur = await conn.execute(sql["throttle_hold_get"], params)
    if await cur.fetchone() is not None:
        return True  # counted already: the same intent claimed again in this window
    cur = await conn.execute(sql["throttle_count"], params)
    if await cur.fetchone() is None:
        return False
    await conn.execute(sql["throttle_hold_insert"], params)
    return True


class PostgresThrottles(PostgresBase):
    """Reserving, handing back and purging throttle counts."""

    async def throttle_reserve(self, asks: Sequence[Ask]) -> list[bool]:
        if not asks:
            return []
        sql = self._sql
        order = sorted(range(len(asks)), key=lambda i: (
            asks[i].rule, asks[i].recipient, asks[i].window_start, asks[i].key))

        async def fn(conn: Conn) -> list[bool]:
            granted = [False] * len(asks)
            for i in order:
                granted[i] = await _reserve(conn, sql, asks[i])
            return granted

        return await self.db.write(fn)

    async def throttle_release(self, keys: Sequence[str]) -> int:
        if not keys:
            return 0
        sql = self._sql

        async def fn(conn: Conn) -> int:
            held: list[tuple[str, str, float]] = []
            for key in dict.fromkeys(keys):
                cur = await conn.execute(sql["throttle_hold_delete"], {"key": key})
                held.extend(await cur.fetchall())
            for rule, recipient, window_start in sorted(held):
                await conn.execute(sql["throttle_uncount"], {
                    "rule": rule, "recipient": recipient, "window_start": window_start})
            return len(held)

        return await self.db.write(fn)

    async def throttle_sends(self, rule: str, recipient: str, window_start: float) -> int:
        rows = await self._read_tuples("throttle_sends", {
            "rule": rule, "recipient": recipient, "window_start": window_start})
        return int(rows[0][0])

    async def throttle_purge(self, *, before: float) -> int:
        sql = self._sql

        async def fn(conn: Conn) -> int:
            await conn.execute(sql["throttle_purge_holds"], {"before": before})
            cur = await conn.execute(sql["throttle_purge_windows"], {"before": before})
            return cur.rowcount

        return await self.db.write(fn)
