"""``Client.notify(connection=…)``: a notify written on the caller's *sync* psycopg
connection, inside its transaction, in the caller's thread (needs a server: see
tests/conftest.py; skips without one, fails under CI).

The witnesses: a second connection reading the tables, the NOTIFY a listener gets, and
the sandbox's own count of what a worker then sent.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from support.pg_urls import schema_of, without_search_path
from support.sandbox_witness import deliver
from tidings import Client, ConfigurationError, InvalidInput, NotifyRequest, Settings

#: The Client builds no provider it sends through; the witness brings its own.
TWIN = {"provider": {"kind": "sandbox-twin"}}
RECIPIENT = {"id": "customer-73", "email": "c73@example.test"}


def counts(url: str, prefix: str) -> tuple[int, int]:
    """(intents, messages) whose key starts with ``prefix``, read on a connection apart."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM intents WHERE key LIKE %(p)s),"
            " (SELECT count(*) FROM messages WHERE message_id LIKE %(p)s)",
            {"p": prefix + "%"}).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.fixture
def settings(pg_url: str) -> Settings:
    return Settings.parse({"store": pg_url, "channels": {"email": TWIN}})


@pytest.fixture
def client(settings: Settings, pg_url: str) -> Iterator[Client]:
    with Client(settings) as c:
        c.inspect("none")  # the store (and its schema) exist before the tests' tables
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("CREATE TABLE orders (id text PRIMARY KEY)")
        yield c


def notify(client: Client, conn: psycopg.Connection, order: str) -> list[str]:
    return client.notify(key=order, recipient=RECIPIENT, channels=["email"],
                         template="order/v1", connection=conn)


def test_commit_delivers_once_and_rollback_leaves_nothing(
        client: Client, pg_url: str, settings: Settings) -> None:
    with psycopg.connect(pg_url) as conn:
        conn.execute("INSERT INTO orders VALUES ('order-1')")
        assert notify(client, conn, "order-1") == ["order-1:email"]
        assert counts(pg_url, "order-1:") == (0, 0)  # nobody sees it before the commit
        conn.commit()
        conn.execute("INSERT INTO orders VALUES ('order-2')")
        notify(client, conn, "order-2")
        conn.rollback()
    assert counts(pg_url, "order-1:") == (1, 1)  # born enqueued, its message beside it
    assert counts(pg_url, "order-2:") == (0, 0)
    stats, sandbox = asyncio.run(deliver(settings))
    assert (stats["accepted"], stats["accepted_keys"]) == (1, 1)
    assert sandbox.lookup("order-1:email") is not None
    assert sandbox.lookup("order-2:email") is None


def test_the_commit_wakes_the_queues_listeners(client: Client, pg_url: str) -> None:
    heard: list[str] = []
    with psycopg.connect(pg_url, autocommit=True) as listener:
        listener.add_notify_handler(lambda n: heard.append(n.payload))
        listener.execute("LISTEN tidings_ready")
        with psycopg.connect(pg_url) as conn:
            notify(client, conn, "order-3")
            listener.execute("SELECT 1")
            assert heard == []  # not before the commit
            conn.commit()
        listener.execute("SELECT 1")  # notifications arrive between its transactions
    assert heard == [f"{schema_of(pg_url)}:email"]


def test_a_refusal_leaves_the_transaction_usable(client: Client, pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        conn.execute("INSERT INTO orders VALUES ('order-4')")
        with pytest.raises(InvalidInput, match="channels"):
            client.notify(key="order-4", recipient=RECIPIENT, channels=["fax"],
                          template="order/v1", connection=conn)
        # A key an earlier notify of this transaction holds is no error: a no-op.
        notify(client, conn, "order-4")
        notify(client, conn, "order-4")
        conn.execute("INSERT INTO orders VALUES ('order-5')")
        conn.commit()
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (2,)
    assert counts(pg_url, "order-4:") == (1, 1)


def test_two_notifies_in_one_transaction_each_get_their_own(client: Client,
                                                            pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        later = client.notify_many(
            [NotifyRequest(key="order-6", recipient=RECIPIENT, channels=["email"],
                           template="order/v1", due_at=4_000_000_000.0)], connection=conn)
        now = notify(client, conn, "order-7")
        conn.commit()
    assert (later, now) == ([["order-6:email"]], ["order-7:email"])
    assert counts(pg_url, "order-6:") == (1, 0)  # due later: selected, for the relay
    assert counts(pg_url, "order-7:") == (1, 1)
    assert client.inspect("order-6:email")[0].intent.state.value == "selected"


def test_from_many_threads_each_on_its_own_connection(
        client: Client, pg_url: str, settings: Settings) -> None:
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            with psycopg.connect(pg_url) as conn:
                conn.execute("INSERT INTO orders VALUES (%s)", (f"order-t{i}",))
                notify(client, conn, f"order-t{i}")
                conn.commit() if i % 2 == 0 else conn.rollback()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert counts(pg_url, "order-t") == (5, 5)
    stats, _ = asyncio.run(deliver(settings))
    assert (stats["accepted"], stats["accepted_keys"]) == (5, 5)


def test_a_search_path_without_the_stores_schema(
        client: Client, pg_url: str,
        settings: Settings) -> None:
    # The application's own connection: the database's default search_path ("$user",
    # public), where the store's tables are not; the store's schema is set for the join.
    app_url = without_search_path(pg_url)
    schema = schema_of(pg_url)
    with psycopg.connect(app_url) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {schema}_orders (id text)")
        before = conn.execute("SHOW search_path").fetchone()
        notify(client, conn, "order-8")
        assert conn.execute("SHOW search_path").fetchone() == before
        conn.execute(f"INSERT INTO {schema}_orders VALUES ('order-8')")  # still its own
        conn.commit()
        conn.execute(f"DROP TABLE {schema}_orders")
        conn.commit()
    assert counts(pg_url, "order-8:") == (1, 1)
    stats, _ = asyncio.run(deliver(settings))
    assert stats["accepted_keys"] == 1


def test_refusals_name_the_connection(client: Client, pg_url: str, pg_admin_url: str) -> None:
    with pytest.raises(InvalidInput, match=r"connection: must be a psycopg\.Connection"):
        notify(client, object(), "order-9")  # type: ignore[arg-type]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        with pytest.raises(InvalidInput, match="connection: is in no transaction"):
            notify(client, conn, "order-9")
        with conn.transaction():
            notify(client, conn, "order-9")  # in one: joined
    with psycopg.connect(pg_url) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1/0")
        with pytest.raises(InvalidInput, match="connection: its transaction has failed"):
            notify(client, conn, "order-10")
    # Another database of the same server: the admin one.
    with psycopg.connect(pg_admin_url) as conn:
        with pytest.raises(InvalidInput, match="connection: is to database 'postgres'"):
            notify(client, conn, "order-11")
        assert conn.execute("SELECT 1").fetchone() == (1,)  # still usable
    with psycopg.connect(pg_url) as conn:
        conn.close()
        with pytest.raises(InvalidInput, match="connection: is closed"):
            notify(client, conn, "order-12")
    assert counts(pg_url, "order-9:") == (1, 1)
    assert counts(pg_url, "order-1") == (0, 0)


def test_an_async_connection_is_refused(client: Client, pg_url: str) -> None:
    async def attempt() -> None:
        async with await psycopg.AsyncConnection.connect(pg_url) as conn:
            await asyncio.to_thread(notify, client, conn, "order-13")  # type: ignore[arg-type]

    with pytest.raises(InvalidInput, match=r"connection: must be a psycopg\.Connection"):
        asyncio.run(attempt())


def test_the_sqlite_store_refuses_a_connection(tmp_path: Path, pg_url: str) -> None:
    settings = Settings.parse({"store": f"sqlite:///{tmp_path}/t.db", "channels": {"email": TWIN}})
    with (Client(settings) as client, psycopg.connect(pg_url) as conn,
          pytest.raises(ConfigurationError, match=r"connection: .*PostgreSQL store")):
        notify(client, conn, "order-14")


def test_on_a_broker_the_intents_wait_selected_for_the_relay(pg_url: str,
                                                            redis_url: str) -> None:
    settings = Settings.parse({"store": pg_url, "transport": redis_url,
                               "channels": {"email": TWIN}})
    with Client(settings) as client:
        with psycopg.connect(pg_url) as conn:
            notify(client, conn, "order-20")
            conn.commit()
            notify(client, conn, "order-21")
            conn.rollback()
        assert client.inspect("order-20:email")[0].intent.state.value == "selected"
        assert client.inspect("order-21") == []
    assert counts(pg_url, "order-2") == (1, 0)  # no message in the store's queue table
    stats, sandbox = asyncio.run(deliver(settings, relay=True))
    assert (stats["accepted"], stats["accepted_keys"]) == (1, 1)
    assert sandbox.lookup("order-20:email") is not None
