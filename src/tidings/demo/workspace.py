"""Where the demo's work goes, and its removal at the end: a PostgreSQL database made
ready (an empty ledger), a broker prefix of the demo's own, and the work folder."""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path

from tidings.runtime import Runtime
from tidings.transports.open import is_store_queue, split_prefix


def clean_up(workdir: Path, *, keep: bool) -> list[str]:
    """Remove the demo's own temporary work folder unless ``keep``; returns the names of
    what was kept (nothing once removed)."""
    if not keep:
        shutil.rmtree(workdir, ignore_errors=True)
        return []
    return sorted(p.name for p in workdir.iterdir())


#: Every table the PostgreSQL migrations create: what ``--reset`` drops.
PG_TABLES = ("intents", "events", "messages", "dead_letters", "occurrences", "pacer_state",
             "switches", "schema_migrations")


class DemoStoreError(Exception):
    """The demo's ``--store`` cannot be used as it is (the message says why and what to do)."""


def prepare_postgres(url: str, *, reset: bool) -> str:
    """Make the PostgreSQL database ``url`` names ready for a demo: an empty ledger.

    A database that does not exist is created (through the server's ``postgres``
    database). One that already holds an ``intents`` table is refused, unless ``reset``:
    then the tidings tables are dropped, and the demo's runtime migrates a fresh schema.
    Returns a description of what was done.
    """
    import psycopg
    from psycopg import sql as pgsql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from tidings.stores.postgres_db import PostgresDatabase, redact

    PostgresDatabase.from_url(url)  # ConfigurationError for a malformed URL
    safe = redact(url)
    params = conninfo_to_dict(url)
    dbname = str(params.get("dbname") or params.get("user") or "")
    if not dbname:
        raise DemoStoreError(f"{safe} names no database")
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        if f'database "{dbname}" does not exist' not in str(exc):
            raise DemoStoreError(f"cannot connect to {safe}: {str(exc).strip()}") from None
        try:
            with psycopg.connect(make_conninfo(url, dbname="postgres"), autocommit=True,
                                 connect_timeout=5) as admin:
                admin.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(dbname)))
        except psycopg.Error as exc2:
            raise DemoStoreError(f"database {dbname!r} does not exist and could not be "
                                 f"created: {str(exc2).strip()}") from None
        return f"created database {dbname!r}"
    with conn:
        row = conn.execute("SELECT to_regclass('intents') IS NOT NULL").fetchone()
        if not (row and row[0]):
            return f"database {dbname!r} has no tidings tables: used as it is"
        if not reset:
            raise DemoStoreError(
                f"{safe} already holds tidings tables (an 'intents' table); the demo needs "
                "an empty ledger. Name another database (one that does not exist is "
                "created), or pass --reset to drop the tidings tables and start afresh.")
        conn.execute(pgsql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(
            pgsql.SQL(", ").join(pgsql.Identifier(t) for t in PG_TABLES)))
    return f"dropped the tidings tables of database {dbname!r} (--reset)"


def demo_transport(transport: str) -> str:
    """The demo's transport URL: on a broker, under a prefix of its own (a given prefix
    gets a suffix of the demo's), since the demo removes everything under it at the end:
    the keys or queues of a prefix in use are never touched. The suffix is random, not
    seeded, so two demos with one seed on one broker stay apart."""
    if is_store_queue(transport):
        return transport
    plain, prefix = split_prefix(transport)
    mark = "&" if "?" in plain else "?"
    return f"{plain}{mark}prefix={prefix}-demo-{secrets.token_hex(5)}"


async def drop_transport(runtime: Runtime) -> int:
    """Remove what a broker transport holds of the demo's (its keys or queues)."""
    drop = getattr(runtime.transport, "drop_all", None)
    if drop is None or is_store_queue(runtime.settings.transport):
        return 0
    dropped: int = await drop()
    return dropped
