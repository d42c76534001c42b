"""No free connection on PostgreSQL: a worker waits, nothing is lost (needs a server:
see tests/conftest.py; skips without one, fails under CI).

The server refuses new sessions for lack of slots ("too many clients"). So as not to
take the slots of every other test on the server, the wall is a role's own: the store
connects as a role with ``CONNECTION LIMIT 4`` to a database of its own, and the test
kills that role's sessions (as a restart would) while holding all four slots itself.
The worker's receive and claims fail for the while; the worker must go on (no end, no
crash loop), and once the slots are free deliver everything once, by the sandbox's own
counts.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest

from support.long_form import scale
from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.clock import SystemClock
from tidings.providers.sandbox import SandboxTwinProvider
from tidings.runtime import Runtime, build_runtime
from tidings.sandbox.core import SandboxConfig, SandboxCore
from tidings.stores import postgres_db

SLOTS = 4
N = scale(200, 4000)
WALL_S = scale(3, 30)  # how long every slot is held from a running worker
#: ... and from a process starting: within the 30 s it waits for a connection at start.
START_WALL_S = scale(3, 20)
GUARD_S = 120.0 * scale(1, 4)


@pytest.fixture
async def limited_url(pg_admin_url: str) -> AsyncIterator[tuple[str, str]]:
    """A database of the test's own, owned by a role of its own with SLOTS sessions."""
    name = f"tidings_slots_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{name}" LOGIN CONNECTION LIMIT {SLOTS}')
        admin.execute(f'CREATE DATABASE "{name}" OWNER "{name}"')
    host = pg_admin_url.split("@", 1)[1].rsplit("/", 1)[0]
    try:
        yield f"postgresql://{name}@{host}/{name}", name
    finally:
        with psycopg.connect(pg_admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'DROP ROLE IF EXISTS "{name}"')


async def take_every_slot(url: str, role: str, admin_url: str
                          ) -> list[psycopg.AsyncConnection[object]]:
    """End the role's sessions and hold all its slots (the pool reconnects meanwhile:
    its new sessions are ended too, until the test holds every slot)."""
    held: list[psycopg.AsyncConnection[object]] = []
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as admin:
        for _ in range(200):
            mine = [c.info.backend_pid for c in held]
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE usename = %s AND NOT pid = ANY(%s)", (role, mine))
            try:
                held.append(await psycopg.AsyncConnection.connect(url, autocommit=True))
            except psycopg.OperationalError:
                await asyncio.sleep(0.01)
            if len(held) == SLOTS:
                return held
    raise AssertionError("could not take the role's slots")


async def test_a_worker_waits_for_a_free_connection_and_loses_nothing(
        limited_url: tuple[str, str], pg_admin_url: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    url, role = limited_url
    # A caller waits 30 s for a pooled connection and retries for 30 s more before the
    # store gives up; shortened here, so that the wall outlasts them and the worker's
    # own waiting (not the pool's) is what carries it through.
    monkeypatch.setattr(postgres_db, "POOL_TIMEOUT_S", 0.5)
    monkeypatch.setattr(postgres_db, "RECONNECT_BUDGET_S", 0.5)
    caplog.set_level(logging.INFO, logger="tidings.worker")
    settings = Settings.parse({"store": url, "channels": {"email": {}}})
    clock = SystemClock()
    core = SandboxCore(SandboxConfig(quotas={"email": 1_000_000}), now=clock.now)
    runtime: Runtime = await build_runtime(
        settings, clock=clock,
        providers={"email": SandboxTwinProvider(core=core, channel="email", clock=clock)})
    held: list[psycopg.AsyncConnection[object]] = []
    try:
        await runtime.notify_many([NotifyRequest(
            key=f"n-{i}", recipient={"id": f"c{i}", "email": f"c{i}@example.com"},
            channels=["email"], template="t") for i in range(N)])
        worker = runtime.worker("email")
        held = await take_every_slot(url, role, pg_admin_url)
        # when the worker starts against the wall and runs into it for a while
        running = asyncio.create_task(worker.run())
        await asyncio.sleep(WALL_S)
        assert not running.done(), running
        assert worker.stats.accepted == 0
        # then, the slots free again, it delivers everything
        for conn in held:
            await conn.close()
        held = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + GUARD_S
        while worker.stats.accepted < N:
            assert not running.done(), running
            assert loop.time() < deadline, worker.stats
            await asyncio.sleep(0.1)
        worker.stop()
        await asyncio.wait_for(running, GUARD_S)
        counts = (await runtime.store.intent_counts())["email"]
        stats = core.stats()["channels"]["email"]
    finally:
        for conn in held:
            await conn.close()
        await runtime.close()

    assert counts == {"accepted": N}
    assert stats["accepted_keys"] == N and stats["keys_accepted_twice"] == 0
    told = [r.getMessage() for r in caplog.records if r.name == "tidings.worker"]
    assert any(m.startswith("store or queue out of reach") and "too many connections" in m
               for m in told), told
    assert any(m.startswith("store or queue back after") for m in told), told


async def test_a_process_starting_with_no_free_connection_waits_for_one(
        limited_url: tuple[str, str], pg_admin_url: str, caplog: pytest.LogCaptureFixture
        ) -> None:
    url, role = limited_url
    caplog.set_level(logging.WARNING, logger="tidings.stores.postgres")
    held = await take_every_slot(url, role, pg_admin_url)
    settings = Settings.parse({"store": url, "channels": {"email": {}}})
    clock = SystemClock()
    core = SandboxCore(SandboxConfig(quotas={"email": 1_000}), now=clock.now)
    starting = asyncio.create_task(build_runtime(
        settings, clock=clock,
        providers={"email": SandboxTwinProvider(core=core, channel="email", clock=clock)}))
    try:
        await asyncio.sleep(START_WALL_S)
        assert not starting.done(), starting  # waiting, not failed
        for conn in held:
            await conn.close()
        held = []
        runtime = await asyncio.wait_for(starting, GUARD_S)
        await runtime.close()
    finally:
        for conn in held:
            await conn.close()
        if not starting.done():
            starting.cancel()
    told = [r.getMessage() for r in caplog.records]
    assert len(told) == 1 and "no free connection" in told[0], told
    assert "too many connections" in told[0]
