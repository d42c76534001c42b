"""One SQLite database file, shared by the SQLite store and the SQL transport.

A ``SqliteDatabase`` owns exactly one ``sqlite3`` connection and one dedicated
thread; every call runs on that thread through ``loop.run_in_executor``, so the
event loop never blocks on disk or on a lock, and the connection is never used by
two threads at once. Several processes may open the same file: WAL lets readers
run beside the one writer, and every write transaction starts with
``BEGIN IMMEDIATE`` so writers queue for the write lock (tried again a fraction of a
millisecond apart, see ``_take_write_lock``) instead of failing when a read lock
cannot be upgraded.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TypeVar

from tidings.core.errors import ConfigurationError, SchemaOutOfDate, StoreError
from tidings.stores import foreign, queries
from tidings.stores.file_clock import FileClock
from tidings.stores.sharing import SharedDatabase

T = TypeVar("T")

URL_PREFIX = "sqlite:///"
#: Whole-transaction retries after SQLite still answers "database is locked" once the
#: wait for the write lock has run out (another process held it for 15 s).
LOCKED_RETRIES = 4
#: How long BEGIN IMMEDIATE waits for another process's writer before "locked".
WRITE_LOCK_WAIT_S = 15.0
#: The first and the longest pause between two tries for the write lock. SQLite's own
#: busy handler sleeps 1, 2, 5, 10, 15, 20, 25 … 100 ms between tries, so a writer that
#: waited a little sleeps on well after the lock is free; processes taking turns with
#: short transactions (workers' claims and outcomes, closers' pages) lost several
#: milliseconds a turn, which on one file is time no process writes.
WRITE_LOCK_POLL_S = (0.0002, 0.002)
#: Queue messages bound per multi-row INSERT (3 parameters each, under SQLite's limit).
PUBLISH_CHUNK = 2000
_LOCKED_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def _is_locked(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return (code & 0xFF) in _LOCKED_CODES
    return "locked" in str(exc)


def _take_write_lock(conn: sqlite3.Connection, begin: str,
                     sql: Mapping[str, str]) -> None:
    """``begin`` (BEGIN IMMEDIATE), trying again every fraction of a millisecond while
    another process holds the write lock, for up to ``WRITE_LOCK_WAIT_S``; then the
    "locked" error is raised (and the transaction retried, see ``_transaction``). Only
    this wait is ours: the connection's busy timeout is back as opened before any other
    statement runs."""
    pause, longest = WRITE_LOCK_POLL_S
    deadline: float | None = None
    conn.execute(sql["busy_wait_ours"])
    try:
        while True:
            try:
                conn.execute(begin)
                return
            except sqlite3.OperationalError as exc:
                if not _is_locked(exc):
                    raise
                now = time.monotonic()
                if deadline is None:
                    deadline = now + WRITE_LOCK_WAIT_S
                elif now >= deadline:
                    raise
            time.sleep(random.uniform(0.5, 1.0) * pause)
            pause = min(longest, pause * 1.5)
    finally:
        conn.execute(sql["busy_wait_sqlite"])


class SqliteDatabase(SharedDatabase):
    """One connection to one SQLite file, served by one thread.

    ``path`` is a file path (or ``:memory:``, private to this object). The
    connection opens on the database thread in the background; an error opening
    it surfaces on the first call.
    """

    def __init__(self, path: str, *, url: str | None = None) -> None:
        self.path = path
        self.url = url if url is not None else URL_PREFIX + path
        self.sql = queries.load("sqlite")
        self._begin_write = self.sql["begin_write"]
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tidings-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._open_error: BaseException | None = None
        self._closed = False
        folder = "" if path == ":memory:" else os.path.dirname(os.path.abspath(path))
        self._clock = FileClock(folder)
        self._executor.submit(self._open)

    @classmethod
    def from_url(cls, url: str) -> SqliteDatabase:
        """``sqlite:///relative.db``, ``sqlite:////absolute/path.db`` or ``sqlite:///:memory:``."""
        if not url.startswith(URL_PREFIX) or len(url) == len(URL_PREFIX):
            raise ConfigurationError("url", f"{url!r} is not of the form sqlite:///path.db")
        return cls(url[len(URL_PREFIX):], url=url)

    # ---------------------------------------------------------------- thread side

    def _open(self) -> None:
        for attempt in range(LOCKED_RETRIES * 4 + 1):
            try:
                conn = sqlite3.connect(
                    self.path, check_same_thread=False, isolation_level=None,
                    cached_statements=256,
                )
                conn.executescript(self.sql["connect"])
            except sqlite3.Error as exc:
                # Switching a new file to WAL needs a moment alone with it: when several
                # processes open a fresh database at once, SQLite may answer "locked"
                # without waiting on the busy timeout.
                if _is_locked(exc) and attempt < LOCKED_RETRIES * 4:
                    time.sleep(random.uniform(0.01, 0.05 * 2 ** min(attempt, 5)))
                    continue
                self._open_error = exc
                return
            except BaseException as exc:  # kept and re-raised on the first call
                self._open_error = exc
                return
            self._conn = conn
            return

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"cannot open {self.url}: {self._open_error}") from self._open_error
        return self._conn

    def _transaction(self, fn: Callable[[sqlite3.Connection], T], begin: str) -> T:
        """Run ``fn`` in one transaction on the database thread, retrying when locked.

        ``fn`` must be safe to run again: a retry repeats the whole transaction.
        """
        conn = self._connection()
        for attempt in range(LOCKED_RETRIES + 1):
            try:
                if begin == self._begin_write:
                    _take_write_lock(conn, begin, self.sql)
                else:
                    conn.execute(begin)
                result = fn(conn)
                conn.execute(self.sql["commit"])
                return result
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute(self.sql["rollback"])
                if not isinstance(exc, sqlite3.Error):
                    raise
                if _is_locked(exc) and attempt < LOCKED_RETRIES:
                    # Short, jittered: the wait for the write lock already was the long one.
                    time.sleep(random.uniform(0.0, 0.05 * 2**attempt))
                    continue
                raise StoreError(f"{self.url}: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _plain(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return fn(self._connection())
        except sqlite3.Error as exc:
            raise StoreError(f"{self.url}: {exc}") from exc

    # ---------------------------------------------------------------- loop side

    async def _submit(self, call: Callable[[], T]) -> T:
        if self._closed:
            raise StoreError(f"{self.url} is closed")
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` inside ``BEGIN IMMEDIATE … COMMIT`` (ROLLBACK if it raises).

        If the awaiting task is cancelled the transaction still runs to its end.
        """
        return await self._submit(partial(self._transaction, fn, self.sql["begin_write"]))

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in a read transaction: one consistent snapshot."""
        return await self._submit(partial(self._transaction, fn, self.sql["begin_read"]))

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` outside any transaction (autocommit statements)."""
        return await self._submit(partial(self._plain, fn))

    async def reference_time(self) -> float:
        """The reference clock (``tidings.core.clock.ReferenceClock``): this host's kernel
        clock, which every process of a SQLite store shares (``stores.file_clock``)."""
        if self._closed:
            raise StoreError(f"{self.url} is closed")
        return self._clock.read()

    # ---------------------------------------------------------------- closing

    async def close(self) -> None:
        """Close the connection and stop the thread; later calls raise StoreError."""
        if self._closed:
            return
        self._closed = True
        self._clock.close()
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close_connection)
        self._executor.shutdown(wait=False)

    def _close_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # ---------------------------------------------------------------- migrations

    async def migrate(self, *, now: float, new_only: bool = False) -> list[int]:
        """Apply pending migrations in order, each in its own transaction, recorded as
        applied at ``now``.

        Safe to run from several processes at once: each migration re-checks
        whether it is applied after taking the write lock. ``new_only``: create the
        whole schema in one transaction if the database has none, else apply nothing,
        so a process starting beside a migrating one never sees half a schema.
        Returns the versions applied by this call.
        """
        return await self._submit(partial(self._migrate, now, new_only))

    def _migrate(self, applied_at: float, new_only: bool) -> list[int]:
        sql = self.sql
        self._transaction(self._refuse_foreign, sql["begin_write"])
        self._transaction(lambda conn: conn.execute(sql["migrations_create"]), sql["begin_write"])

        def apply(conn: sqlite3.Connection, m: queries.Migration) -> bool:
            if conn.execute(sql["migration_is_applied"], (m.version,)).fetchone():
                return False
            for statement in queries.split_statements(m.sql):
                conn.execute(statement)
            conn.execute(sql["migration_record"], (m.version, applied_at))
            return True

        if new_only:
            def create(conn: sqlite3.Connection) -> list[int]:
                if conn.execute(sql["migrations_applied"]).fetchone():
                    return []
                return [m.version for m in queries.migrations("sqlite") if apply(conn, m)]

            return self._transaction(create, sql["begin_write"])
        return [m.version for m in queries.migrations("sqlite")
                if self._transaction(partial(apply, m=m), sql["begin_write"])]

    def _refuse_foreign(self, conn: sqlite3.Connection) -> None:
        """StoreError when the file holds another application's tables under tidings'
        names (``stores.foreign``)."""
        sql = self.sql
        names = json.dumps(foreign.table_names("sqlite"))
        present = [str(name) for (name,) in conn.execute(sql["tables_present"], (names,))]
        if not present:
            return
        columns = [str(column) for (column,) in conn.execute(sql["migrations_columns"])]
        recorded = frozenset(columns) == foreign.MIGRATIONS_COLUMNS and \
            conn.execute(sql["migrations_applied"]).fetchone() is not None
        tables = foreign.foreign_tables(present, columns, recorded=recorded)
        if tables:
            raise foreign.refusal(self.url, tables)

    async def applied_migrations(self) -> list[int]:
        """Versions recorded in ``schema_migrations`` (none on a fresh file)."""
        sql = self.sql

        def fn(conn: sqlite3.Connection) -> list[int]:
            if not conn.execute(sql["migrations_table_exists"]).fetchone():
                return []
            return [version for (version,) in conn.execute(sql["migrations_applied"])]

        return await self.read(fn)

    async def pending_migrations(self) -> list[int]:
        """Versions this code knows that the database has not applied."""
        applied = set(await self.applied_migrations())
        return [m.version for m in queries.migrations("sqlite") if m.version not in applied]

    async def schema_version(self) -> int:
        """The highest applied migration version, 0 for an empty database."""
        return max(await self.applied_migrations(), default=0)

    async def check_schema(self) -> None:
        """Raise SchemaOutOfDate naming the pending versions (``new`` when none is applied)."""
        pending = await self.pending_migrations()
        if pending:
            new = await self.schema_version() == 0
            raise SchemaOutOfDate(self.url, tuple(pending), new=new)


def refuse_absent_file(url: str) -> None:
    """SchemaOutOfDate (``new``) for a SQLite URL whose file does not exist: a command
    that only reads must not leave an empty database file behind it."""
    if not url.startswith(URL_PREFIX):
        return
    path = url[len(URL_PREFIX):]
    if path in ("", ":memory:") or os.path.lexists(path):
        return
    raise SchemaOutOfDate(url, tuple(m.version for m in queries.migrations("sqlite")), new=True)


def row_runs(count: int, most: int) -> Iterator[tuple[int, int]]:
    """``(start, size)`` runs covering ``count`` rows: runs of ``most``, then the rest in
    powers of two (7 rows: 4, 2, 1).

    A multi-row statement's text depends on its row count, and SQLite keeps every text
    it prepared (up to ``cached_statements`` per connection, each compiled program
    growing with its rows). One run per remainder size let a long-running process
    (digest closes and grouped notifies admit every count) gather hundreds of large
    programs; with these runs a process prepares at most log2(``most``) + 2 texts."""
    start = 0
    while count - start >= most:
        yield start, most
        start += most
    rest = count - start
    bit = 1 << max(0, rest.bit_length() - 1)
    while rest:
        if rest >= bit:
            yield start, bit
            start, rest = start + bit, rest - bit
        bit >>= 1


def insert_messages(conn: sqlite3.Connection, sql: Mapping[str, str], queue: str,
                    rows: Sequence[tuple[str, str, float, int, str]], *, now: float) -> None:
    """Insert ``(message_id, body, delay_s, lane, group)`` rows inside the caller's
    transaction.

    Multi-row inserts: about twice as fast as an executemany of one row each. The
    store uses this to admit intents and their messages in one transaction.
    """
    for start, size in row_runs(len(rows), PUBLISH_CHUNK):
        chunk = rows[start:start + size]
        params: list[object] = [queue, now]
        for message_id, body, delay_s, lane, group in chunk:
            params += (message_id, body, now + max(0.0, delay_s), lane, group)
        groups = ",".join(["(?,?,?,?,?)"] * len(chunk))
        conn.execute(sql["message_insert_many"].replace("{rows}", groups), params)


def publish_messages(conn: sqlite3.Connection, sql: Mapping[str, str], queue: str,
                     rows: Sequence[tuple[str, str, float, int, str]], *, now: float) -> None:
    """Insert ``(message_id, body, delay_s, lane, group)`` rows, each in its intent's
    lane and group, or ``lane`` and ``group`` for a message of no intent
    (``message_publish_many``): the transport's publish, inside the caller's
    transaction."""
    for start, size in row_runs(len(rows), PUBLISH_CHUNK):
        chunk = rows[start:start + size]
        params: list[object] = [queue, now]
        for message_id, body, delay_s, lane, group in chunk:
            params += (message_id, body, now + max(0.0, delay_s), lane, group)
        groups = ",".join(["(?,?,?,?,?)"] * len(chunk))
        conn.execute(sql["message_publish_many"].replace("{rows}", groups), params)
