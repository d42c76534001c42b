"""A prune, and the migrations, whose connections are cut again and again at every step,
as a server restart or a failover cuts them (needs a server: see tests/conftest.py;
skips without one, fails under CI).

A prune of PostgreSQL is many transactions: batches of intents with their events,
partitions created ahead, a day partition detached in one transaction and dropped in
the next (after its events of no intent are copied out), another swept row by row. A
killer terminates the prune's backends every few tens of milliseconds while it runs;
each cut transaction rolls back whole and is retried on a new connection. The witness
is the database itself, read on a connection of its own: every finished intent and its
events gone, every kept intent and its events there, each audit event exactly once, no
partition left detached, and a second prune that finds nothing more to do. A migration
cut after its statements ran, before its commit, is applied whole on the retry, once,
and the schema is the reviewed one. A digest step cut the same way runs again from its
first statement (a half-run step was once resumed on the new connection, or found
spent: the prune above met it as a TypeError).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import psycopg
import pytest

from support import pg_backends
from support.long_form import scale
from support.pg_schema import MIGRATED_AT, schema_as_it_is
from support.prune_ledger import D0, Faults, assert_pruned_exactly, seed
from tidings.recovery.retention import DAY_S, RetentionConfig, prune
from tidings.stores import postgres_digests, queries
from tidings.stores.base import DigestItemDraft
from tidings.stores.postgres import PostgresStore
from tidings.stores.postgres_db import PostgresDatabase

DAYS = scale(4, 12)
FINISHED_A_DAY = scale(40, 400)
APP = "tidings-prune-interrupted"
SNAPSHOT = Path(__file__).parents[1] / "unit" / "schema" / "postgresql.txt"
#: Small batches: many transactions, so the cuts land in every step of the prune.
# (The long form's ledger is ten times larger: batches of 70 keep one pass within
# max_batches, as 7 do for the short form's.)
CONFIG = RetentionConfig(intents_s=7 * DAY_S, occurrences_s=7 * DAY_S,
                         batch_size=scale(7, 70), max_batches=1000)


def named(url: str) -> str:
    return pg_backends.named(url, APP)


async def terminate_ours(admin_url: str, url: str) -> int:
    return await pg_backends.terminate(admin_url, url, APP)


async def test_a_prune_cut_at_every_step_removes_exactly_what_it_should(
        pg_url: str, pg_admin_url: str) -> None:
    store = PostgresStore(PostgresDatabase.from_url(named(pg_url)))
    await store.migrate(now=D0 - DAY_S)
    try:
        finished, kept, audit = await seed(store, CONFIG, days=DAYS,
                                           finished_a_day=FINISHED_A_DAY)

        # when a prune past every day's bound runs while its connections are cut
        async with Faults(lambda: terminate_ours(pg_admin_url, pg_url), every_s=(0.01, 0.06),
                          seed=7) as cuts:
            report = await prune(store, CONFIG, now=D0 + (DAYS + 10) * DAY_S)
        kills = cuts.count
        again = await prune(store, CONFIG, now=D0 + (DAYS + 10) * DAY_S)
    finally:
        await store.close()

    # then (read on a connection of our own)
    assert kills >= 3, f"the killer cut only {kills} connections"
    assert report.pruned.intents == len(finished)
    assert again.pruned.intents == 0 and again.pruned.events == 0
    await assert_pruned_exactly(pg_url, finished, kept, audit)


async def test_every_migration_cut_before_its_commit_is_applied_whole_once(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # given every migration's script followed by a statement that, the first time only
    # (a sequence's nextval is not rolled back), ends its own backend: each migration's
    # transaction is cut after all its statements ran, before it is recorded and committed
    shipped = queries.migrations("postgresql")
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        for m in shipped:
            await conn.execute(f"CREATE SEQUENCE cut_{m.version:04d}")
    cut = [dataclasses.replace(m, sql=(
        f"{m.sql.rstrip()}\n;\nSELECT CASE WHEN nextval('cut_{m.version:04d}') = 1 "
        "THEN pg_terminate_backend(pg_backend_pid()) END;\n")) for m in shipped]
    monkeypatch.setattr(queries, "migrations", lambda dialect: tuple(cut))

    # when the database is migrated from zero
    db = PostgresDatabase.from_url(named(pg_url))
    try:
        applied = await db.migrate(now=MIGRATED_AT)
    finally:
        await db.close()

    # then each version was cut once, retried, and applied once; and the schema, read as
    # it stands (nothing migrated again before the look), is the reviewed one
    assert applied == [m.version for m in shipped]
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        tries = [(await (await conn.execute(f"SELECT last_value FROM cut_{m.version:04d}"))
                  .fetchone()) for m in shipped]
        versions = [v for (v,) in await (await conn.execute(
            "SELECT version FROM schema_migrations ORDER BY version")).fetchall()]
    assert tries == [(2,)] * len(shipped)
    assert versions == [m.version for m in shipped]
    assert await schema_as_it_is(pg_url) == SNAPSHOT.read_text()


async def test_a_digest_step_cut_before_its_commit_runs_again_from_its_start(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # given a digest add whose first attempt runs every statement of its step and then
    # loses its connection before the commit (as a restart cuts it), on a store whose
    # transactions are retried whole
    store = PostgresStore(PostgresDatabase.from_url(pg_url))
    await store.migrate(now=D0)
    drive = postgres_digests._drive
    attempts = 0

    async def cut_once(conn: Any, sql: Any, body: Any, admit: Any) -> Any:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            name, params = next(body)
            while True:
                cur = await conn.execute(sql[name], params)
                rows = await cur.fetchall() if cur.description is not None else []
                try:
                    name, params = body.send(rows)
                except StopIteration:
                    break
            await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return await drive(conn, sql, body, admit)

    monkeypatch.setattr(postgres_digests, "_drive", cut_once)
    draft = DigestItemDraft(digest_key="comments:r1", item_key="c1", data='{"n": 1}',
                            request='{"recipient_id": "r1", "channels": ["email"]}',
                            window_s=60.0, wait_s=60.0, sliding=False, max_items=100)
    try:
        # when it is run (the transaction retried on a new connection)
        added = await store.digest_add(draft, now=D0 + 5)
        items = await store.digest_items(added.window_id)
    finally:
        await store.close()

    # then the retry ran the whole step afresh: one window, the item in it once
    assert attempts == 2
    assert added.created and added.items == 1
    assert [i.item_key for i in items] == ["c1"]
