"""Digest windows and items on PostgreSQL (``Digests``).

Each body of ``stores.digest_steps`` runs in one transaction; an add locks its key's
open window (``FOR UPDATE``) and opens one through a partial unique index, so writers
on every host make one open window per key, and a seal or a cancel waits for the add
in progress. A close pass's page is locked by its transaction (``SKIP LOCKED`` by the
others) until its digests are admitted and it is finished, or rolled back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from tidings.core.model import IntentDraft
from tidings.stores.digest_steps import ADMIT, Body, DigestRole, Rows
from tidings.stores.postgres_admission import admission_steps
from tidings.stores.postgres_base import PostgresBase
from tidings.stores.postgres_db import Conn
from tidings.stores.postgres_steps import run_async

#: The store's admission of drafts at a time, on the transaction's connection.
Admit = Callable[[Conn, list[IntentDraft], float], Awaitable[list[str]]]


async def _drive(conn: Conn, sql: Mapping[str, str], body: Body, admit: Admit) -> Any:
    try:
        name, params = next(body)
        while True:
            if name == ADMIT:
                keys = await admit(conn, params["drafts"], params["now"])
                rows: Rows = [(key,) for key in keys]
            else:
                cur = await conn.execute(sql[name], params)
                rows = await cur.fetchall() if cur.description is not None else []
            name, params = body.send(rows)
    except StopIteration as stop:
        return stop.value


class PostgresDigests(DigestRole, PostgresBase):
    """Digest windows and items."""

    async def _run(self, body: Callable[[], Body], *, enqueue: bool = False) -> Any:
        sql = self._sql

        async def admit(conn: Conn, drafts: list[IntentDraft], now: float) -> list[str]:
            return await run_async(conn, admission_steps(sql, drafts, now=now,
                                                         enqueue=enqueue))

        async def fn(conn: Conn) -> Any:
            return await _drive(conn, sql, body(), admit)  # a fresh body each attempt

        return await self.db.write(fn)

    async def _query(self, name: str, params: dict[str, Any]) -> Rows:
        return await self._read_tuples(name, params)
