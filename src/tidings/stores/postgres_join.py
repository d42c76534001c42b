"""Admission inside a transaction its caller owns, on the caller's own psycopg 3
connection: async (``Runtime.notify(connection=…)``) or sync, in the caller's thread
(``tidings.Client``), by the same steps (``postgres_steps``) and named SQL as the store's
own admission.

A join checks the connection first (psycopg 3, open, in a transaction that has not
failed, on the store's database: the server's system identifier and the database's
name), then writes in a savepoint, so a refusal or a failure leaves the caller's
transaction usable. The store's tables are found by name: when the caller's
search_path does not find them where the store's does, the store's path is set for
the writes (``SET LOCAL``) and the caller's set back after them. The intents (and,
on the store's queue, their messages and the NOTIFY that wakes its consumers) are
visible if and only if the caller commits. There is no retry: the transaction is the
caller's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from tidings.core.errors import InvalidInput, StoreError
from tidings.core.model import IntentDraft
from tidings.core.repeats import AdmitGuard
from tidings.stores.postgres_admission import groups_steps
from tidings.stores.postgres_base import PostgresBase
from tidings.stores.postgres_db import Conn
from tidings.stores.postgres_steps import Execute, Result, Savepoint, Steps, run_async, run_sync
from tidings.stores.records import JoinTarget

#: What a join writes, in order: drafts, and whether they are born enqueued.
Groups = Sequence[tuple[Sequence[IntentDraft], bool]]


def check_connection(connection: object, *, sync: bool) -> None:
    """Refuse, naming ``connection``, what cannot be joined (see the module)."""
    kind = psycopg.Connection if sync else psycopg.AsyncConnection
    if not isinstance(connection, kind):
        raise InvalidInput("connection", f"must be a {kind.__module__}.{kind.__name__} (psycopg "
                           f"3) to the store's database, not {type(connection).__name__}")
    status = connection.info.transaction_status
    if connection.closed or status == TransactionStatus.UNKNOWN:
        raise InvalidInput("connection", "is closed")
    if status == TransactionStatus.INERROR:
        raise InvalidInput("connection", "its transaction has failed already (an earlier "
                                         "statement raised): roll it back first")
    if status == TransactionStatus.ACTIVE:
        raise InvalidInput("connection", "is running another statement")
    if status == TransactionStatus.IDLE and connection.autocommit:
        raise InvalidInput("connection", "is in no transaction (autocommit, and none open): "
                                         "the intents would commit on their own; open one "
                                         "(with connection.transaction(): …) or leave "
                                         "connection out")


def target_of(found: Result) -> JoinTarget:
    """A ``join_identity`` row as the database a store writes to."""
    database, system_id, schemas, path, _ = found.rows[0]
    return JoinTarget(database=database, system_id=system_id, schemas=tuple(schemas),
                      search_path=path)


def joined_steps(sql: Mapping[str, str], target: JoinTarget, groups: Groups, *,
                 now: float, guard: AdmitGuard | None = None) -> Steps[list[str]]:
    """A join on the caller's connection, as steps; the keys created."""
    # The first statement: on a connection that is not autocommit it opens the caller's
    # transaction if nothing has yet (a savepoint needs one to be in).
    found: Result = yield Execute(sql["join_identity"])
    theirs = target_of(found)
    caller_path = found.rows[0][4]
    if (theirs.system_id, theirs.database) != (target.system_id, target.database):
        where = ("another server" if theirs.system_id != target.system_id
                 else f"database {theirs.database!r}")
        raise InvalidInput("connection", f"is to {where}, not the store's database "
                                         f"{target.database!r}: the intents must commit "
                                         "with the store's tables")
    created: list[str] = yield Savepoint(_writes(sql, target, groups, now=now, guard=guard,
                                                 switch=theirs.schemas != target.schemas,
                                                 caller_path=caller_path))
    return created


def _writes(sql: Mapping[str, str], target: JoinTarget, groups: Groups, *, now: float,
            guard: AdmitGuard | None, switch: bool, caller_path: str) -> Steps[list[str]]:
    if switch:
        yield Execute(sql["join_search_path"], {"path": target.search_path})
    # The stage keeps its rows until commit: the caller's transaction may have admitted
    # before. A guard's KeyConflict rolls the savepoint back, the caller's path with it.
    created = yield from groups_steps(sql, groups, now=now, guard=guard, clear_stage=True)
    if switch:
        yield Execute(sql["join_search_path"], {"path": caller_path})
    return created


class PostgresJoin(PostgresBase):
    """``intent_admit_in`` (async) and ``intent_admit_in_sync``, and the store's
    ``join_target`` they check a caller's connection against."""

    _join_target: JoinTarget | None = None

    async def join_target(self) -> JoinTarget:
        """The store's database and search_path, read once on its own connection."""
        if self._join_target is None:
            statement = self._sql["join_identity"]

            async def fn(conn: Conn) -> JoinTarget:
                cur = await conn.execute(statement)
                return target_of(Result(rows=await cur.fetchall(), rowcount=cur.rowcount))

            self._join_target = await self.db.read(fn)
        return self._join_target

    async def intent_admit_in(self, connection: object, groups: Groups, *,
                              now: float, guard: AdmitGuard | None = None) -> list[str]:
        """Admit ``groups`` inside the caller's transaction on ``connection``, a
        ``psycopg.AsyncConnection`` (see the module), then ``guard``; the keys created."""
        check_connection(connection, sync=False)
        if not any(drafts for drafts, _ in groups):
            return []
        target = await self.join_target()
        conn: psycopg.AsyncConnection[Any] = connection  # type: ignore[assignment]
        try:
            return await run_async(conn, joined_steps(self._sql, target, groups, now=now,
                                                      guard=guard))
        except psycopg.Error as exc:
            raise StoreError(f"admission in the caller's transaction failed: {exc}") from exc

    def intent_admit_in_sync(self, connection: object, groups: Groups, *, now: float,
                             target: JoinTarget, guard: AdmitGuard | None = None
                             ) -> list[str]:
        """``intent_admit_in`` on a sync ``psycopg.Connection``, in the calling thread
        (the connection is its caller's; nothing here touches the event loop).
        ``target``: this store's ``join_target``, read beforehand on the loop."""
        check_connection(connection, sync=True)
        if not any(drafts for drafts, _ in groups):
            return []
        conn: psycopg.Connection[Any] = connection  # type: ignore[assignment]
        try:
            return run_sync(conn, joined_steps(self._sql, target, groups, now=now,
                                               guard=guard))
        except psycopg.Error as exc:
            raise StoreError(f"admission in the caller's transaction failed: {exc}") from exc
