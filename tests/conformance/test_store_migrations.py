"""Migrations, one suite for both databases (the store's ``store_url`` backends).

Each dialect ships its own numbered migration files (``stores/sql/<dialect>/migrations``);
what migrating means is the same on both: in order, once, each version whole or not at
all, with the pending ones named by ``check_schema``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from tidings.core.errors import SchemaOutOfDate, StoreError
from tidings.core.model import Event
from tidings.stores import queries
from tidings.stores.sqlite_db import SqliteDatabase

NOW = 1_000_000.0
TABLES = {
    "sqlite": "SELECT name FROM sqlite_master WHERE type = 'table'",
    "postgresql": "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()",
}


@dataclass(frozen=True)
class Migrated:
    """A database of one dialect, not migrated yet, and how to look inside it."""

    dialect: str
    url: str
    known: list[int]  # the versions the package ships (read before any test adds one)

    def open(self) -> Any:
        if self.dialect == "sqlite":
            return SqliteDatabase.from_url(self.url)
        from tidings.stores.postgres_db import PostgresDatabase

        return PostgresDatabase.from_url(self.url)

    def with_extra_migration(self, monkeypatch: pytest.MonkeyPatch, sql: str) -> int:
        """The code knows one migration more than the package ships; returns its version."""
        shipped = queries.migrations(self.dialect)
        extra = queries.Migration(version=shipped[-1].version + 1, title="extra", sql=sql)
        monkeypatch.setattr(queries, "migrations", lambda dialect: (*shipped, extra))
        return extra.version

    async def rows(self, db: Any, sql: str) -> list[tuple[Any, ...]]:
        if self.dialect == "sqlite":
            result: list[tuple[Any, ...]] = await db.read(
                lambda conn: conn.execute(sql).fetchall())
            return result

        async def fn(conn: Any) -> list[tuple[Any, ...]]:
            cur = await conn.execute(sql)
            return list(await cur.fetchall())

        return list(await db.read(fn))

    async def tables(self, db: Any) -> set[str]:
        return {name for (name,) in await self.rows(db, TABLES[self.dialect])}


@pytest.fixture
def migrated(store_backend: Any, store_url: str) -> Migrated:
    dialect = "sqlite" if store_backend.name == "sqlite" else "postgresql"
    return Migrated(dialect=dialect, url=store_url,
                    known=[m.version for m in queries.migrations(dialect)])


@pytest.fixture
async def db(migrated: Migrated) -> AsyncIterator[Any]:
    database = migrated.open()
    yield database
    await database.close()


async def test_migrate_from_zero_applies_every_migration_in_order(
        migrated: Migrated, db: Any) -> None:
    assert await db.schema_version() == 0
    with pytest.raises(SchemaOutOfDate) as raised:
        await db.check_schema()
    assert raised.value.pending == tuple(migrated.known)
    assert raised.value.new is True
    assert "new database" in str(raised.value) and "out of date" not in str(raised.value)

    applied = await db.migrate(now=NOW)

    assert applied == migrated.known == sorted(migrated.known)
    assert await db.schema_version() == migrated.known[-1]
    assert {"intents", "events", "occurrences", "switches", "pacer_state", "pacer_pauses",
            "messages", "dead_letters", "schema_migrations"} <= await migrated.tables(db)
    recorded = await migrated.rows(
        db, "SELECT version, applied_at FROM schema_migrations ORDER BY version")
    assert recorded == [(v, NOW) for v in migrated.known]
    await db.check_schema()


async def test_migrating_again_applies_nothing(migrated: Migrated, db: Any) -> None:
    await db.migrate(now=NOW)

    assert await db.migrate(now=NOW + 1) == []
    assert await db.applied_migrations() == migrated.known


async def test_concurrent_migrators_apply_each_version_once(migrated: Migrated) -> None:
    migrators = [migrated.open() for _ in range(4)]
    try:
        results = await asyncio.gather(*(m.migrate(now=NOW) for m in migrators))
    finally:
        for m in migrators:
            await m.close()

    assert sorted(v for applied in results for v in applied) == migrated.known


async def test_openers_of_a_new_database_never_see_half_a_schema(migrated: Migrated) -> None:
    # What `tidings scheduler` and `tidings worker` do when started at once on a new
    # database: each creates the schema if there is none, then checks it.
    openers = [migrated.open() for _ in range(4)]
    watcher = migrated.open()
    seen: list[list[int]] = []
    done = asyncio.Event()

    async def watch() -> None:
        while not done.is_set():
            seen.append(await watcher.applied_migrations())
            await asyncio.sleep(0)

    async def start(opener: Any) -> list[int]:
        applied: list[int] = await opener.migrate(now=NOW, new_only=True)
        await opener.check_schema()
        return applied

    watching = asyncio.create_task(watch())
    try:
        results = await asyncio.gather(*(start(o) for o in openers))
    finally:
        done.set()
        await watching
        for database in (*openers, watcher):
            await database.close()

    assert sorted(len(applied) for applied in results) == [0, 0, 0, len(migrated.known)]
    assert seen and all(versions in ([], migrated.known) for versions in seen), \
        [v for v in seen if v not in ([], migrated.known)][:3]


async def test_new_only_leaves_an_older_database_to_be_migrated_on_purpose(
        migrated: Migrated, db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    await db.migrate(now=NOW)
    extra = migrated.with_extra_migration(monkeypatch, "CREATE TABLE later_one (x INTEGER)")

    assert await db.migrate(now=NOW + 1, new_only=True) == []
    with pytest.raises(SchemaOutOfDate) as raised:
        await db.check_schema()
    assert raised.value.pending == (extra,) and raised.value.new is False


async def test_check_schema_names_only_the_versions_not_yet_applied(
        migrated: Migrated, db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    await db.migrate(now=NOW)
    extra = migrated.with_extra_migration(
        monkeypatch, "CREATE TABLE later (id integer PRIMARY KEY);")

    with pytest.raises(SchemaOutOfDate) as raised:
        await db.check_schema()

    assert raised.value.pending == (extra,)
    assert raised.value.new is False
    assert f"schema is out of date, pending migrations {extra:04d};" in str(raised.value)
    assert await db.migrate(now=NOW) == [extra]
    await db.check_schema()


async def test_a_failing_migration_rolls_back_whole_and_is_not_recorded(
        migrated: Migrated, db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    await db.migrate(now=NOW)
    migrated.with_extra_migration(monkeypatch, "CREATE TABLE half (id integer);\n"
                                               "INSERT INTO nowhere VALUES (1);")

    with pytest.raises(StoreError, match="nowhere"):
        await db.migrate(now=NOW)

    assert "half" not in await migrated.tables(db)
    assert await db.applied_migrations() == migrated.known


async def test_tokens_made_before_expiries_existed_never_expire(
        migrated: Migrated, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = queries.migrations(migrated.dialect)
    [expiry] = [m.version for m in shipped if m.title == "token_expiry"]
    before = tuple(m for m in shipped if m.version < expiry)
    monkeypatch.setattr(queries, "migrations", lambda dialect: before)
    old = migrated.open()
    try:
        await old.migrate(now=NOW)
        insert = ("INSERT INTO api_tokens (id, name, scopes, secret_hash, created_at) "
                  f"VALUES ('0123456789ab', 'old', 'viewer', '{'ab' * 32}', {NOW})")
        # Both databases' write() run fn in a transaction (PostgreSQL's awaits its result).
        await old.write(lambda conn: conn.execute(insert))
    finally:
        await old.close()
    monkeypatch.setattr(queries, "migrations", lambda dialect: shipped)

    new = migrated.open()
    try:
        assert await new.migrate(now=NOW) == [m.version for m in shipped
                                              if m.version >= expiry]
        rows = await migrated.rows(new, "SELECT id, revoked_at, expires_at FROM api_tokens")
    finally:
        await new.close()

    assert rows == [("0123456789ab", None, None)]


async def test_an_owning_process_creates_a_new_database_but_refuses_an_older_one(
        migrated: Migrated, monkeypatch: pytest.MonkeyPatch) -> None:
    from tidings.config.settings import Settings
    from tidings.runtime import build_runtime

    settings = Settings.parse({"store": migrated.url})
    with pytest.raises(SchemaOutOfDate) as checked:
        await build_runtime(settings, migrate=False)
    assert checked.value.new is True

    async with await build_runtime(settings, migrate="new") as runtime:
        assert await runtime.store.schema_version() == migrated.known[-1]

    extra = migrated.with_extra_migration(monkeypatch, "CREATE TABLE later (id integer);")
    with pytest.raises(SchemaOutOfDate) as refused:
        await build_runtime(settings, migrate="new")
    assert refused.value.pending == (extra,) and refused.value.new is False


async def test_events_written_before_retention_are_kept_in_order_and_prunable(
        migrated: Migrated, monkeypatch: pytest.MonkeyPatch) -> None:
    from tidings.recovery.retention import DAY_S, RetentionConfig, prune
    from tidings.stores.postgres import PostgresStore
    from tidings.stores.sqlite import SqliteStore

    shipped = queries.migrations(migrated.dialect)
    [retention] = [m.version for m in shipped if m.title == "retention"]
    monkeypatch.setattr(queries, "migrations",
                        lambda dialect: tuple(m for m in shipped if m.version < retention))
    day = 1_799_971_200.0  # 2027-01-15 00:00 UTC
    old = migrated.open()
    try:
        await old.migrate(now=day)
        for i, key in enumerate(["a", "b", "a"]):
            insert = ("INSERT INTO events (key, channel, type, at, state) VALUES "
                      f"('{key}', 'email', 'selected', {day + 3600 + i}, 'selected')")
            await old.write(lambda conn, sql=insert: conn.execute(sql))
    finally:
        await old.close()
    monkeypatch.setattr(queries, "migrations", lambda dialect: shipped)

    store_class = SqliteStore if migrated.dialect == "sqlite" else PostgresStore
    store: Any = await store_class.open(migrated.url)
    try:
        assert await store.migrate(now=day) == [m.version for m in shipped
                                                if m.version >= retention]
        await store.event_append_many([Event(key="a", channel="email", type="claimed",
                                             at=day + 7200)])
        # the old rows are there, in the order written, and new ones follow them
        assert [(e.type, e.at) for e in await store.events_for("a")] == [
            ("selected", day + 3600), ("selected", day + 3602), ("claimed", day + 7200)]
        ids = await migrated.rows(store.db, "SELECT id FROM events WHERE key = 'a' ORDER BY id")
        assert len({i for (i,) in ids}) == 3 and ids[-1][0] > 3
        if migrated.dialect == "postgresql":
            # the old table is the partition of everything before the next UTC day
            parts = await store.event_partitions()
            assert [p.name for p in parts] == ["events_before_20270116"]
            # and, once older than the bound with no intent left, it is dropped whole
            report = await prune(store, RetentionConfig(intents_s=10 * DAY_S),
                                 now=day + 20 * DAY_S)
            assert report.pruned.partitions == 1
            assert await store.events_for("a") == []
    finally:
        await store.close()


async def _execute(migrated: Migrated, db: Any, statement: str) -> None:
    if migrated.dialect == "sqlite":
        await db.write(lambda conn: conn.execute(statement))
        return

    async def fn(conn: Any) -> None:
        await conn.execute(statement)

    await db.write(fn)


@pytest.mark.parametrize("new_only", [False, True])
@pytest.mark.parametrize(("theirs", "named"), [
    (["CREATE TABLE events (id integer, body text)", "CREATE TABLE customers (id integer)"],
     "events"),
    (["CREATE TABLE workers (name text)"], "workers"),
    # Another tool's migrations table (Rails, golang-migrate: one version column).
    (["CREATE TABLE schema_migrations (version varchar(32) PRIMARY KEY)"],
     "schema_migrations"),
])
async def test_a_database_with_another_applications_tables_is_refused_untouched(
        migrated: Migrated, db: Any, theirs: list[str], named: str, new_only: bool) -> None:
    for statement in theirs:
        await _execute(migrated, db, statement)
    before = await migrated.tables(db)

    with pytest.raises(StoreError, match="not tidings'") as caught:
        await db.migrate(now=NOW, new_only=new_only)

    assert named in str(caught.value) and "customers" not in str(caught.value)
    assert await migrated.tables(db) == before  # nothing of tidings' was created


async def test_tables_of_other_names_beside_tidings_are_no_obstacle(
        migrated: Migrated, db: Any) -> None:
    await _execute(migrated, db, "CREATE TABLE customers (id integer)")
    assert await db.migrate(now=NOW) == migrated.known
    assert await db.migrate(now=NOW) == []  # its own tables now, recorded: migrated again
    assert "customers" in await migrated.tables(db)
