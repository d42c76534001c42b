"""A notify repeated under its key inside a caller's PostgreSQL transaction, on the async
door (``Runtime.notify(connection=psycopg.AsyncConnection)``) and the sync one
(``tidings.Client.notify(connection=psycopg.Connection)``); needs a server (see
tests/conftest.py: skips without one, fails under CI).

The same request again is ``existing``; another one raises ``KeyConflict`` and writes
nothing, in a savepoint: the caller's transaction is still usable (its own rows kept),
and commits or rolls back as the caller decides. The witness is a second connection
reading the tables.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest

from tidings import Client
from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.clock import SystemClock
from tidings.core.errors import InvalidInput, KeyConflict
from tidings.core.repeats import Notified
from tidings.runtime import Runtime, build_runtime

TWIN = {"provider": {"kind": "sandbox-twin"}}
WHO = {"id": "c1", "email": "c1@example.com", "phone": "+15550100123"}


def witness(url: str, prefix: str) -> dict[str, object]:
    """What is committed under keys starting with ``prefix``: each intent's data, and
    the orders, read on a connection apart."""
    with psycopg.connect(url) as conn:
        found: dict[str, object] = {
            key: json.loads(data) for key, data in conn.execute(
                "SELECT key, data FROM intents WHERE key LIKE %s ORDER BY key",
                (prefix + "%",)).fetchall()}
        found["orders"] = [r[0] for r in conn.execute("SELECT id FROM orders ORDER BY id")]
    return found


def make_orders(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY)")


# ---------------------------------------------------------------- the async door


@pytest.fixture
async def runtime(pg_url: str) -> AsyncIterator[Runtime]:
    settings = Settings.parse({"store": pg_url, "channels": {"email": TWIN, "sms": TWIN}})
    rt = await build_runtime(settings, clock=SystemClock())
    make_orders(pg_url)
    yield rt
    await rt.close()


async def anotify(rt: Runtime, conn: psycopg.AsyncConnection, key: str = "o-1",
                  **change: object) -> Notified:
    fields: dict[str, object] = {"recipient": WHO, "channels": ["email"],
                                 "template": "order/v1", "data": {"x": 1}}
    fields.update(change)
    return await rt.notify(key=key, connection=conn, **fields)  # type: ignore[arg-type]


async def test_async_repeat_in_one_transaction_is_existing(runtime: Runtime,
                                                            pg_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        first = await anotify(runtime, conn)
        again = await anotify(runtime, conn)
        assert first == again == ["o-1:email"]
        assert first.created == ("o-1:email",) and again.existing == ("o-1:email",)
        await conn.commit()
    assert witness(pg_url, "o-") == {"o-1:email": {"x": 1}, "orders": []}


async def test_async_conflict_leaves_the_callers_transaction_usable(runtime: Runtime,
                                                                     pg_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        await conn.execute("INSERT INTO orders VALUES ('a')")
        await anotify(runtime, conn)
        with pytest.raises(KeyConflict) as caught:
            await anotify(runtime, conn, channels=["email", "sms"], data={"x": 2})
        assert caught.value.field == "channels"
        with pytest.raises(KeyConflict) as caught:
            # One good new request and one conflicting: neither is written.
            await runtime.notify_many([
                _req("o-2"), _req("o-1", data={"x": 2})], connection=conn)
        assert caught.value.field == "requests[1].data.x"
        # The transaction is usable: the caller's own statements and a new notify go on.
        await conn.execute("INSERT INTO orders VALUES ('b')")
        assert (await anotify(runtime, conn, "o-3")).created == ("o-3:email",)
        await conn.commit()
    assert witness(pg_url, "o-") == {"o-1:email": {"x": 1}, "o-3:email": {"x": 1},
                                     "orders": ["a", "b"]}


async def test_async_conflict_then_rollback_leaves_nothing(runtime: Runtime,
                                                            pg_url: str) -> None:
    await runtime.notify(key="o-1", recipient=WHO, channels=["email"], template="order/v1",
                         data={"x": 1})
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        await conn.execute("INSERT INTO orders VALUES ('a')")
        with pytest.raises(KeyConflict) as caught:
            await anotify(runtime, conn, data={"x": 2})
        assert caught.value.field == "data.x"
        assert (await anotify(runtime, conn)).existing == ("o-1:email",)
        await conn.rollback()
    assert witness(pg_url, "o-") == {"o-1:email": {"x": 1}, "orders": []}


def _req(key: str, **change: object) -> NotifyRequest:
    fields: dict[str, object] = {"key": key, "recipient": WHO, "channels": ["email"],
                                 "template": "order/v1", "data": {"x": 1}}
    fields.update(change)
    return NotifyRequest(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("ending", ["commit", "rollback"])
async def test_a_conflict_with_a_transaction_still_open_waits_for_its_end(
        runtime: Runtime, pg_url: str, ending: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url) as first, \
            await psycopg.AsyncConnection.connect(pg_url) as second:
        await anotify(runtime, first)
        other = asyncio.create_task(anotify(runtime, second, data={"x": 2}))
        await asyncio.sleep(0.3)
        assert not other.done()  # waits on the first's row
        await (first.commit() if ending == "commit" else first.rollback())
        if ending == "commit":
            with pytest.raises(KeyConflict):
                await asyncio.wait_for(other, 10)
            assert (await anotify(runtime, second)).existing == ("o-1:email",)
        else:
            assert (await asyncio.wait_for(other, 10)).created == ("o-1:email",)
        await second.commit()
    assert witness(pg_url, "o-") == {"o-1:email": {"x": 1 if ending == "commit" else 2},
                                     "orders": []}


async def test_the_async_door_refuses_a_sync_connection_and_a_string(runtime: Runtime,
                                                                      pg_url: str) -> None:
    with psycopg.connect(pg_url) as sync_conn:
        for wrong in (sync_conn, pg_url):
            with pytest.raises(InvalidInput) as caught:
                await anotify(runtime, wrong)  # type: ignore[arg-type]
            assert caught.value.field == "connection"
        with pytest.raises(InvalidInput, match=r"tidings\.Client"):
            await anotify(runtime, sync_conn)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput) as caught:
            await runtime.notify_many([_req("o-1")], connection="nope")  # type: ignore[arg-type]
        assert caught.value.field == "connection"
    assert witness(pg_url, "o-") == {"orders": []}


# ---------------------------------------------------------------- the sync door


@pytest.fixture
def client(pg_url: str) -> Iterator[Client]:
    settings = Settings.parse({"store": pg_url, "channels": {"email": TWIN}})
    with Client(settings) as c:
        c.inspect("none")  # the store exists before the test's table
        make_orders(pg_url)
        yield c


def snotify(client: Client, conn: psycopg.Connection, key: str = "o-1",
            **change: object) -> Notified:
    fields: dict[str, object] = {"recipient": WHO, "channels": ["email"],
                                 "template": "order/v1", "data": {"x": 1}}
    fields.update(change)
    return client.notify(key=key, connection=conn, **fields)  # type: ignore[arg-type]


def test_sync_repeat_existing_and_conflict_leave_the_transaction_usable(
        client: Client, pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        conn.execute("INSERT INTO orders VALUES ('a')")
        assert snotify(client, conn).created == ("o-1:email",)
        assert snotify(client, conn, data={"x": 1}).existing == ("o-1:email",)
        for change, field in (({"data": {"x": 2}}, "data.x"),
                              ({"template": "order/v2"}, "template")):
            with pytest.raises(KeyConflict) as caught:
                snotify(client, conn, **change)
            assert caught.value.field == field
        with pytest.raises(KeyConflict):
            client.notify_many([_req("o-2"), _req("o-1", data={"x": 3})],
                               connection=conn)
        conn.execute("INSERT INTO orders VALUES ('b')")
        conn.commit()
    assert witness(pg_url, "o-") == {"o-1:email": {"x": 1}, "orders": ["a", "b"]}


def test_sync_conflict_with_a_committed_intent_then_rollback(client: Client,
                                                             pg_url: str) -> None:
    client.notify(key="o-1", recipient=WHO, channels=["email"], template="order/v1",
                  data={"x": 1})
    with psycopg.connect(pg_url) as conn:
        conn.execute("INSERT INTO orders VALUES ('a')")
        with pytest.raises(KeyConflict) as caught:
            snotify(client, conn, data={"x": 2})
        assert caught.value.field == "data.x"
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.rollback()
    assert witness(pg_url, "o-") == {"o-1:email": {"x": 1}, "orders": []}


def test_the_sync_door_refuses_an_async_connection_and_a_string(client: Client,
                                                                pg_url: str) -> None:
    async def attempt() -> None:
        async with await psycopg.AsyncConnection.connect(pg_url) as conn:
            with pytest.raises(InvalidInput) as caught:
                # From a thread of its own: Client is for code without an event loop.
                await asyncio.to_thread(snotify, client, conn)  # type: ignore[arg-type]
            assert caught.value.field == "connection"

    asyncio.run(attempt())
    with pytest.raises(InvalidInput) as caught:
        snotify(client, "postgresql://nowhere")  # type: ignore[arg-type]
    assert caught.value.field == "connection"
    assert witness(pg_url, "o-") == {"orders": []}
