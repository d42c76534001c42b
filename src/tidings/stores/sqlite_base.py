"""What every role of the SQLite store stands on: the database it holds, its named
queries, and how a statement's rows become records (every row, the first one) and how
a read runs, which each role module uses.

``SqliteBase`` is the base of each role's mixin (``sqlite_admission``,
``sqlite_ledger``, ``sqlite_records``, ``sqlite_api``, ``sqlite_retention``);
``sqlite.SqliteStore`` composes them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, TypeVar

from tidings.stores import rows
from tidings.stores.lifecycle import DatabaseStore
from tidings.stores.reads import StoreReads
from tidings.stores.sqlite_db import SqliteDatabase

R = TypeVar("R")


def fetch_all(conn: sqlite3.Connection, shape: rows.Shape[R], statement: str,
              params: Any = ()) -> list[R]:
    cursor = conn.execute(statement, params)
    return shape.all(cursor.description, cursor)


def fetch_one(conn: sqlite3.Connection, shape: rows.Shape[R], statement: str,
              params: Any = ()) -> R | None:
    cursor = conn.execute(statement, params)
    row = cursor.fetchone()
    return None if row is None else shape.one(cursor.description, row)


def pair_params(pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """(address, kind) pairs as one JSON array of pairs, ``:pairs``. Two arrays zipped
    by their index (``json_each(a) JOIN json_each(b) ON b.key = a.key``) cost a scan of
    one per row of the other: 25 million steps for a page of 5,000 addresses."""
    return {"pairs": json.dumps([list(pair) for pair in pairs])}


class SqliteBase(DatabaseStore[SqliteDatabase], StoreReads):
    """The database, its queries and how a read runs in a read transaction; the port's
    reads themselves are ``StoreReads``'s."""

    # ---------------------------------------------------------------- how a read runs

    def _array(self, values: Sequence[Any]) -> str:
        return json.dumps(list(values))

    def _pairs(self, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
        return pair_params(pairs)

    async def _read_all(self, shape: rows.Shape[R], query: str, params: Any = ()) -> list[R]:
        statement = self._sql[query]
        return await self.db.read(lambda conn: fetch_all(conn, shape, statement, params))

    async def _read_one(self, shape: rows.Shape[R], query: str, params: Any = ()) -> R | None:
        statement = self._sql[query]
        return await self.db.read(lambda conn: fetch_one(conn, shape, statement, params))

    async def _read_tuples(self, query: str, params: Any = ()) -> list[tuple[Any, ...]]:
        statement = self._sql[query]
        return await self.db.read(lambda conn: conn.execute(statement, params).fetchall())
