"""One PostgreSQL database, shared by the PostgreSQL store and the PostgreSQL transport.

A ``PostgresDatabase`` owns one ``psycopg_pool.AsyncConnectionPool`` of autocommit
connections; ``write`` and ``read`` borrow one connection for one explicit
transaction (``READ COMMITTED``). Correctness under any number of processes on any
number of machines comes from row locks taken by the queries themselves
(``SELECT … FOR UPDATE`` on the rows a transaction decides about,
``FOR UPDATE SKIP LOCKED`` where concurrent takers should split the work), and from
``INSERT … ON CONFLICT DO NOTHING`` for idempotent inserts. A transaction that
PostgreSQL aborts as a serialization failure or a deadlock is retried whole, with a
short jittered backoff. A transaction whose connection is lost (a server restart, a
failover, a dropped network path) is retried whole on a fresh connection, with
exponential backoff for up to ``RECONNECT_BUDGET_S``: the failed attempt rolled back
on the server, so a batch is written completely or not at all. Every transaction
body is written to be safe to run again (``ON CONFLICT DO NOTHING`` inserts,
lease-token fences, compare-and-set progress), which also covers the rare loss of a
connection during ``COMMIT`` itself. Every other database error surfaces as
``StoreError`` naming the URL without its password.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from tidings.core.errors import ConfigurationError, SchemaOutOfDate, StoreError
from tidings.core.liveness import application_name
from tidings.stores import foreign, queries
from tidings.stores.sharing import SharedDatabase

T = TypeVar("T")
log = logging.getLogger("tidings.stores.postgres")
Conn = psycopg.AsyncConnection[TupleRow]

URL_SCHEMES = ("postgresql://", "postgres://")
DIALECT = "postgresql"
#: Whole-transaction retries after a serialization failure or a deadlock.
CONFLICT_RETRIES = 6
#: Seconds to wait for the server when opening (per connection attempt).
CONNECT_TIMEOUT_S = 5.0
#: Seconds a caller waits for a free pooled connection before StoreError.
POOL_TIMEOUT_S = 30.0
#: Seconds a transaction keeps retrying on fresh connections after losing its own.
RECONNECT_BUDGET_S = 30.0
_CONFLICTS = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)


def _connection_lost(exc: psycopg.Error, conn: Conn | None) -> bool:
    """Did ``exc`` come from a connection that is gone (rather than from the query)?"""
    if isinstance(exc, PoolTimeout):
        return True  # no connection could be had: the server is down or unreachable
    if conn is not None and conn.broken:
        return True
    return isinstance(exc, pg_errors.AdminShutdown | pg_errors.CannotConnectNow)


#: What the server answers a new session when it has no slot for it (max_connections,
#: a role's or a database's CONNECTION LIMIT, the slots reserved for superusers).
_NO_FREE_SLOT = ("too many clients", "too many connections",
                 "remaining connection slots are reserved")


def _no_free_slot(told: str) -> bool:
    return any(words in told for words in _NO_FREE_SLOT)


def redact(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``: safe for errors and logs."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.hostname or ""
        if ":" in host:  # an IPv6 literal
            host = f"[{host}]"
        netloc = f"{parts.username or ''}:***@{host}"
        if parts.port is not None:
            netloc += f":{parts.port}"
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        # Unparseable (e.g. a bad port): keep the user, hide what follows its colon.
        scheme, sep, rest = url.partition("//")
        userinfo, at, hostpart = rest.rpartition("@")
        if not at:
            return url
        user, colon, _ = userinfo.partition(":")
        return f"{scheme}{sep}{user}{':***' if colon else ''}@{hostpart}"


class PostgresDatabase(SharedDatabase):
    """A pool of connections to one PostgreSQL database (see the module docstring).

    The pool opens on first use (or ``open()``); an unreachable server surfaces as a
    ``StoreError`` naming the URL without its password.
    """

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 8) -> None:
        self.url = url
        self.safe_url = redact(url)
        label = conninfo_to_dict(url).get("application_name")
        self.application_label = str(label) if label else None
        """The application_name the URL asks for; every connection keeps it after the
        process's own name (``tidings.core.liveness.application_name``)."""
        self.sql = queries.load(DIALECT)
        self._min_size = min_size
        self._max_size = max_size
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._opening: asyncio.Lock | None = None
        self._closed = False

    @classmethod
    def from_url(cls, url: str, *, min_size: int = 1, max_size: int = 8) -> PostgresDatabase:
        """``postgresql://user[:password]@host[:port]/dbname[?options]`` (or ``postgres://``)."""
        if not url.startswith(URL_SCHEMES):
            raise ConfigurationError(
                "url", f"{redact(url)!r} is not of the form postgresql://user@host:port/dbname")
        try:
            urlsplit(url).port  # noqa: B018 - raises ValueError for a port that is no number
            conninfo_to_dict(url)
        except (ValueError, psycopg.Error) as exc:
            raise ConfigurationError("url", f"{redact(url)!r} is not a valid PostgreSQL "
                                            f"URL: {exc}") from None
        return cls(url, min_size=min_size, max_size=max_size)

    # ---------------------------------------------------------------- connections

    async def open(self) -> None:
        """Connect now: raise StoreError at once if the server cannot be reached."""
        await self._get_pool()

    async def _get_pool(self) -> AsyncConnectionPool[Conn]:
        if self._closed:
            raise StoreError(f"{self.safe_url} is closed")
        if self._pool is not None:
            return self._pool
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._pool is None:
                self._pool = await self._open_pool()
        return self._pool

    async def _open_pool(self) -> AsyncConnectionPool[Conn]:
        # One direct connection first: a refused or unknown server fails in milliseconds
        # with libpq's own reason, where the pool would retry quietly until its timeout.
        # A server with no free slot is waited for (RECONNECT_BUDGET_S): the slots of a
        # busy server come free, and a process that gave up at once would only be
        # started again into the same wall.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RECONNECT_BUDGET_S
        tries = 0
        while True:
            try:
                probe = await psycopg.AsyncConnection.connect(
                    self.url, connect_timeout=int(CONNECT_TIMEOUT_S), autocommit=True)
                break
            except psycopg.Error as exc:
                told = str(exc).strip() or type(exc).__name__
                pause = min(2.0, 0.1 * 2**tries)
                if not _no_free_slot(told) or loop.time() + pause > deadline:
                    raise StoreError(f"cannot connect to {self.safe_url}: {told}") from None
                if tries == 0:
                    log.warning("no free connection on %s; waiting up to %.0f s: %s",
                                self.safe_url, RECONNECT_BUDGET_S, told)
                tries += 1
                await asyncio.sleep(pause)
        await probe.close()
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            self.url, min_size=self._min_size, max_size=self._max_size, open=False,
            # Named for this process: the reconciler ends the sessions of a worker it
            # declared gone by this name (tidings.core.liveness).
            kwargs={"autocommit": True, "connect_timeout": int(CONNECT_TIMEOUT_S),
                    "application_name": application_name(label=self.application_label)},
            timeout=POOL_TIMEOUT_S, name="tidings",
        )
        try:
            await pool.open(wait=True, timeout=CONNECT_TIMEOUT_S * 2)
        except psycopg.Error as exc:
            await pool.close()
            raise StoreError(f"cannot connect to {self.safe_url}: {exc}") from None
        return pool

    async def transaction(self, fn: Callable[[Conn], Awaitable[T]], *,
                          block: bool = True) -> T:
        """Run ``fn(conn)`` in one transaction (COMMIT, or ROLLBACK if it raises).

        With ``block=False`` no BEGIN/COMMIT is sent: each statement ``fn`` runs is a
        transaction of its own, which saves two round trips for a single statement
        (or for reads, which READ COMMITTED gives a snapshot per statement anyway).

        A serialization failure, a deadlock or a lost connection retries the whole
        transaction, so ``fn`` must be safe to run again. Other database errors, and a
        connection still lost after ``RECONNECT_BUDGET_S``, become ``StoreError``.
        """
        pool = await self._get_pool()
        conflicts = 0
        lost = 0
        deadline = asyncio.get_running_loop().time() + RECONNECT_BUDGET_S
        while True:
            conn: Conn | None = None
            try:
                async with pool.connection() as conn:
                    if not block:
                        return await fn(conn)
                    async with conn.transaction():
                        return await fn(conn)
            except _CONFLICTS as exc:
                if conflicts >= CONFLICT_RETRIES:
                    raise StoreError(f"{self.safe_url}: {exc}") from exc
                await asyncio.sleep(random.uniform(0.0, 0.005 * 2**conflicts))
                conflicts += 1
            except psycopg.Error as exc:
                if not _connection_lost(exc, conn):
                    raise StoreError(f"{self.safe_url}: {exc}") from exc
                pause = random.uniform(0.0, min(2.0, 0.05 * 2**lost))
                if asyncio.get_running_loop().time() + pause > deadline:
                    if isinstance(exc, PoolTimeout):
                        raise StoreError(f"{self.safe_url}: no connection to be had after "
                                         f"{lost + 1} attempts: "
                                         f"{await self._why_no_connection()}") from exc
                    raise StoreError(f"{self.safe_url}: connection lost and not regained "
                                     f"after {lost + 1} attempts: {exc}") from exc
                lost += 1
                await asyncio.sleep(pause)
                # A restart kills the idle connections too: drop them, not one per retry.
                with contextlib.suppress(psycopg.Error):
                    await pool.check()

    async def _why_no_connection(self) -> str:
        """Why the pool had no connection to give: the server's own answer to a new one
        ("too many clients already", "too many connections for role …", refused), which
        the pool only logs; or, when one could be made, that every pooled one was busy."""
        try:
            probe = await psycopg.AsyncConnection.connect(
                self.url, connect_timeout=int(CONNECT_TIMEOUT_S), autocommit=True)
        except psycopg.Error as exc:
            told = str(exc).strip() or type(exc).__name__
            return told.rsplit("FATAL:", 1)[-1].strip() if "FATAL:" in told else told
        await probe.close()
        return (f"all {self._max_size} pooled connections stayed busy for "
                f"{POOL_TIMEOUT_S:g} s")

    async def write(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Run ``fn(conn)`` in a write transaction (see ``transaction``)."""
        return await self.transaction(fn)

    async def read(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Run ``fn(conn)``, which only reads: each statement sees what was committed
        when it started (READ COMMITTED), with no transaction block around them."""
        return await self.transaction(fn, block=False)

    async def reference_time(self) -> float:
        """The reference clock (``tidings.core.clock.ReferenceClock``): the server's
        ``clock_timestamp()``, which every host of a fleet reads alike."""
        sql = self.sql["clock_now"]

        async def fn(conn: Conn) -> float:
            cur = await conn.execute(sql)
            row = await cur.fetchone()
            assert row is not None
            return float(row[0])

        return await self.read(fn)

    # ---------------------------------------------------------------- closing

    async def close(self) -> None:
        """Close the pool; later calls raise StoreError."""
        if self._closed:
            return
        self._closed = True
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    # ---------------------------------------------------------------- migrations

    async def migrate(self, *, now: float, new_only: bool = False) -> list[int]:
        """Apply pending migrations in order, each in its own transaction, recorded as
        applied at ``now``.

        Each transaction first takes a transaction-scoped advisory lock, so migrators
        in several processes or machines take turns and each version is applied once;
        DDL is transactional, so a failing migration leaves nothing behind.
        ``new_only``: create the whole schema in one transaction if the database has
        none, else apply nothing, so a process starting beside a migrating one never
        sees half a schema. Returns the versions applied by this call.
        """
        sql = self.sql

        async def apply(conn: Conn, m: queries.Migration) -> bool:
            await conn.execute(sql["migrations_lock"])
            await conn.execute(sql["migrations_create"])
            cur = await conn.execute(sql["migration_is_applied"], {"version": m.version})
            if await cur.fetchone() is not None:
                return False
            await conn.execute(m.sql.encode())  # a whole script: no parameters
            await conn.execute(sql["migration_record"],
                               {"version": m.version, "applied_at": now})
            return True

        if new_only:
            async def create(conn: Conn) -> list[int]:
                await conn.execute(sql["migrations_lock"])
                await self._refuse_foreign(conn)
                await conn.execute(sql["migrations_create"])
                cur = await conn.execute(sql["migrations_applied"])
                if await cur.fetchone() is not None:
                    return []
                return [m.version for m in queries.migrations(DIALECT) if await apply(conn, m)]

            return await self.write(create)

        async def check(conn: Conn) -> None:
            await conn.execute(sql["migrations_lock"])
            await self._refuse_foreign(conn)

        await self.write(check)
        return [m.version for m in queries.migrations(DIALECT)
                if await self.write(partial(apply, m=m))]

    async def _refuse_foreign(self, conn: Conn) -> None:
        """StoreError when the database holds another application's tables under
        tidings' names (``stores.foreign``)."""
        sql = self.sql
        cur = await conn.execute(sql["tables_present"],
                                 {"names": list(foreign.table_names(DIALECT))})
        present = [str(name) for (name,) in await cur.fetchall()]
        if not present:
            return
        cur = await conn.execute(sql["migrations_columns"])
        columns = [str(column) for (column,) in await cur.fetchall()]
        recorded = False
        if frozenset(columns) == foreign.MIGRATIONS_COLUMNS:
            cur = await conn.execute(sql["migrations_applied"])
            recorded = await cur.fetchone() is not None
        tables = foreign.foreign_tables(present, columns, recorded=recorded)
        if tables:
            raise foreign.refusal(self.safe_url, tables)

    async def applied_migrations(self) -> list[int]:
        """Versions recorded in ``schema_migrations`` (none on an empty database)."""
        sql = self.sql

        async def fn(conn: Conn) -> list[int]:
            cur = await conn.execute(sql["migrations_table_exists"])
            (exists,) = await cur.fetchone() or (False,)
            if not exists:
                return []
            cur = await conn.execute(sql["migrations_applied"])
            return [int(version) for (version,) in await cur.fetchall()]

        return await self.read(fn)

    async def pending_migrations(self) -> list[int]:
        """Versions this code knows that the database has not applied."""
        applied = set(await self.applied_migrations())
        return [m.version for m in queries.migrations(DIALECT) if m.version not in applied]

    async def schema_version(self) -> int:
        """The highest applied migration version, 0 for an empty database."""
        return max(await self.applied_migrations(), default=0)

    async def check_schema(self) -> None:
        """Raise SchemaOutOfDate naming the pending versions (``new`` when none is applied)."""
        pending = await self.pending_migrations()
        if pending:
            new = await self.schema_version() == 0
            raise SchemaOutOfDate(self.safe_url, tuple(pending), new=new)


async def insert_messages(conn: Conn, sql: Mapping[str, str], queue: str,
                          rows: Sequence[tuple[str, str, float]], *, now: float,
                          lanes: Sequence[int | None] | None = None,
                          own_lanes: Sequence[int] | None = None,
                          own_groups: Sequence[str] | None = None) -> None:
    """Insert ``(message_id, body, delay_s)`` rows inside the caller's transaction,
    each in the paired lane of ``lanes``, or (``None``) in its intent's lane and group,
    or for a message of no intent, the paired lane of ``own_lanes`` (default 0) and
    group of ``own_groups`` (default none).

    One statement for the whole batch (arrays unnested server-side). The store uses
    this too, to admit intents and their messages in one transaction.
    """
    if not rows:
        return
    params: dict[str, Any] = {
        "queue": queue, "now": now,
        "message_ids": [message_id for message_id, _, _ in rows],
        "bodies": [body for _, body, _ in rows],
        "available": [now + max(0.0, delay_s) for _, _, delay_s in rows],
        "lanes": list(lanes) if lanes is not None else [None] * len(rows),
        "own_lanes": list(own_lanes) if own_lanes is not None else [0] * len(rows),
        "own_groups": list(own_groups) if own_groups is not None else [""] * len(rows),
    }
    await conn.execute(sql["message_insert_many"], params)
