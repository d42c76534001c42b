"""``tidings.contrib.sqlalchemy``: an order and its notification in one transaction of
an AsyncSession (with the Runtime) or a sync Session (with a Client) on the real
PostgreSQL; commit ⇒ delivered once, rollback ⇒ no intent and no order, judged by the
sandbox's own counts."""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

pytest.importorskip("sqlalchemy")

from sqlalchemy import Column, Integer, MetaData, Table, create_engine, select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session, sessionmaker

from support.pg_urls import schema_of, without_search_path
from support.sandbox_witness import deliver
from tidings import Client, InvalidInput, NotifyRequest, Settings, build_runtime
from tidings.contrib import sqlalchemy as tsa
from tidings.core.clock import FakeClock
from tidings.providers.sandbox import SandboxTwinProvider
from tidings.runtime import Runtime
from tidings.sandbox import SandboxConfig, SandboxCore

#: The Client builds no provider it sends through; the witness brings its own.
TWIN = {"provider": {"kind": "sandbox-twin"}}
metadata = MetaData()
orders = Table("orders", metadata, Column("id", Integer, primary_key=True),
               Column("customer_id", Integer, nullable=False))


def sa_url(pg_url: str) -> str:
    return pg_url.replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.fixture
async def world(pg_url: str) -> AsyncIterator[tuple[Runtime, SandboxCore, Any]]:
    clock = FakeClock(time.time(), auto_advance=True)
    core = SandboxCore(SandboxConfig(), now=clock.now, seed=1)
    provider = SandboxTwinProvider(core=core, channel="email", clock=clock)
    settings = Settings.parse({"store": pg_url, "channels": {"email": TWIN}})
    engine = create_async_engine(sa_url(pg_url))
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    runtime = await build_runtime(settings, clock=clock, providers={"email": provider})
    try:
        yield runtime, core, async_sessionmaker(engine, expire_on_commit=False)
    finally:
        await runtime.close()
        await engine.dispose()


async def place_order(sessions: Any, runtime: Runtime, order_id: int, *, commit: bool) -> None:
    session: AsyncSession
    async with sessions() as session:
        await session.begin()
        await session.execute(orders.insert().values(id=order_id, customer_id=73))
        keys = await tsa.notify(session, runtime, key=f"order-{order_id}",
                                recipient={"id": "73", "email": "ada@example.com"},
                                channels=["email"], template="t")
        assert keys == [f"order-{order_id}:email"]
        await (session.commit() if commit else session.rollback())


async def drain(runtime: Runtime) -> None:
    worker = runtime.worker("email", "w1")
    while await worker.run_once():
        pass


async def test_commit_delivers_once_and_rollback_leaves_nothing(world: Any) -> None:
    runtime, core, sessions = world
    await place_order(sessions, runtime, 1, commit=True)
    await place_order(sessions, runtime, 2, commit=False)
    assert await runtime.store.intent_get("order-1:email") is not None
    assert await runtime.store.intent_get("order-2:email") is None
    async with sessions() as session:
        assert (await session.execute(select(orders.c.id))).scalars().all() == [1]
    await drain(runtime)
    stats = core.stats()["channels"]["email"]
    assert (stats["accepted"], stats["accepted_keys"]) == (1, 1)
    assert core.lookup("order-1:email", "email") is not None
    assert core.lookup("order-2:email", "email") is None


async def test_a_refused_notify_leaves_the_transaction_usable(world: Any) -> None:
    runtime, _, sessions = world
    async with sessions() as session, session.begin():
        await session.execute(orders.insert().values(id=3, customer_id=73))
        with pytest.raises(InvalidInput, match="channel"):
            await tsa.notify(session, runtime, key="order-3", recipient={"id": "73"},
                             channels=["fax"], template="t")
        await session.execute(orders.insert().values(id=4, customer_id=73))
    async with sessions() as session:
        assert (await session.execute(select(orders.c.id))).scalars().all() == [3, 4]


# ------------------------------------------------------------------ a sync Session


@pytest.fixture
def sync_world(pg_url: str) -> Iterator[tuple[Client, Settings, Any]]:
    settings = Settings.parse({"store": pg_url, "channels": {"email": TWIN}})
    engine = create_engine(sa_url(pg_url))
    metadata.create_all(engine)
    try:
        with Client(settings) as client:
            yield client, settings, sessionmaker(engine)
    finally:
        engine.dispose()


def place_order_sync(sessions: Any, client: Client, order_id: int, *, commit: bool) -> None:
    session: Session
    with sessions() as session:
        session.begin()
        session.execute(orders.insert().values(id=order_id, customer_id=73))
        keys = tsa.notify(session, client, key=f"order-{order_id}",
                          recipient={"id": "73", "email": "ada@example.com"},
                          channels=["email"], template="t")
        assert keys == [f"order-{order_id}:email"]
        session.commit() if commit else session.rollback()


def order_ids(sessions: Any) -> list[int]:
    with sessions() as session:
        return list(session.execute(select(orders.c.id).order_by(orders.c.id)).scalars())


def test_a_sync_session_commit_delivers_once_and_rollback_leaves_nothing(
        sync_world: Any) -> None:
    client, settings, sessions = sync_world
    place_order_sync(sessions, client, 11, commit=True)
    place_order_sync(sessions, client, 12, commit=False)
    assert order_ids(sessions) == [11]
    assert [d.key for d in client.inspect("order-11")] == ["order-11:email"]
    assert client.inspect("order-12") == []
    stats, sandbox = asyncio.run(deliver(settings))
    assert (stats["accepted"], stats["accepted_keys"]) == (1, 1)
    assert sandbox.lookup("order-11:email") is not None
    assert sandbox.lookup("order-12:email") is None


def test_a_sync_refusal_leaves_the_transaction_usable(sync_world: Any) -> None:
    client, _, sessions = sync_world
    with sessions() as session, session.begin():
        session.execute(orders.insert().values(id=13, customer_id=73))
        with pytest.raises(InvalidInput, match="channel"):
            tsa.notify(session, client, key="order-13", recipient={"id": "73"},
                       channels=["fax"], template="t")
        session.execute(orders.insert().values(id=14, customer_id=73))
        [[key]] = tsa.notify_many(session.connection(), client, [NotifyRequest(
            key="order-14", recipient={"id": "73", "email": "ada@example.com"},
            channels=["email"], template="t")])
    assert order_ids(sessions) == [13, 14]
    assert [d.key for d in client.inspect("order-14")] == [key]


def test_a_sync_session_whose_search_path_lacks_the_stores_schema(
        sync_world: Any, pg_url: str) -> None:
    client, settings, _ = sync_world
    engine = create_engine(sa_url(without_search_path(pg_url)))
    table = f"{schema_of(pg_url)}_orders"
    try:
        with Session(engine) as session, session.begin():
            session.execute(text(f"CREATE TABLE {table} (id int)"))
            session.execute(text(f"INSERT INTO {table} VALUES (15)"))
            tsa.notify(session, client, key="order-15",
                       recipient={"id": "73", "email": "ada@example.com"},
                       channels=["email"], template="t")
            # The session's own names still resolve as before.
            assert session.execute(text(f"SELECT id FROM {table}")).scalar() == 15
        with Session(engine) as session, session.begin():
            session.execute(text(f"DROP TABLE {table}"))
    finally:
        engine.dispose()
    stats, _ = asyncio.run(deliver(settings))
    assert stats["accepted_keys"] == 1


def test_the_wrong_door_or_driver_is_refused_by_name(world: Any, sync_world: Any,
                                                     pg_url: str) -> None:
    runtime, _, async_sessions = world
    client, _, sessions = sync_world
    with sessions() as session, pytest.raises(InvalidInput, match="client: a sync Session"):
        tsa.notify(session, runtime, key="k", recipient={"id": "1"},  # type: ignore[call-overload]
                   channels=["email"], template="t")
    with pytest.raises(InvalidInput, match="session: must be a SQLAlchemy Session"):
        tsa.notify(object(), client, key="k", recipient={"id": "1"},  # type: ignore[call-overload]
                   channels=["email"], template="t")

    async def async_with_client() -> None:
        async with async_sessions() as session:
            tsa.notify(session, client, key="k", recipient={"id": "1"},  # type: ignore[call-overload]
                       channels=["email"], template="t")

    with pytest.raises(InvalidInput, match="runtime: an AsyncSession"):
        asyncio.run(async_with_client())
    engine = create_engine(pg_url.replace("postgresql://", "postgresql+psycopg2://", 1)) \
        if importlib.util.find_spec("psycopg2") else None
    if engine is not None:
        try:
            with Session(engine) as session, pytest.raises(InvalidInput, match="psycopg 3"):
                tsa.notify(session, client, key="k", recipient={"id": "1"},
                           channels=["email"], template="t")
        finally:
            engine.dispose()
