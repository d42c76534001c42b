"""Transaction bodies written once, run on an async or a sync psycopg connection: a body
is a generator that yields the statements it needs (``Execute``, ``Copy``, ``Attempt``,
``Savepoint``) and is sent each one's answer back; ``run_async`` and ``run_sync`` are the
two drivers. Admission uses it so the store's own pool (async) and a caller's sync
connection (``tidings.Client``'s join) write by the same code and the same named SQL.
"""

from __future__ import annotations

from collections.abc import Awaitable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors

T = TypeVar("T")

#: A body: yields steps, is sent each step's answer, returns its result.
Steps = Generator["Step", Any, T]


@dataclass(frozen=True)
class Result:
    """What an ``Execute`` answers: the rows (none for a statement without any), the
    row count, and the columns' ``description`` (None without rows), for
    ``rows.Shape``."""

    rows: list[tuple[Any, ...]]
    rowcount: int
    description: Any = None


@dataclass(frozen=True)
class Execute:
    """Run one statement; answers a ``Result``."""

    statement: str
    params: Any = None


@dataclass(frozen=True)
class Copy:
    """``COPY … FROM STDIN``: ``text`` as it is when given, else ``rows`` one by one."""

    statement: str
    rows: Sequence[Sequence[Any]]
    text: str | None = None


@dataclass(frozen=True)
class Attempt:
    """Run ``steps`` in a savepoint; answers True, or False when a unique key was
    violated (the savepoint rolled back, the transaction usable)."""

    steps: Steps[Any]


@dataclass(frozen=True)
class Savepoint:
    """Run ``steps`` in a savepoint; answers what they return (an error rolls it back)."""

    steps: Steps[Any]


@dataclass(frozen=True)
class Wait:
    """Await something of the event loop's (the async driver only)."""

    awaitable: Awaitable[Any]


Step = Execute | Copy | Attempt | Savepoint | Wait


async def run_async(conn: psycopg.AsyncConnection[Any], body: Steps[T]) -> T:
    """Run ``body`` on ``conn``, one cursor for its statements."""
    async with psycopg.AsyncCursor(conn) as cur:
        return await _drive_async(cur, body)


async def _drive_async(cur: psycopg.AsyncCursor[Any], body: Steps[T]) -> T:
    answer: Any = None
    while True:
        try:
            step = body.send(answer)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if isinstance(step, Execute):
            await cur.execute(step.statement, step.params)
            found = await cur.fetchall() if cur.description is not None else []
            answer = Result(rows=found, rowcount=cur.rowcount,
                            description=cur.description)
        elif isinstance(step, Copy):
            async with cur.copy(step.statement) as copy:
                if step.text is not None:
                    await copy.write(step.text)
                else:
                    for row in step.rows:
                        await copy.write_row(row)
            answer = None
        elif isinstance(step, Attempt):
            try:
                async with cur.connection.transaction():
                    await _drive_async(cur, step.steps)
                answer = True
            except pg_errors.UniqueViolation:
                answer = False
        elif isinstance(step, Savepoint):
            async with cur.connection.transaction():
                answer = await _drive_async(cur, step.steps)
        else:
            answer = await step.awaitable


def run_sync(conn: psycopg.Connection[Any], body: Steps[T]) -> T:
    """Run ``body`` on ``conn`` in the calling thread, one cursor for its statements.

    The cursor is psycopg's own (server-side binding), whatever cursor class the
    connection's owner set (Django sets one of its own)."""
    with psycopg.Cursor(conn) as cur:
        return _drive_sync(cur, body)


def _drive_sync(cur: psycopg.Cursor[Any], body: Steps[T]) -> T:
    answer: Any = None
    while True:
        try:
            step = body.send(answer)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if isinstance(step, Execute):
            cur.execute(step.statement, step.params)
            found = cur.fetchall() if cur.description is not None else []
            answer = Result(rows=found, rowcount=cur.rowcount,
                            description=cur.description)
        elif isinstance(step, Copy):
            with cur.copy(step.statement) as copy:
                if step.text is not None:
                    copy.write(step.text)
                else:
                    for row in step.rows:
                        copy.write_row(row)
            answer = None
        elif isinstance(step, Attempt):
            try:
                with cur.connection.transaction():
                    _drive_sync(cur, step.steps)
                answer = True
            except pg_errors.UniqueViolation:
                answer = False
        elif isinstance(step, Savepoint):
            with cur.connection.transaction():
                answer = _drive_sync(cur, step.steps)
        else:
            raise TypeError("a sync connection cannot await; this body needs the event loop")
