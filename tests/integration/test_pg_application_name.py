"""A store URL's own application_name survives, and a gone worker's backends are still
found by the process's name in front of it."""

from __future__ import annotations

import os
import socket

import psycopg

from tidings.stores import queries
from tidings.stores.postgres_db import PostgresDatabase


async def test_the_urls_application_name_is_kept_and_the_reconciler_still_finds_it(
        pg_url: str, pg_admin_url: str) -> None:
    # given a store whose URL names its application, as a deployment's monitoring wants
    db = PostgresDatabase.from_url(f"{pg_url}&application_name=billing-digest")
    await db.open()
    try:
        ours = f"tidings {socket.gethostname()}:{os.getpid()}"
        async with await psycopg.AsyncConnection.connect(pg_admin_url,
                                                         autocommit=True) as admin:
            # then its sessions carry the process's name, then the deployment's
            rows = await (await admin.execute(
                "SELECT application_name FROM pg_stat_activity WHERE application_name "
                "LIKE 'tidings %%' AND pid <> pg_backend_pid()")).fetchall()
            assert f"{ours} billing-digest" in {name for (name,) in rows}

            # and the query that ends a gone worker's backends matches them (and no
            # other process's: a pid that merely starts with ours is another process)
            disconnect = queries.load("postgresql")["worker_disconnect"]
            other = await (await admin.execute(
                disconnect, {"application_name": f"{ours}0"})).fetchone()
            assert other == (0,)
            ended = await (await admin.execute(
                disconnect, {"application_name": ours})).fetchone()
            assert ended is not None and ended[0] >= 1
    finally:
        await db.close()
