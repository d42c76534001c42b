"""``notify(..., connection=conn)`` joins the caller's PostgreSQL transaction (needs a
server: see tests/conftest.py; skips without one, fails under CI).

The witnesses: a second connection reading the tables, and the sandbox's own count of
what a worker then sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest

from support.pg_urls import without_search_path
from tidings.config.settings import Settings
from tidings.core.clock import SystemClock
from tidings.core.errors import ConfigurationError, InvalidInput
from tidings.providers.sandbox import SandboxTwinProvider
from tidings.runtime import Runtime, build_runtime
from tidings.sandbox.core import SandboxConfig, SandboxCore

#: A channel on the in-process sandbox, named as such: no channel has a provider by default.
TWIN = {"provider": {"kind": "sandbox-twin"}}

RECIPIENT = {"id": "customer-73", "email": "c73@example.test", "phone": "+447700900073"}


@pytest.fixture
async def sandbox() -> SandboxCore:
    return SandboxCore(SandboxConfig(), now=SystemClock().now, seed=1)


@pytest.fixture
async def runtime(pg_url: str, sandbox: SandboxCore) -> AsyncIterator[Runtime]:
    clock = SystemClock()
    settings = Settings.parse({"store": pg_url, "channels": {"email": TWIN, "sms": TWIN}})
    providers = {c: SandboxTwinProvider(core=sandbox, channel=c, clock=clock)
                 for c in ("email", "sms")}
    rt = await build_runtime(settings, clock=clock, providers=providers)
    yield rt
    await rt.close()


async def counts(url: str, key_prefix: str) -> tuple[int, int, int]:
    """(intents, messages, events) whose key starts with ``key_prefix``, read apart."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        like = key_prefix + "%"
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM intents WHERE key LIKE %s),"
            " (SELECT count(*) FROM messages WHERE message_id LIKE %s),"
            " (SELECT count(*) FROM events WHERE key LIKE %s)", (like, like, like))
        row = await cur.fetchone()
        assert row is not None
        return int(row[0]), int(row[1]), int(row[2])


async def make_orders_table(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("CREATE TABLE orders (id text PRIMARY KEY)")


async def deliver_all(runtime: Runtime, channel: str) -> None:
    worker = runtime.worker(channel)
    while await worker.run_once():
        pass


async def test_rolled_back_caller_transaction_leaves_no_intent(
        runtime: Runtime, pg_url: str, sandbox: SandboxCore) -> None:
    await make_orders_table(pg_url)
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        await conn.execute("INSERT INTO orders VALUES ('order-1')")
        keys = await runtime.notify(key="shipment-1:customer-73", recipient=RECIPIENT,
                                    channels=["email", "sms"], template="shipment/v1",
                                    connection=conn)
        assert keys == ["shipment-1:customer-73:email", "shipment-1:customer-73:sms"]
        # Not visible to anyone else (a worker included) before the caller commits.
        assert await counts(pg_url, "shipment-1:") == (0, 0, 0)
        assert await runtime.store.intent_get(keys[0]) is None
        await conn.rollback()
    assert await counts(pg_url, "shipment-1:") == (0, 0, 0)
    await deliver_all(runtime, "email")
    assert sandbox.stats()["total"]["accepted"] == 0


async def test_committed_caller_transaction_has_its_intents_and_they_are_delivered(
        runtime: Runtime, pg_url: str, sandbox: SandboxCore) -> None:
    await make_orders_table(pg_url)
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        await conn.execute("INSERT INTO orders VALUES ('order-2')")
        await runtime.notify(key="shipment-2:customer-73", recipient=RECIPIENT,
                             channels=["email", "sms"], template="shipment/v1",
                             connection=conn)
        await conn.commit()
    # Two intents, born enqueued with their messages, one event each.
    assert await counts(pg_url, "shipment-2:") == (2, 2, 2)
    await deliver_all(runtime, "email")
    await deliver_all(runtime, "sms")
    stats = sandbox.stats()["channels"]
    assert (stats["email"]["accepted_keys"], stats["sms"]["accepted_keys"]) == (1, 1)


async def test_inside_a_transaction_block_on_an_autocommit_connection(
        runtime: Runtime, pg_url: str) -> None:
    await make_orders_table(pg_url)
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        with pytest.raises(RuntimeError, match="order failed"):
            async with conn.transaction():
                await conn.execute("INSERT INTO orders VALUES ('order-3')")
                await runtime.notify(key="shipment-3:customer-73", recipient=RECIPIENT,
                                     channels=["email"], template="shipment/v1",
                                     connection=conn)
                raise RuntimeError("order failed")
        assert await counts(pg_url, "shipment-3:") == (0, 0, 0)
        async with conn.transaction():
            await runtime.notify(key="shipment-4:customer-73", recipient=RECIPIENT,
                                 channels=["email"], template="shipment/v1", connection=conn)
    assert await counts(pg_url, "shipment-4:") == (1, 1, 1)


async def test_future_dated_intents_join_too_and_wait_for_the_relay(
        runtime: Runtime, pg_url: str) -> None:
    later = runtime.clock.now() + 3600
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        [key] = await runtime.notify(key="reminder-5:customer-73", recipient=RECIPIENT,
                                     channels=["email"], template="reminder/v1",
                                     due_at=later, connection=conn)
        await conn.commit()
    intent = await runtime.store.intent_get(key)
    assert intent is not None and intent.state.value == "selected"
    assert await counts(pg_url, "reminder-5:") == (1, 0, 1)


async def test_a_repeated_notify_in_a_second_transaction_adds_nothing(
        runtime: Runtime, pg_url: str) -> None:
    for _ in range(2):
        async with await psycopg.AsyncConnection.connect(pg_url) as conn:
            await runtime.notify(key="shipment-6:customer-73", recipient=RECIPIENT,
                                 channels=["email"], template="shipment/v1", connection=conn)
            await conn.commit()
    assert await counts(pg_url, "shipment-6:") == (1, 1, 1)


async def test_bad_input_raises_before_touching_the_callers_transaction(
        runtime: Runtime, pg_url: str) -> None:
    await make_orders_table(pg_url)
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        await conn.execute("INSERT INTO orders VALUES ('order-7')")
        with pytest.raises(InvalidInput, match="channels"):
            await runtime.notify(key="shipment-7:customer-73", recipient=RECIPIENT,
                                 channels=["fax"], template="shipment/v1", connection=conn)
        await conn.commit()  # the caller's own work is intact
        cur = await conn.execute("SELECT count(*) FROM orders")
        assert await cur.fetchone() == (1,)


async def test_a_connection_that_is_not_psycopg_names_the_field(runtime: Runtime) -> None:
    with pytest.raises(InvalidInput, match="connection"):
        await runtime.notify(key="shipment-8:customer-73", recipient=RECIPIENT,
                             channels=["email"], template="shipment/v1",
                             connection=object())


async def test_the_sqlite_store_refuses_a_caller_connection(tmp_path: object) -> None:
    settings = Settings.parse({"store": f"sqlite:///{tmp_path}/t.db", "channels": {"email": TWIN}})
    async with await build_runtime(settings) as rt:
        with pytest.raises(ConfigurationError, match="connection"):
            await rt.notify(key="s-9:c", recipient=RECIPIENT, channels=["email"],
                            template="shipment/v1", connection=object())


async def test_a_search_path_without_the_stores_schema_is_joined_in_it(
        runtime: Runtime, pg_url: str,
        sandbox: SandboxCore) -> None:
    # The application's connection has the database's default search_path ("$user",
    # public), where the store's tables are not: the join sets the store's for its writes.
    app_url = without_search_path(pg_url)
    async with await psycopg.AsyncConnection.connect(app_url) as conn:
        before = await (await conn.execute("SHOW search_path")).fetchone()
        await runtime.notify(key="shipment-10:customer-73", recipient=RECIPIENT,
                             channels=["email"], template="shipment/v1", connection=conn)
        assert await (await conn.execute("SHOW search_path")).fetchone() == before
        await conn.commit()
    assert await counts(pg_url, "shipment-10:") == (1, 1, 1)
    await deliver_all(runtime, "email")
    assert sandbox.stats()["channels"]["email"]["accepted_keys"] == 1


async def test_an_autocommit_connection_outside_a_transaction_is_refused(
        runtime: Runtime, pg_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        with pytest.raises(InvalidInput, match="connection: is in no transaction"):
            await runtime.notify(key="shipment-11:customer-73", recipient=RECIPIENT,
                                 channels=["email"], template="shipment/v1",
                                 connection=conn)
    assert await counts(pg_url, "shipment-11:") == (0, 0, 0)


async def test_a_connection_to_another_database_is_refused(
        runtime: Runtime, pg_admin_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_admin_url) as conn:
        with pytest.raises(InvalidInput, match="connection: is to database 'postgres'"):
            await runtime.notify(key="shipment-12:customer-73", recipient=RECIPIENT,
                                 channels=["email"], template="shipment/v1",
                                 connection=conn)
        assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
