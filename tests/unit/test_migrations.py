"""SQLite migrations and the named-query loader."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidings.errors import SchemaOutOfDate, StoreError
from tidings.stores import queries
from tidings.stores.sqlite_db import SqliteDatabase

NOW = 1_000_000.0
KNOWN = [m.version for m in queries.migrations("sqlite")]


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SqliteDatabase]:
    database = SqliteDatabase.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    yield database
    await database.close()


def with_extra_migration(monkeypatch: pytest.MonkeyPatch, sql: str) -> int:
    """Make the code know one migration more than the package ships; returns its version."""
    shipped = queries.migrations("sqlite")
    extra = queries.Migration(version=shipped[-1].version + 1, title="extra", sql=sql)
    monkeypatch.setattr(queries, "migrations", lambda dialect: (*shipped, extra))
    return extra.version


async def tables(db: SqliteDatabase) -> set[str]:
    rows = await db.read(
        lambda conn: conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    )
    return {name for (name,) in rows}


async def test_migrate_from_zero_applies_every_migration_in_order(db: SqliteDatabase) -> None:
    assert await db.schema_version() == 0

    applied = await db.migrate(now=NOW)

    assert applied == KNOWN == sorted(KNOWN)
    assert await db.schema_version() == KNOWN[-1]
    assert {"intents", "events", "occurrences", "switches", "pacer_state", "messages",
            "dead_letters", "schema_migrations"} <= await tables(db)
    recorded = await db.read(lambda conn: conn.execute(
        "SELECT version, applied_at FROM schema_migrations").fetchall())
    assert recorded == [(v, NOW) for v in KNOWN]
    await db.check_schema()


async def test_migrating_again_applies_nothing(db: SqliteDatabase) -> None:
    await db.migrate(now=NOW)

    assert await db.migrate(now=NOW + 1) == []
    assert await db.applied_migrations() == KNOWN


async def test_two_processes_migrating_at_once_apply_each_version_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'race.db'}"
    first, second = SqliteDatabase.from_url(url), SqliteDatabase.from_url(url)
    try:
        a, b = await asyncio.gather(first.migrate(now=NOW), second.migrate(now=NOW))
    finally:
        await first.close()
        await second.close()

    assert sorted(a + b) == KNOWN


async def test_check_schema_names_every_pending_version_of_an_empty_database(
    db: SqliteDatabase,
) -> None:
    with pytest.raises(SchemaOutOfDate, match="0001"):
        await db.check_schema()


async def test_check_schema_names_only_the_versions_not_yet_applied(
    db: SqliteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    await db.migrate(now=NOW)
    extra = with_extra_migration(monkeypatch, "CREATE TABLE later (id INTEGER PRIMARY KEY);")

    with pytest.raises(SchemaOutOfDate) as raised:
        await db.check_schema()

    assert f"{extra:04d}" in str(raised.value)
    assert f"{KNOWN[0]:04d}" not in str(raised.value)
    assert await db.migrate(now=NOW) == [extra]
    await db.check_schema()


async def test_a_failing_migration_rolls_back_whole_and_is_not_recorded(
    db: SqliteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    await db.migrate(now=NOW)
    with_extra_migration(monkeypatch, "CREATE TABLE half (id INTEGER);\n"
                                      "INSERT INTO nowhere VALUES (1);")

    with pytest.raises(StoreError, match="nowhere"):
        await db.migrate(now=NOW)

    assert "half" not in await tables(db)
    assert await db.applied_migrations() == KNOWN


async def test_every_named_query_prepares_against_the_migrated_schema(
    db: SqliteDatabase,
) -> None:
    await db.migrate(now=NOW)
    sql = queries.load("sqlite")
    skip = {"connect", "begin_write", "begin_read", "commit", "rollback"}
    row_width = {"intent_insert_many": 10, "intent_insert_many_enqueued": 10,
                 "message_insert_many": 3}  # {rows} placeholders

    def explain_all(conn: sqlite3.Connection) -> list[str]:
        prepared = []
        for name, text in sql.items():
            if name in skip:
                continue
            if "{rows}" in text:
                text = text.replace("{rows}", "(" + ",".join("?" * row_width[name]) + ")")
            code = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("--"))
            names = set(re.findall(r"(?<!:):(\w+)", code))
            params: dict[str, None] | list[None] = (
                dict.fromkeys(names) if names else [None] * code.count("?"))
            conn.execute(f"EXPLAIN {text}", params)
            prepared.append(name)
        return prepared

    # Any typo in a query, or a column the schema lacks, raises here.
    prepared = await db.read(explain_all)
    assert {"intent_claim_read", "intent_apply", "message_receive"} <= set(prepared)


def test_named_blocks_are_split_and_duplicates_refused() -> None:
    text = "-- header\n-- name: one\nSELECT 1\n\n-- name: two\n-- why\nSELECT 2;\n"

    assert queries.parse(text) == {"one": "SELECT 1", "two": "-- why\nSELECT 2;"}
    with pytest.raises(ValueError, match="twice"):
        queries.parse("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n")


def test_statements_split_on_sqlite_boundaries_only() -> None:
    script = ("-- comment; not a statement\nCREATE TABLE t (x TEXT DEFAULT ';');\n"
              "CREATE TRIGGER tr AFTER INSERT ON t BEGIN\n  SELECT 1;\n  SELECT 2;\nEND;\n"
              "-- trailing comment\n")

    statements = queries.split_statements(script)

    assert len(statements) == 2
    assert statements[1].endswith("END;")
    with pytest.raises(ValueError, match="incomplete"):
        queries.split_statements("CREATE TABLE t (x)")
