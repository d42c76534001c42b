"""Losing the PostgreSQL connection in the middle of a batch (needs a server: see
tests/conftest.py; skips without one, fails under CI).

The witness is the database itself, read on a separate connection: every intent and
its message exist exactly once, however many times the connections were cut.
"""

from __future__ import annotations

import asyncio
import random

import psycopg
import pytest

from support import pg_backends
from tidings.core.model import IntentDraft
from tidings.stores import postgres_db
from tidings.stores.postgres import PostgresStore
from tidings.stores.postgres_db import Conn, PostgresDatabase

NOW = 1_000_000.0
APP = "tidings-connection-loss"


def named(url: str) -> str:
    return pg_backends.named(url, APP)


async def terminate_ours(admin_url: str, url: str) -> int:
    return await pg_backends.terminate(admin_url, url, APP)


async def test_a_transaction_whose_connection_dies_midway_is_retried_whole(
        pg_url: str, pg_admin_url: str) -> None:
    db = PostgresDatabase.from_url(named(pg_url))
    attempts = 0

    async def create(conn: Conn) -> None:
        await conn.execute("CREATE TABLE batch (n integer PRIMARY KEY)")

    async def half_then_rest(conn: Conn) -> int:
        nonlocal attempts
        attempts += 1
        await conn.execute("INSERT INTO batch SELECT generate_series(1, 500)")
        if attempts == 1:
            assert await terminate_ours(pg_admin_url, pg_url) >= 1
        await conn.execute("INSERT INTO batch SELECT generate_series(501, 1000)")
        return attempts

    try:
        await db.write(create)
        assert await db.write(half_then_rest) == 2

        async def count(conn: Conn) -> tuple[int, int]:
            cur = await conn.execute("SELECT count(*), count(DISTINCT n) FROM batch")
            row = await cur.fetchone()
            assert row is not None
            return int(row[0]), int(row[1])

        # The first attempt's 500 rows rolled back with the dead connection.
        assert await db.read(count) == (1000, 1000)
    finally:
        await db.close()


async def test_a_connection_that_never_comes_back_is_a_store_error_after_the_budget(
        pg_url: str, pg_admin_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres_db, "RECONNECT_BUDGET_S", 0.3)
    db = PostgresDatabase.from_url(named(pg_url))

    async def always_cut(conn: Conn) -> None:
        await terminate_ours(pg_admin_url, pg_url)
        await conn.execute("SELECT 1")

    try:
        with pytest.raises(postgres_db.StoreError, match="connection lost and not regained"):
            await db.write(always_cut)
    finally:
        await db.close()


async def test_admission_under_repeated_connection_kills_admits_each_intent_once(
        pg_url: str, pg_admin_url: str) -> None:
    store = PostgresStore(PostgresDatabase.from_url(named(pg_url)))
    await store.migrate(now=NOW)
    pages = [
        [IntentDraft(key=f"k-{page}-{i}", channel="email", recipient_id=f"r{page}-{i}",
                     address=f"r{page}-{i}@example.test", template="t/v1", due_at=NOW)
         for i in range(500)]
        for page in range(40)
    ]
    stop = asyncio.Event()
    kills = 0

    async def killer() -> None:
        nonlocal kills
        while not stop.is_set():
            # Often enough to cut many batches, rarely enough for batches to finish.
            await asyncio.sleep(random.uniform(0.05, 0.3))
            kills += await terminate_ours(pg_admin_url, pg_url)

    chaos = asyncio.create_task(killer())
    try:
        for page in pages:
            await store.intent_admit(page, now=NOW, enqueue=True)
            # A page admitted twice (as a retried scheduler pass would) adds nothing.
            await store.intent_admit(page[:50], now=NOW, enqueue=True)
    finally:
        stop.set()
        await chaos
    assert kills > 0, "the killer never hit a connection: the test proved nothing"

    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM intents), (SELECT count(DISTINCT key) FROM intents),"
            " (SELECT count(*) FROM messages), (SELECT count(DISTINCT message_id) FROM messages),"
            " (SELECT count(*) FROM events WHERE type = 'enqueued')")
        row = await cur.fetchone()
    await store.close()
    assert row == (20_000, 20_000, 20_000, 20_000, 20_000)
