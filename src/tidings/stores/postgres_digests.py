"""Digest windows and items on PostgreSQL (``Digests``).

Each body of ``stores.digest_steps`` runs in one transaction; an add locks its key's
open window (``FOR UPDATE``) and opens one through a partial unique index, so writers
on every host make one open window per key, and a seal or a cancel waits for the add
in progress."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tidings.stores.digest_steps import Body, DigestRole, Rows
from tidings.stores.postgres_base import PostgresBase
from tidings.stores.postgres_db import Conn


async def _drive(conn: Conn, sql: Mapping[str, str], body: Body) -> Any:
    try:
        name, params = next(body)
        while True:
            cur = await conn.execute(sql[name], params)
            rows = await cur.fetchall() if cur.description is not None else []
            name, params = body.send(rows)
    except StopIteration as stop:
        return stop.value


class PostgresDigests(DigestRole, PostgresBase):
    """Digest windows and items."""

    async def _run(self, body: Body) -> Any:
        sql = self._sql

        async def fn(conn: Conn) -> Any:
            return await _drive(conn, sql, body)

        return await self.db.write(fn)

    async def _query(self, name: str, params: dict[str, Any]) -> Rows:
        return await self._read_tuples(name, params)
