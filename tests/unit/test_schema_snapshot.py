"""The schema that all migrations produce equals the schema written down in
``tests/unit/schema/<dialect>.txt``, on SQLite and on PostgreSQL.

The snapshot is the reviewed picture of the tables; a migration that changes them
changes the snapshot in the same commit, and a shipped migration edited afterwards
(which databases already migrated would never see) fails here. Regenerate after a
deliberate change with ``TIDINGS_WRITE_SCHEMA=1 pytest tests/unit/test_schema_snapshot.py``.
The PostgreSQL case needs a server (see tests/conftest.py; skips without one, fails
under CI).
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

import pytest

from tidings.stores import queries

SNAPSHOTS = Path(__file__).parent / "schema"


MIGRATED_AT = 1_000_000.0


def normalized(sql: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"--[^\n]*", "", sql)).strip()


async def sqlite_schema(tmp_path: Path) -> str:
    from tidings.stores.sqlite_db import SqliteDatabase

    db = SqliteDatabase.from_url(f"sqlite:///{tmp_path / 's.db'}")
    await db.migrate(now=MIGRATED_AT)
    await db.close()
    with sqlite3.connect(tmp_path / "s.db") as conn:
        rows = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
            "AND sql IS NOT NULL ORDER BY type DESC, name").fetchall()
    return "\n".join(f"{kind} {name}: {normalized(sql)}" for kind, name, sql in rows) + "\n"


async def postgres_schema(url: str) -> str:
    import psycopg

    from tidings.stores.postgres_db import PostgresDatabase

    db = PostgresDatabase.from_url(url)
    await db.migrate(now=MIGRATED_AT)
    await db.close()
    lines: list[str] = []
    async with await psycopg.AsyncConnection.connect(url) as conn:
        columns = await conn.execute(
            "SELECT table_name, column_name, data_type, is_nullable, "
            "coalesce(column_default, ''), is_identity FROM information_schema.columns c "
            "WHERE table_schema = current_schema() AND NOT EXISTS (SELECT 1 FROM pg_class r "
            "WHERE r.oid = (quote_ident(c.table_name))::regclass AND r.relispartition) "
            "ORDER BY table_name, ordinal_position")
        for table, column, kind, nullable, default, identity in await columns.fetchall():
            lines.append(f"column {table}.{column}: {kind}"
                         f"{'' if nullable == 'YES' else ' not null'}"
                         f"{' identity' if identity == 'YES' else ''}"
                         f"{f' default {default}' if default else ''}")
        indexes = await conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
            "ORDER BY indexname")
        for name, definition in await indexes.fetchall():
            # The schema name differs per test database: leave it out.
            unqualified = re.sub(r" ON (ONLY )?[a-z0-9_]+[.]", r" ON \1", definition)
            lines.append(f"index {name}: {unqualified}")
        # A partitioned table's key and its partitions (their columns are the table's).
        partitions = await conn.execute(
            "SELECT p.relname, pg_get_partkeydef(p.oid), c.relname, "
            "pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class p ON p.oid = i.inhparent JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE p.relnamespace = current_schema()::regnamespace AND p.relkind = 'p' "
            "ORDER BY 1, 3")
        for table, key, partition, bound in await partitions.fetchall():
            lines.append(f"partition {table}.{partition}: {key} {bound}")
        constraints = await conn.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
            "FROM pg_constraint WHERE connamespace = current_schema()::regnamespace "
            "ORDER BY 1, 2")
        for table, name, definition in await constraints.fetchall():
            lines.append(f"constraint {table.rsplit('.', 1)[-1]}.{name}: {definition}")
    return "\n".join(lines) + "\n"


def compare(dialect: str, actual: str) -> None:
    snapshot = SNAPSHOTS / f"{dialect}.txt"
    if os.environ.get("TIDINGS_WRITE_SCHEMA"):
        snapshot.parent.mkdir(exist_ok=True)
        snapshot.write_text(actual)
    assert snapshot.exists(), f"no snapshot yet: run with TIDINGS_WRITE_SCHEMA=1 ({snapshot})"
    expected = snapshot.read_text()
    assert actual == expected, (
        f"the schema from migrations {[m.version for m in queries.migrations(dialect)]} "
        f"differs from {snapshot.name}; if the change is deliberate, regenerate it "
        "(see this module's docstring)")


async def test_sqlite_schema_equals_all_migrations_applied(tmp_path: Path) -> None:
    compare("sqlite", await sqlite_schema(tmp_path))


async def test_postgres_schema_equals_all_migrations_applied(pg_url: str) -> None:
    compare("postgresql", await postgres_schema(pg_url))


async def test_both_dialects_have_the_same_tables_and_columns(
        tmp_path: Path, pg_url: str) -> None:
    await sqlite_schema(tmp_path)  # migrates s.db
    with sqlite3.connect(tmp_path / "s.db") as conn:
        tables = [name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        sqlite_columns = {(table, row[1]) for table in tables
                          for row in conn.execute(f"PRAGMA table_info({table})")}
    postgres_columns = {
        tuple(line.split(" ", 2)[1].rstrip(":").split(".", 1))
        for line in (await postgres_schema(pg_url)).splitlines() if line.startswith("column ")}
    assert sqlite_columns == postgres_columns


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_migrations_are_numbered_without_gaps(dialect: str) -> None:
    versions = [m.version for m in queries.migrations(dialect)]
    assert versions == list(range(1, len(versions) + 1))
