"""The named-query loader, and every SQLite query against the migrated schema.

Migrating itself is one suite for both databases: tests/conformance/test_store_migrations.py.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidings.stores import queries
from tidings.stores.sqlite_db import SqliteDatabase

NOW = 1_000_000.0


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SqliteDatabase]:
    database = SqliteDatabase.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    yield database
    await database.close()


async def test_every_named_query_prepares_against_the_migrated_schema(
    db: SqliteDatabase,
) -> None:
    await db.migrate(now=NOW)
    sql = queries.load("sqlite")
    skip = {"connect", "begin_write", "begin_read", "commit", "rollback"}
    row_width = {"intent_admit_values": 12, "intent_admit_values_enqueued": 12,
                 "intent_admit_page": 4, "intent_admit_page_enqueued": 4,
                 "message_insert_many": 5, "message_publish_many": 5}  # {rows} placeholders

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
