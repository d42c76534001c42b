"""Cutting a test's own PostgreSQL connections, as a server restart or a failover cuts
them: the test's store names its sessions by an application name of its own, and the
killer ends only those (never another test's, nor another run's)."""

from __future__ import annotations

from urllib.parse import urlsplit

import psycopg


def named(url: str, app: str) -> str:
    """``url`` with an application_name the killer can find its victims by."""
    return f"{url}&application_name={app}"


async def terminate(admin_url: str, url: str, app: str) -> int:
    """End the sessions of ``url``'s database that carry ``app``; how many were ended."""
    database = urlsplit(url).path.lstrip("/")
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            # The URL's name follows the process's own (tidings.core.liveness.application_name).
            "WHERE application_name LIKE %s AND datname = %s AND pid <> pg_backend_pid()",
            (f"tidings % {app}", database))
        row = await cur.fetchone()
        return int(row[0]) if row else 0
