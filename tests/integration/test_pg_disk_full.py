"""A full disk under PostgreSQL: admission stops with an error that names it, nothing is
half-written, a worker waits, and everything resumes when space returns.

The test's tables live in a tablespace of its own, on a filesystem of its own (an 8 MiB
tmpfs owned by the server's user, mounted for the test and grown afterwards with
``mount -o remount``), so the server meets a full disk for real: extending a table
fails with "No space left on device" inside a transaction, which is rolled back whole.
The server's write-ahead log stays on its own disk, so the server itself keeps running.
Judged by the database, read on a connection of its own (every intent has its queue
message), and by the sandbox's own counts (every key accepted once). Needs root to
mount and a local server whose files this machine holds (skips with the reason
elsewhere; fails under CI, which runs as root beside its server).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from support.disk_full import worker_waits_then_resumes
from support.long_form import scale
from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.clock import SystemClock
from tidings.core.errors import StoreError
from tidings.providers.sandbox import SandboxTwinProvider
from tidings.runtime import build_runtime
from tidings.sandbox.core import SandboxConfig, SandboxCore

GUARD_S = 60.0 * scale(1, 4)
PAGE = 200
DISK_MB = scale(8, 64)  # the long form fills eight times as much before the disk is full


def cannot(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def admin(url: str, statement: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)  # type: ignore[arg-type]


@pytest.fixture
def small_tablespace(pg_url: str, pg_admin_url: str) -> Iterator[tuple[str, Path]]:
    """The URL of this test's schema with its tables in a tablespace on an 8 MiB disk,
    and the disk's mount point."""
    if "127.0.0.1" not in pg_admin_url and "localhost" not in pg_admin_url:
        cannot("the server is not on this machine: its tablespace cannot be put here")
    owner = shutil.which("chown") and subprocess.run(
        ["id", "-u", "postgres"], capture_output=True, text=True)
    if not owner or owner.returncode != 0:
        cannot("no postgres user on this machine to own the tablespace's directory")
    # Not under pytest's own folder (0700, root's): the server's user must reach it.
    where = Path(tempfile.mkdtemp(prefix="tidings-tablespace-"))
    where.chmod(0o755)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m,mode=0700", "tmpfs",
                              str(where)], capture_output=True, text=True)
    if mounted.returncode != 0:
        cannot(f"cannot mount a small filesystem: {mounted.stderr.strip()}")
    name = f"small_{uuid.uuid4().hex[:12]}"
    try:
        subprocess.run(["chown", "postgres:postgres", str(where)], check=True)
        admin(pg_admin_url, f"CREATE TABLESPACE {name} LOCATION '{where}'")
        try:
            yield f"{pg_url}%20-cdefault_tablespace%3D{name}", where
        finally:
            # The schema's tables go first (the tablespace must be empty to be dropped);
            # pg_url drops the (then empty) schema after.
            schema = pg_url.rsplit("%3D", 1)[1]
            admin(pg_url.split("?")[0], f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            admin(pg_admin_url, f"DROP TABLESPACE IF EXISTS {name}")
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        shutil.rmtree(where, ignore_errors=True)


def requests(first: int, count: int) -> list[NotifyRequest]:
    return [NotifyRequest(key=f"n-{i}", recipient={"id": f"c{i}", "email": f"c{i}@example.com"},
                          channels=["email"], template="t", data={"pad": "x" * 400})
            for i in range(first, first + count)]


async def test_a_full_disk_stops_admission_cleanly_and_everything_resumes(
        small_tablespace: tuple[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    url, disk = small_tablespace
    caplog.set_level(logging.INFO, logger="tidings.worker")
    clock = SystemClock()
    core = SandboxCore(SandboxConfig(quotas={"email": 1_000_000}), now=clock.now)
    runtime = await build_runtime(
        Settings.parse({"store": url, "channels": {"email": {}}}), clock=clock,
        providers={"email": SandboxTwinProvider(core=core, channel="email", clock=clock)})
    try:
        await runtime.store.migrate(now=clock.now())
        # given admission until the disk is full
        admitted = 0
        with pytest.raises(StoreError) as full:
            for _ in range(1000):
                await runtime.notify_many(requests(admitted, PAGE))
                admitted += PAGE
        # then the error names the cause, and the page that failed left nothing behind
        assert "No space left on device" in str(full.value), full.value
        assert admitted >= PAGE
        async with await psycopg.AsyncConnection.connect(url) as conn:
            row = await (await conn.execute(
                "SELECT (SELECT count(*) FROM intents), (SELECT count(*) FROM messages), "
                "(SELECT count(*) FROM intents i WHERE NOT EXISTS "
                " (SELECT 1 FROM messages m WHERE m.message_id = i.key))")).fetchone()
        assert row == (admitted, admitted, 0), row

        # when a worker runs on the full disk, it waits (its writes fail) and does not
        # end; and when space returns, the refused page is admitted and all is delivered
        total = admitted + PAGE
        counts = await worker_waits_then_resumes(runtime, disk, requests(admitted, PAGE),
                                                 total, guard_s=GUARD_S)
    finally:
        await runtime.close()

    stats = core.stats()["channels"]["email"]
    told = [r.getMessage() for r in caplog.records if r.name == "tidings.worker"]
    assert any(m.startswith("store or queue out of reach") and "No space left on device" in m
               for m in told), told
    assert counts == {"accepted": total}
    assert stats["accepted_keys"] == total and stats["keys_accepted_twice"] == 0
