"""PostgreSQL helpers for the benchmarks: fresh databases beside ``--store`` and raw SQL.

With ``--store postgresql://user@host:port/db`` the measured run uses ``db``, which must
hold no tidings tables (one that does not exist is created). The floors run in sibling
databases ``db_<suffix>`` on the same server, dropped and re-created by each run (they
belong to the benchmark; they are left behind for inspection).

psycopg (the ``postgres`` extra) is imported only when a PostgreSQL store is asked for,
so the SQLite benchmarks run on the base install.
"""

from __future__ import annotations

import asyncio
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tidings.core.clock import SystemClock
from tidings.runtime import open_store

if TYPE_CHECKING:
    import psycopg

SCHEMES = ("postgresql://", "postgres://")


def _psycopg() -> ModuleType:
    """psycopg, or a clear exit naming the extra that brings it."""
    try:
        import psycopg
    except ImportError:
        raise SystemExit("a PostgreSQL --store needs the extra: "
                         "pip install -e '.[postgres]'") from None
    return psycopg


def redact(url: str) -> str:
    _psycopg()
    from tidings.stores.postgres_db import redact as redacted

    return redacted(url)


def is_pg(url: str | None) -> bool:
    return url is not None and url.startswith(SCHEMES)


def _dbname(url: str) -> str:
    _psycopg()
    from psycopg.conninfo import conninfo_to_dict

    name = conninfo_to_dict(url).get("dbname")
    if not name:
        raise SystemExit(f"--store: {redact(url)!r} names no database")
    return str(name)


def _admin(url: str) -> psycopg.Connection[Any]:
    pg = _psycopg()
    from psycopg.conninfo import make_conninfo

    try:
        connection: psycopg.Connection[Any] = pg.connect(
            make_conninfo(url, dbname="postgres"), autocommit=True, connect_timeout=5)
        return connection
    except pg.Error as exc:
        raise SystemExit(f"--store: cannot connect to {redact(url)}: {exc}") from None


def _exists(admin: psycopg.Connection[Any], name: str) -> bool:
    return admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() \
        is not None


def fresh_pg(url: str) -> str:
    """``url``, refusing to measure on top of a ledger left by another run."""
    name = _dbname(url)
    from psycopg import sql as pgsql

    with _admin(url) as admin:
        if not _exists(admin, name):
            admin.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name)))
            return url
    with _psycopg().connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass('intents') IS NOT NULL").fetchone()
    if row and row[0]:
        raise SystemExit(f"{redact(url)} already holds tidings tables; the benchmark needs a "
                         "fresh database (drop it or name another --store)")
    return url


def sibling_pg(url: str, suffix: str) -> str:
    """A freshly (re-)created database ``<db>_<suffix>`` on the same server."""
    name = f"{_dbname(url)}_{suffix}".replace("-", "_")
    from psycopg import sql as pgsql

    with _admin(url) as admin:
        admin.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            pgsql.Identifier(name)))
        admin.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name)))
    return _with_db(url, name)


def _with_db(url: str, name: str) -> str:
    base, _, query = url.partition("?")
    head = base.rsplit("/", 1)[0]
    return f"{head}/{name}" + (f"?{query}" if query else "")


def migrate(url: str) -> None:
    """The tidings schema, made by the same migrations the store applies."""
    async def go() -> None:
        store, transport = await open_store(url)
        await store.migrate(now=SystemClock().now())
        await transport.close()
        await store.close()
    asyncio.run(go())


def count_accepted(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM intents WHERE state = 'accepted'").fetchone()
    return int(row[0]) if row else 0


def receipts_mismatched(url: str, receipts: dict[str, str]) -> int:
    wrong = 0
    with _psycopg().connect(url) as conn, conn.cursor(name="receipts") as cur:
        cur.execute("SELECT key, receipt FROM intents")
        for key, receipt in cur:
            wrong += receipts.get(key) != receipt
    return wrong


def write_groups(url: str) -> int:
    """How many transactions wrote the intents: a group commit stamps every intent of
    one transaction with its one ``created_at``."""
    with _psycopg().connect(url) as conn:
        row = conn.execute("SELECT count(DISTINCT created_at) FROM intents").fetchone()
    return int(row[0]) if row else 0
