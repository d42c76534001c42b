"""What every role of the PostgreSQL store stands on: the database it holds, its
named queries, and the few ways a statement is run on a connection (every row as a
record, the first one, a batch of events) that each role module uses.

``PostgresBase`` is the base of each role's mixin (``postgres_admission``,
``postgres_ledger``, ``postgres_records``, ``postgres_api``, ``postgres_retention``);
``postgres.PostgresStore`` composes them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from tidings.stores import rows
from tidings.stores.lifecycle import DatabaseStore
from tidings.stores.postgres_db import Conn, PostgresDatabase
from tidings.stores.reads import StoreReads

R = TypeVar("R")


async def insert_events(conn: Conn, sql: Mapping[str, str], events: Sequence[Any]) -> None:
    """Write event rows (``rows.event_row``'s shape) in one statement."""
    if len(events) == 1:
        await conn.execute(sql["event_insert"], events[0])
    elif events:
        # One statement, its rows one JSON parameter (see event_insert_columns): an
        # executemany would bind and adapt each row's ten parameters in Python on the
        # event loop, and a worker leaves one event per claim and one per outcome.
        await conn.execute(sql["event_insert_columns"], (json_rows(events),))


def json_rows(rows_: Iterable[Sequence[Any]]) -> str:
    """Rows as one JSON array of arrays, the parameter a ``jsonb_array_elements``
    statement reads (encoded in C; NaN and infinities refused here, as JSON has neither)."""
    return json.dumps(list(rows_), allow_nan=False)  # a tuple encodes as an array


async def fetch_all(conn: Conn, shape: rows.Shape[R], statement: str,
                    params: Any = None) -> list[R]:
    cur = await conn.execute(statement, params)
    return shape.all(cur.description, await cur.fetchall())


async def fetch_one(conn: Conn, shape: rows.Shape[R], statement: str,
                    params: Any = None) -> R | None:
    cur = await conn.execute(statement, params)
    row = await cur.fetchone()
    return None if row is None else shape.one(cur.description, row)


class PostgresBase(DatabaseStore[PostgresDatabase], StoreReads):
    """The database, its queries and how a read runs; the
    port's reads themselves are ``StoreReads``'s."""

    # ---------------------------------------------------------------- how a read runs

    def _array(self, values: Sequence[Any]) -> list[Any]:
        return list(values)

    def _pairs(self, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
        return {"addresses": [a for a, _ in pairs], "kinds": [k for _, k in pairs]}

    async def _read_tuples(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        async def fn(conn: Conn) -> list[tuple[Any, ...]]:
            cur = await conn.execute(self._sql[query], params)
            return await cur.fetchall()

        return await self.db.read(fn)

    async def _read_all(self, shape: rows.Shape[R], query: str, params: Any = None) -> list[R]:
        statement = self._sql[query]
        return await self.db.read(lambda conn: fetch_all(conn, shape, statement, params))

    async def _read_one(self, shape: rows.Shape[R], query: str, params: Any = None) -> R | None:
        statement = self._sql[query]
        return await self.db.read(lambda conn: fetch_one(conn, shape, statement, params))
