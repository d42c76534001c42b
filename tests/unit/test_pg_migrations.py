"""PostgreSQL migrations, and opening a PostgreSQL store by URL (needs a server: see
tests/conftest.py; skips without one, fails under CI)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tidings.errors import ConfigurationError, SchemaOutOfDate, StoreError
from tidings.runtime import open_store
from tidings.stores import queries
from tidings.stores.postgres_db import Conn, PostgresDatabase, redact

NOW = 1_000_000.0
KNOWN = [m.version for m in queries.migrations("postgresql")]


@pytest.fixture
async def db(pg_url: str) -> AsyncIterator[PostgresDatabase]:
    database = PostgresDatabase.from_url(pg_url)
    yield database
    await database.close()


def with_extra_migration(monkeypatch: pytest.MonkeyPatch, sql: str) -> int:
    shipped = queries.migrations("postgresql")
    extra = queries.Migration(version=shipped[-1].version + 1, title="extra", sql=sql)
    monkeypatch.setattr(queries, "migrations", lambda dialect: (*shipped, extra))
    return extra.version


async def tables(db: PostgresDatabase) -> set[str]:
    async def fn(conn: Conn) -> set[str]:
        cur = await conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        return {name for (name,) in await cur.fetchall()}

    return await db.read(fn)


async def test_migrate_from_zero_applies_every_migration_in_order(db: PostgresDatabase) -> None:
    assert await db.schema_version() == 0
    with pytest.raises(SchemaOutOfDate, match="0001"):
        await db.check_schema()

    applied = await db.migrate(now=NOW)

    assert applied == KNOWN == sorted(KNOWN)
    assert await db.schema_version() == KNOWN[-1]
    assert {"intents", "events", "occurrences", "switches", "pacer_state", "messages",
            "dead_letters", "schema_migrations"} <= await tables(db)
    await db.check_schema()


async def test_migrating_again_applies_nothing(db: PostgresDatabase) -> None:
    await db.migrate(now=NOW)

    assert await db.migrate(now=NOW + 1) == []
    assert await db.applied_migrations() == KNOWN


async def test_concurrent_migrators_apply_each_version_once(pg_url: str) -> None:
    migrators = [PostgresDatabase.from_url(pg_url) for _ in range(4)]
    try:
        results = await asyncio.gather(*(m.migrate(now=NOW) for m in migrators))
    finally:
        for m in migrators:
            await m.close()

    assert sorted(v for applied in results for v in applied) == KNOWN


async def test_check_schema_names_only_the_versions_not_yet_applied(
    db: PostgresDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    await db.migrate(now=NOW)
    extra = with_extra_migration(monkeypatch, "CREATE TABLE later (id integer PRIMARY KEY);")

    with pytest.raises(SchemaOutOfDate) as raised:
        await db.check_schema()

    assert f"{extra:04d}" in str(raised.value)
    assert f"{KNOWN[0]:04d}" not in str(raised.value)
    assert await db.migrate(now=NOW) == [extra]
    await db.check_schema()


async def test_a_failing_migration_rolls_back_whole_and_is_not_recorded(
    db: PostgresDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    await db.migrate(now=NOW)
    with_extra_migration(monkeypatch, "CREATE TABLE half (id integer);\n"
                                      "INSERT INTO nowhere VALUES (1);")

    with pytest.raises(StoreError, match="nowhere"):
        await db.migrate(now=NOW)

    assert "half" not in await tables(db)
    assert await db.applied_migrations() == KNOWN


async def test_open_store_by_url_gives_a_store_and_its_queue(pg_url: str) -> None:
    store, transport = await open_store(pg_url)
    try:
        assert await store.migrate() == KNOWN
        assert transport.name == "pg"
        assert (await transport.depth("email", now=NOW)).ready == 0
    finally:
        await transport.close()
        await store.close()


@pytest.mark.parametrize("url", ["postgresql://u:pw@localhost:notaport/db",
                                 "postgresql://u:pw@localhost/db?nosuchoption=1"])
async def test_a_malformed_url_is_a_configuration_error_without_the_password(url: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        await open_store(url)

    assert "pw" not in str(raised.value)
    assert "localhost" in str(raised.value)


async def test_an_unreachable_server_is_a_store_error_naming_the_url_without_password() -> None:
    # Port 1 on loopback: refused at once, no server needed for this test.
    with pytest.raises(StoreError) as raised:
        await open_store("postgres://tidings:s3cret@127.0.0.1:1/tidings")

    message = str(raised.value)
    assert "s3cret" not in message
    assert "postgres://tidings:***@127.0.0.1:1/tidings" in message


def test_redact_hides_only_the_password() -> None:
    assert redact("postgresql://a:b@h:5/d?x=1") == "postgresql://a:***@h:5/d?x=1"
    assert redact("postgresql://a@h/d") == "postgresql://a@h/d"
    assert redact("postgresql://a:b@h:x/d") == "postgresql://a:***@h:x/d"
