"""The tables every delivery updates are vacuumed by a count of dead rows, not a share.

With PostgreSQL's default (a fifth of the table), a month-long ledger of intents was
vacuumed only after millions of dead rows while every claim read it (issue: a month of
ledger, bench/RESULTS.md). Migration 0019 sets the two tables' own thresholds; this
reads them back from the server, and the threshold autovacuum itself computes from them.
"""

from __future__ import annotations

import psycopg

from tidings.stores.postgres_db import PostgresDatabase

#: autovacuum's trigger: threshold + scale_factor * reltuples (PostgreSQL's docs,
#: "The Autovacuum Daemon").
TRIGGER = """
SELECT coalesce((SELECT split_part(o, '=', 2)::float8 FROM unnest(c.reloptions) AS o
                 WHERE o LIKE 'autovacuum_vacuum_threshold=%%'),
                current_setting('autovacuum_vacuum_threshold')::float8)
       + coalesce((SELECT split_part(o, '=', 2)::float8 FROM unnest(c.reloptions) AS o
                   WHERE o LIKE 'autovacuum_vacuum_scale_factor=%%'),
                  current_setting('autovacuum_vacuum_scale_factor')::float8)
         * %(rows)s
FROM pg_class AS c WHERE c.oid = %(table)s::regclass
"""


async def test_intents_and_messages_are_vacuumed_after_thousands_of_dead_rows(
        pg_url: str) -> None:
    db = PostgresDatabase.from_url(pg_url)
    await db.migrate(now=1_000_000.0)
    await db.close()
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        options = dict(await (await conn.execute(
            "SELECT relname, reloptions FROM pg_class "
            "WHERE relnamespace = current_schema()::regnamespace "
            "AND relname IN ('intents', 'messages')")).fetchall())
        assert "autovacuum_vacuum_scale_factor=0.01" in options["intents"]
        assert "autovacuum_vacuum_threshold=2000" in options["messages"]

        async def trigger(table: str, rows: int) -> float:
            row = await (await conn.execute(TRIGGER, {"table": table, "rows": rows})).fetchone()
            assert row is not None
            return float(row[0])

        # a ledger of 10 million intents: 110,000 dead rows, not 2 million
        assert await trigger("intents", 10_000_000) == 110_000
        # a queue of any length: 2,000 dead rows
        assert await trigger("messages", 200_000) == 2_000
        # and a table left at the server's default keeps it (a fifth, as before)
        assert await trigger("occurrences", 10_000_000) >= 2_000_000
