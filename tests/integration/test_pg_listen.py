"""LISTEN/NOTIFY wake-ups on PostgreSQL (needs a server: see tests/conftest.py; skips
without one, fails under CI).

Each consumer waits with a timeout of an hour once its listener is connected (so the
poll fallback cannot be what returns it): only a notification can end the wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import psycopg
import pytest

from tidings.core.model import IntentDraft, OutgoingMessage
from tidings.stores.postgres import PostgresStore
from tidings.transports.postgres import PostgresTransport

T0 = 1_000_000.0
HOUR = 3600.0
GUARD_S = 30.0  # only against a hang


@pytest.fixture
async def consumer(pg_url: str) -> AsyncIterator[PostgresTransport]:
    transport = await PostgresTransport.open(pg_url)
    await transport.db.migrate(now=T0)
    await transport.wait("email", timeout_s=0, now=T0)  # starts the listener
    assert await transport._listener.wait_connected(GUARD_S)
    yield transport
    await transport.close()


async def waiting(consumer: PostgresTransport) -> asyncio.Task[None]:
    task = asyncio.create_task(consumer.wait("email", timeout_s=HOUR, now=T0))
    await asyncio.sleep(0.05)
    assert not task.done(), "the queue is empty: nothing should have woken the consumer"
    return task


async def test_a_publish_on_another_connection_wakes_the_consumer(
        consumer: PostgresTransport, pg_url: str) -> None:
    task = await waiting(consumer)
    publisher = await PostgresTransport.open(pg_url)
    try:
        await publisher.publish("email", [OutgoingMessage(message_id="m", body="{}")], now=T0)
    finally:
        await publisher.close()
    await asyncio.wait_for(task, GUARD_S)


async def test_admission_with_its_messages_wakes_the_consumer(
        consumer: PostgresTransport, pg_url: str) -> None:
    task = await waiting(consumer)
    store = await PostgresStore.open(pg_url)
    try:
        await store.intent_admit([IntentDraft(
            key="k", channel="email", recipient_id="r", address="r@example.test",
            template="t/v1", due_at=T0)], now=T0, enqueue=True)
    finally:
        await store.close()
    await asyncio.wait_for(task, GUARD_S)


async def test_a_publish_to_another_queue_does_not_wake_the_consumer(
        consumer: PostgresTransport, pg_url: str) -> None:
    task = await waiting(consumer)
    publisher = await PostgresTransport.open(pg_url)
    try:
        await publisher.publish("sms", [OutgoingMessage(message_id="m", body="{}")], now=T0)
        await asyncio.sleep(0.2)
        assert not task.done()
        await publisher.publish("email", [OutgoingMessage(message_id="m", body="{}")], now=T0)
    finally:
        await publisher.close()
    await asyncio.wait_for(task, GUARD_S)


async def test_a_rolled_back_publish_wakes_no_one(consumer: PostgresTransport, pg_url: str) -> None:
    task = await waiting(consumer)
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        await conn.execute(consumer.db.sql["message_insert_many"], {
            "queue": "email", "now": T0, "message_ids": ["m"], "bodies": ["{}"],
            "available": [T0], "lanes": [0], "own_lanes": [0], "own_groups": [""]})
        await conn.rollback()
    await asyncio.sleep(0.2)
    assert not task.done()
    task.cancel()


async def test_the_listener_comes_back_after_its_connection_is_killed(
        consumer: PostgresTransport, pg_url: str, pg_admin_url: str) -> None:
    database = urlsplit(pg_url).path.lstrip("/")
    async with await psycopg.AsyncConnection.connect(pg_admin_url, autocommit=True) as admin:
        cur = await admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = %s AND query = 'LISTEN tidings_ready'", (database,))
        assert await cur.fetchone() == (1,)
    for _ in range(int(GUARD_S / 0.01)):  # noticed at once: the socket closes
        if not consumer._listener.connected:
            break
        await asyncio.sleep(0.01)
    assert not consumer._listener.connected
    assert await consumer._listener.wait_connected(GUARD_S)
    await test_a_publish_on_another_connection_wakes_the_consumer(consumer, pg_url)
