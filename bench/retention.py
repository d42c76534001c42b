"""Retention on PostgreSQL: dropping a week of day partitions against deleting its rows.

A ledger of ``--n`` accepted intents (4 events each: selected, enqueued, claimed,
accepted) spread evenly over ``--weeks`` weeks is written server-side
(``generate_series``) into day partitions, then copied (``CREATE DATABASE … TEMPLATE``)
so both ways start from the same bytes. The first week is older than the bound:

- **partitions** (what tidings does): the prune's batches delete the week's intents
  row-wise (intents are one table: their key must stay unique) leaving their events to
  the partitions (only the default partition's are deleted by key), then the seven day
  partitions are detached and dropped;
- **rows** (the alternative, what SQLite does): the same batches, each deleting its
  intents' events by key.

Reported: the seconds of the event statements of each (the seven partition drops vs
the row deletes) and their ratio (rows / partitions), and each whole prune, measured in
the same run on the same machine. Nothing here asserts a time.

    .venv/bin/python bench/retention.py --store postgresql://postgres@127.0.0.1:5432/bench_retention
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pglib
from tidings.core.retention import EVENT_SKEW_S, PRUNABLE_STATES, day_partition
from tidings.recovery.retention import (
    DAY_S,
    INTENT_EVENT_TYPES,
    PruneCounts,
    RetentionConfig,
    plan_partitions,
    plan_prune,
)

#: A UTC midnight (2027-01-04, a Monday): the ledger's first day.
START = 1_798_934_400.0
KEEP_S = 30 * DAY_S
BATCH = 5000

LEDGER = """
INSERT INTO intents (key, channel, recipient_id, address, template, data, campaign,
                     occurrence, state, due_at, created_at, updated_at, selected_at,
                     enqueued_at, accepted_at, finished_at, attempts, receipt)
SELECT 'digest/' || g || '/email/v1', 'email', 'cust_' || g, 'c' || g || '@example.com',
       'digest@v1', '{}', 'digest', 'digest/x', 'accepted', t, t, t + 60, t, t + 1, t + 60,
       t + 60, 1, 'rcpt-' || g
FROM (SELECT g, %(start)s + (g - 1) * %(step)s AS t FROM generate_series(1, %(n)s) g) s
"""
EVENTS = """
INSERT INTO events (key, channel, type, at, state, attempt)
SELECT 'digest/' || g || '/email/v1', 'email', e.type, %(start)s + (g - 1) * %(step)s + e.dt,
       e.type, e.attempt
FROM generate_series(1, %(n)s) g
CROSS JOIN (VALUES ('selected', 0.0, 0), ('enqueued', 1.0, 0), ('claimed', 2.0, 1),
                   ('accepted', 60.0, 1)) AS e(type, dt, attempt)
"""


def build(url: str, n: int, weeks: int) -> None:
    """The schema, the day partitions, the ledger, and fresh statistics."""
    pglib.migrate(url)
    psycopg = pglib._psycopg()
    with psycopg.connect(url, autocommit=True) as conn:
        for day in range(weeks * 7 + 1):
            p = day_partition(START + day * DAY_S)
            conn.execute(f"CREATE TABLE {p.name} PARTITION OF events "
                         f"FOR VALUES FROM ({p.lower}) TO ({p.upper})")
        params = {"start": START, "step": weeks * 7 * DAY_S / n, "n": n}
        conn.execute(LEDGER, params)
        conn.execute(EVENTS, params)
        conn.execute("VACUUM ANALYZE intents")
        conn.execute("VACUUM ANALYZE events")


def copy_of(url: str, suffix: str) -> str:
    """A copy of ``url``'s database, made from it as a template (same bytes)."""
    name = f"{pglib._dbname(url)}_{suffix}"
    from psycopg import sql as pgsql

    with pglib._admin(url) as admin:
        admin.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            pgsql.Identifier(name)))
        admin.execute(pgsql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            pgsql.Identifier(name), pgsql.Identifier(pglib._dbname(url))))
    return pglib._with_db(url, name)


async def by_partitions(url: str, now: float) -> dict[str, Any]:
    """tidings' prune, its two halves timed apart."""
    from tidings.stores.postgres import PostgresStore

    store = await PostgresStore.open(url)
    try:
        plan = plan_prune(RetentionConfig(intents_s=KEEP_S, occurrences_s=KEEP_S,
                                          batch_size=BATCH), now=now)
        partitions = await store.event_partitions()
        started = time.perf_counter()
        total = PruneCounts()
        while True:
            batch = await store.retention_prune_batch(
                intent_cutoff=plan.intent_cutoff, occurrence_cutoff=plan.occurrence_cutoff,
                limit=BATCH)
            total += batch
            if batch.intents < BATCH:
                break
        batches_s = time.perf_counter() - started
        span = await store.intent_age_span()
        drops = plan_partitions(partitions, now=now, cutoff=plan.intent_cutoff,
                                oldest_intent_at=None if span is None else span[0]).drop
        started = time.perf_counter()
        events = 0
        for partition in drops:
            events += await store.event_partition_drop(
                partition.name, intent_types=sorted(INTENT_EVENT_TYPES)) or 0
        drop_s = time.perf_counter() - started
    finally:
        await store.close()
    return {"intents": total.intents, "events": events + total.events,
            "partitions": len(drops), "intent_batches_s": round(batches_s, 3),
            "event_statements_s": round(drop_s, 3), "total_s": round(batches_s + drop_s, 3)}


async def by_rows(url: str, now: float) -> dict[str, Any]:
    """The same batches deleting each one's events by key, timed apart."""
    psycopg = pglib._psycopg()
    cutoff = now - KEEP_S
    intents = events = 0
    events_s = intents_s = 0.0
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while True:
            async with conn.transaction():
                started = time.perf_counter()
                cur = await conn.execute(
                    "WITH doomed AS (SELECT key FROM intents WHERE created_at < %(c)s "
                    "AND state = ANY(%(s)s) AND finished_at < %(c)s AND updated_at < %(c)s "
                    "ORDER BY created_at LIMIT %(l)s FOR UPDATE SKIP LOCKED) "
                    "DELETE FROM intents i USING doomed d WHERE i.key = d.key RETURNING i.key",
                    {"c": cutoff, "s": list(PRUNABLE_STATES), "l": BATCH})
                keys = [key for (key,) in await cur.fetchall()]
                middle = time.perf_counter()
                if keys:
                    cur = await conn.execute("DELETE FROM events WHERE key = ANY(%s)", (keys,))
                    events += cur.rowcount
                intents_s += middle - started
                events_s += time.perf_counter() - middle
            intents += len(keys)
            if len(keys) < BATCH:
                break
    return {"intents": intents, "events": events, "intent_batches_s": round(intents_s, 3),
            "event_statements_s": round(events_s, 3), "total_s": round(intents_s + events_s, 3)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default="postgresql://postgres@127.0.0.1:5432/bench_retention",
                        help="a PostgreSQL URL; its database must hold no tidings tables")
    parser.add_argument("--n", type=int, default=1_000_000, help="intents in the ledger")
    parser.add_argument("--weeks", type=int, default=4, help="weeks the ledger spans")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if not pglib.is_pg(args.store):
        raise SystemExit("--store: retention's partitions are PostgreSQL's; give a "
                         "postgresql:// URL")
    url = pglib.fresh_pg(args.store)
    started = time.perf_counter()
    build(url, args.n, args.weeks)
    build_s = time.perf_counter() - started
    partitioned, rows = copy_of(url, "partitions"), copy_of(url, "rows")
    # The first week is older than the bound, and the newest intent of it an hour (the
    # allowed event skew, EVENT_SKEW_S) and its processing older still: its last day
    # partition drops too (the first hour of day 8's intents go row-wise with them).
    now = START + 7 * DAY_S + KEEP_S + EVENT_SKEW_S + 120
    part = asyncio.run(by_partitions(partitioned, now))
    row = asyncio.run(by_rows(rows, now))
    report = {
        "benchmark": "retention", "n": args.n, "weeks": args.weeks,
        "events": 4 * args.n, "build_s": round(build_s, 1),
        "partitions": part, "rows": row,
        "event_ratio": round(row["event_statements_s"] / max(part["event_statements_s"], 1e-6),
                             1),
        "total_ratio": round(row["total_s"] / max(part["total_s"], 1e-6), 2),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"retention: {args.n:,} intents, {4 * args.n:,} events over {args.weeks} weeks; "
          f"a week pruned ({part['intents']:,} intents, {part['events']:,} events)\n"
          f"  partitions: {part['partitions']} dropped in {part['event_statements_s']:.3f} s "
          f"(intents row-wise {part['intent_batches_s']:.2f} s; total {part['total_s']:.2f} s)\n"
          f"  rows:       events deleted in {row['event_statements_s']:.2f} s "
          f"(intents {row['intent_batches_s']:.2f} s; total {row['total_s']:.2f} s)\n"
          f"  events: rows / partitions = {report['event_ratio']}x; "
          f"whole prune {report['total_ratio']}x")


if __name__ == "__main__":
    main()
