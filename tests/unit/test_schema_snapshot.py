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

from support.pg_schema import MIGRATED_AT, postgres_schema
from tidings.stores import queries

SNAPSHOTS = Path(__file__).parent / "schema"


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
