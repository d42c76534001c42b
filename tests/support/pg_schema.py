"""PostgreSQL's schema as text: the columns, indexes, partitions and constraints of the
current schema, one line each, in a stable order (``tests/unit/test_schema_snapshot.py``
compares it with the reviewed snapshot; a migration cut off midway is held to it too)."""

from __future__ import annotations

import re

#: The time every snapshot's migrations are recorded at.
MIGRATED_AT = 1_000_000.0


async def postgres_schema(url: str) -> str:
    """The schema of ``url``'s database once every migration is applied."""
    from tidings.stores.postgres_db import PostgresDatabase

    db = PostgresDatabase.from_url(url)
    await db.migrate(now=MIGRATED_AT)
    await db.close()
    return await schema_as_it_is(url)


async def schema_as_it_is(url: str) -> str:
    """The schema of ``url``'s database as it stands, migrating nothing."""
    import psycopg

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
