"""Digest windows and items on SQLite (``Digests``).

Each body of ``stores.digest_steps`` runs in one write transaction (``BEGIN
IMMEDIATE``), so adds, seals, cancels and closes of every process of the file take
turns: a close pass's page is sealed, admitted and finished before another closer can
read it."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

from tidings.core.model import IntentDraft
from tidings.stores import base
from tidings.stores.digest_steps import ADMIT, Body, DigestRole, Rows
from tidings.stores.sqlite_base import SqliteBase

#: The store's admission of drafts at a time, on the transaction's connection.
Admit = Callable[[sqlite3.Connection, list[IntentDraft], float], list[str]]


def _drive(conn: sqlite3.Connection, sql: Mapping[str, str], body: Body, admit: Admit) -> Any:
    try:
        name, params = next(body)
        while True:
            if name == ADMIT:
                rows: Rows = [(key,) for key in admit(conn, params["drafts"], params["now"])]
            else:
                rows = conn.execute(sql[name], params).fetchall()
            name, params = body.send(rows)
    except StopIteration as stop:
        return stop.value


class SqliteDigests(DigestRole, SqliteBase):
    """Digest windows and items."""

    def _admit_fn(self, drafts: list[IntentDraft], *, now: float,
                  publish_lease_until: float | None, progress: base.OccurrenceProgress | None,
                  enqueue: bool) -> Callable[[sqlite3.Connection], list[str]]:
        raise NotImplementedError  # the store's admission (SqliteAdmission)

    async def _run(self, body: Callable[[], Body], *, enqueue: bool = False) -> Any:
        sql = self._sql

        def admit(conn: sqlite3.Connection, drafts: list[IntentDraft], now: float
                  ) -> list[str]:
            return self._admit_fn(drafts, now=now, publish_lease_until=None, progress=None,
                                  enqueue=enqueue)(conn)

        return await self.db.write(lambda conn: _drive(conn, sql, body(), admit))

    async def _query(self, name: str, params: dict[str, Any]) -> Rows:
        return await self._read_tuples(name, params)
