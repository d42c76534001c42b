"""Digest windows and items on SQLite (``Digests``).

Each body of ``stores.digest_steps`` runs in one write transaction (``BEGIN
IMMEDIATE``), so adds, seals and cancels of every process of the file take turns."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from tidings.stores.digest_steps import Body, DigestRole, Rows
from tidings.stores.sqlite_base import SqliteBase


def _drive(conn: sqlite3.Connection, sql: Mapping[str, str], body: Body) -> Any:
    try:
        name, params = next(body)
        while True:
            rows = conn.execute(sql[name], params).fetchall()
            name, params = body.send(rows)
    except StopIteration as stop:
        return stop.value


class SqliteDigests(DigestRole, SqliteBase):
    """Digest windows and items."""

    async def _run(self, body: Body) -> Any:
        sql = self._sql
        return await self.db.write(lambda conn: _drive(conn, sql, body))

    async def _query(self, name: str, params: dict[str, Any]) -> Rows:
        return await self._read_tuples(name, params)
