"""Which PostgreSQL commits wait for the WAL flush (needs a server: see tests/conftest.py;
skips without one, fails under CI).

The pacer's state and a receive's hiding of messages are soft: each sets
``synchronous_commit`` off for its own transaction, so neither costs an fsync. Claims,
outcomes and everything else keep the server's setting. Each statement is run here
inside a transaction of the test's, so the setting it made can be read back before the
commit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest

from tidings.core.model import OutgoingMessage
from tidings.stores.postgres import PostgresStore
from tidings.transports.postgres import PostgresTransport

MIGRATED_AT = 1_000_000.0


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PostgresStore]:
    s = await PostgresStore.open(pg_url)
    await s.migrate(now=MIGRATED_AT)
    await s.pacer_transact("sms", lambda state: ({"count": 1}, None))  # the row exists
    yield s
    await s.close()


async def _setting(conn: psycopg.AsyncConnection[object]) -> object:
    cur = await conn.execute("SHOW synchronous_commit")
    row = await cur.fetchone()
    return None if row is None else row[0]


async def test_a_pacer_transaction_commits_without_waiting_for_the_wal_flush(
        store: PostgresStore) -> None:
    sql = store._sql

    async def pacer(conn: psycopg.AsyncConnection[object]) -> object:
        await conn.execute(sql["pacer_lock"], {"channel": "sms", "idle_ms": "5000"})
        return await _setting(conn)

    assert await store.db.write(pacer) == "off"
    # SET LOCAL's scope: no connection of the pool keeps it after that transaction.
    for _ in range(4):
        assert await store.db.write(_setting) == "on"


async def test_a_receive_commits_without_waiting_for_the_wal_flush(
        store: PostgresStore) -> None:
    transport = PostgresTransport(store.db)
    sql = transport._sql
    await transport.publish("email", [], now=MIGRATED_AT)

    async def receive(conn: psycopg.AsyncConnection[object], limit: int) -> object:
        await conn.execute(sql["message_receive"], {
            "queue": "email", "now": MIGRATED_AT, "visible_at": MIGRATED_AT + 60,
            "limit": limit, "receiver": None, "lanes": [0, 1]})
        return await _setting(conn)

    # a receive that takes nothing writes no WAL and changes nothing
    assert await store.db.write(lambda conn: receive(conn, 0)) == "on"
    await transport.publish("email", [OutgoingMessage(message_id="m1", body="x")],
                            now=MIGRATED_AT)
    assert await store.db.write(lambda conn: receive(conn, 10)) == "off"
    assert await store.db.write(_setting) == "on"
    # and the transport's own receive still reads its message as before
    await store.db.write(lambda conn: conn.execute(
        "UPDATE messages SET available_at = 0 WHERE message_id = 'm1'"))
    (got,) = await transport.receive("email", max_messages=10, visibility_s=60,
                                     now=MIGRATED_AT)
    assert got.message_id == "m1" and got.body == "x" and got.receive_count == 2
