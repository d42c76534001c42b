"""A real PostgreSQL server restarted in the middle of a prune and of a migration (a
server of the test's own: ``tests/support/private_pg.py``; the run's shared server is
never restarted).

``test_pg_prune_interrupted.py`` cuts the prune's sessions one by one, as a client
sees a restart; here the server itself goes down as a crash takes it down (``pg_ctl
stop -m immediate``: every session cut, nothing flushed, the next start recovering from
its WAL) and comes back a moment later, again and again while the prune runs. The
store retries each cut transaction on a new connection once the server answers again,
so the prune finishes; a second prune finds nothing more to do; and the database,
read on a connection of the test's own, holds exactly what it should, with no
partition left detached and no index left half-built. A migration whose server goes
down while its transaction runs is applied whole, once, by the same call or the next,
and leaves the reviewed schema.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from support.long_form import scale
from support.pg_schema import MIGRATED_AT, schema_as_it_is
from support.private_pg import PrivateServer, private_server
from support.prune_ledger import D0, Faults, assert_pruned_exactly, seed
from tidings.core.errors import StoreError
from tidings.recovery.retention import DAY_S, RetentionConfig, prune
from tidings.stores import queries
from tidings.stores.postgres import PostgresStore
from tidings.stores.postgres_db import PostgresDatabase

pytestmark = pytest.mark.slow

DAYS = scale(6, 14)
FINISHED_A_DAY = scale(60, 600)
SNAPSHOT = Path(__file__).parents[1] / "unit" / "schema" / "postgresql.txt"
#: Small batches: many transactions, so the restarts land inside the prune's steps.
# (The long form's ledger is ten times larger: batches of 70 keep one pass within
# max_batches, as 7 do for the short form's.)
CONFIG = RetentionConfig(intents_s=7 * DAY_S, occurrences_s=7 * DAY_S,
                         batch_size=scale(7, 70), max_batches=1000)
MIN_RESTARTS = scale(3, 15)
MAX_PRUNES = scale(10, 40)  # a bound on the loop, not a figure judged


@pytest.fixture
def server() -> Iterator[PrivateServer]:
    with private_server() as running:
        yield running


def new_database(server: PrivateServer, name: str) -> str:
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}".encode())
    return server.url(name)


async def test_a_prune_across_server_restarts_removes_exactly_what_it_should(
        server: PrivateServer) -> None:
    url = new_database(server, "ledger")
    store = PostgresStore(PostgresDatabase.from_url(url))
    await store.migrate(now=D0 - DAY_S)
    try:
        finished, kept, audit = await seed(store, CONFIG, days=DAYS,
                                           finished_a_day=FINISHED_A_DAY)

        # when a prune past every day's bound runs while the server goes down and comes
        # back every few tenths of a second (the prune is tried again if a restart
        # outlasts the store's patience: the next prune finishes the work)
        async def restart() -> int:
            await asyncio.to_thread(server.restart)
            return 1

        tries = 0
        async with Faults(restart, every_s=(0.05, 0.25), seed=11) as restarts:
            while True:
                tries += 1
                try:
                    await prune(store, CONFIG, now=D0 + (DAYS + 10) * DAY_S)
                except StoreError:
                    assert tries < MAX_PRUNES // 2, f"{tries} prunes gave up on the server"
                    continue
                if restarts.count >= MIN_RESTARTS:
                    break  # the server really went down under the prune, again and again
                assert tries < MAX_PRUNES, f"{restarts.count} restarts landed in {tries} prunes"
                # the prune was done before enough restarts landed: another ledger of as
                # many days, pruned under the restarts (the witness reads all of them)
                more = await seed(store, CONFIG, days=DAYS, finished_a_day=FINISHED_A_DAY,
                                  prefix=f"again-{tries}-")
                finished, kept, audit = finished + more[0], kept + more[1], audit + more[2]
        again = await prune(store, CONFIG, now=D0 + (DAYS + 10) * DAY_S)
    finally:
        await store.close()

    # then a second prune has nothing to do
    assert again.pruned.intents == 0 and again.pruned.events == 0
    # and the database holds exactly what it should (read on a connection of our own)
    await assert_pruned_exactly(url, finished, sorted(kept), audit)


@pytest.mark.parametrize("at", ["first", "middle", "last"])
async def test_a_migration_whose_server_goes_down_is_applied_whole_once(
        server: PrivateServer, monkeypatch: pytest.MonkeyPatch, at: str) -> None:
    # given the migrations, one of which (the first, one in the middle, or the last)
    # ends by waiting, with every statement of its script run and nothing committed
    shipped = queries.migrations("postgresql")
    index = {"first": 0, "middle": len(shipped) // 2, "last": len(shipped) - 1}[at]
    slow = shipped[index]
    marker = f"tidings-restart-{slow.version}"
    waiting = dataclasses.replace(
        # (the marker first: the server shows only a script's first kilobyte)
        slow, sql=f"-- {marker}\n{slow.sql.rstrip()}\n;\nSELECT pg_sleep(0.5);\n")
    monkeypatch.setattr(queries, "migrations", lambda dialect: tuple(
        waiting if m.version == slow.version else m for m in shipped))
    url = new_database(server, "fresh")

    # when the server goes down (as a crash takes it down) while that one waits
    db = PostgresDatabase.from_url(url)
    migrating = asyncio.create_task(db.migrate(now=MIGRATED_AT))
    try:
        for _ in range(200):
            with psycopg.connect(server.url(), autocommit=True) as conn:
                row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE %s "
                                   "AND wait_event = 'PgSleep'", (f"%{marker}%",)).fetchone()
            if row and row[0]:
                break
            if migrating.done():
                raise AssertionError(f"the migration ended before the restart: "
                                     f"{migrating.result()}")
            await asyncio.sleep(0.02)
        else:
            raise AssertionError(f"migration {slow.version} never started")
        await asyncio.to_thread(server.restart)
        try:
            first = await migrating
        except StoreError:
            first = []  # it gave up: the next run applies what is left
        second = await db.migrate(now=MIGRATED_AT)
    finally:
        await db.close()

    # then every version was applied once, by the one call or the next, and the schema
    # (read as it stands, nothing migrated again before the look) is the reviewed one
    assert sorted(first + second) == [m.version for m in shipped]
    with psycopg.connect(url) as conn:
        versions = [v for (v,) in conn.execute(
            "SELECT version FROM schema_migrations ORDER BY version").fetchall()]
        invalid = conn.execute("SELECT indexrelid::regclass::text FROM pg_index "
                               "WHERE NOT (indisvalid AND indisready)").fetchall()
    assert versions == [m.version for m in shipped]
    assert invalid == []
    assert await schema_as_it_is(url) == SNAPSHOT.read_text()
