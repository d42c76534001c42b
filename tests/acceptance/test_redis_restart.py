"""Redis restarted in the middle of a run: nothing lost, nothing sent twice.

A Redis server of this test (``support.redis_server``: a free port, an append-only
file fsynced on every write; the shared server is never restarted) is the transport;
the ledger is a SQLite file; the sandbox HTTP server runs with ``dedupe`` off, so a
second send of a key would count as a second acceptance. The relay loop, two workers
and the reconciler run while the intents are admitted and delivered; once a third is
accepted, the server is shut down and started again; or killed with SIGKILL (the file
has every write, fsynced); or killed and started on an empty folder (everything Redis
held is gone, as the shared server, which keeps nothing on disk, would lose it: the
reconciler publishes again every enqueued intent whose message is missing, and settles
the ones in flight by the provider's lookup). The verdict is the sandbox's own count
and the ledger: every key accepted exactly once, every intent terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.redis_server import RedisServer
from tidings.admission.relay import relay_loop
from tidings.config.settings import Settings
from tidings.core.states import DONE, State
from tidings.runtime import Runtime, build_runtime
from tidings.sandbox import LatencySpec, SandboxConfig, SandboxServer, serve

pytestmark = pytest.mark.slow

INTENTS = 300
SETTLE_DEADLINE_S = 60.0  # a hang guard: the test returns as soon as all is settled


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    try:
        server = RedisServer(tmp_path / "redis")
    except FileNotFoundError as exc:
        if __import__("os").environ.get("CI"):
            pytest.fail(str(exc), pytrace=False)
        pytest.skip(str(exc))
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxServer]:
    config = SandboxConfig(dedupe=False, quotas={"email": 100_000},
                           latency={"email": LatencySpec(median_ms=5.0, p99_ms=20.0)})
    server = await serve(config, "127.0.0.1", 0)
    try:
        yield server
    finally:
        await server.close()


def settings_for(db: Path, sandbox_url: str, redis_url: str) -> Settings:
    return Settings.parse({
        "store": f"sqlite:///{db}",
        "transport": f"{redis_url}?prefix=restart",
        "channels": {"email": {"provider": {"kind": "sandbox", "url": sandbox_url}}},
        "worker": {"lease_s": 2.0, "visibility_s": 3.0, "batch_size": 20},
        "scheduler": {"relay_lease_s": 2.0},
        "reconciler": {"uncertain_after_s": 0.1, "lost_after_s": 2.0},
    })


async def reconcile_until(rt: Runtime, stopping: asyncio.Event) -> None:
    reconciler = rt.reconciler()
    while not stopping.is_set():
        with contextlib.suppress(Exception):  # while Redis is down a pass may fail
            await reconciler.run_pass(now=rt.clock.now())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), 0.2)


def accepted(server: SandboxServer) -> int:
    stats: dict[str, Any] = server.core.stats()["channels"]["email"]
    return int(stats["accepted_keys"])


@pytest.mark.parametrize("how", ["shutdown", "sigkill", "wiped"])
async def test_a_redis_restart_mid_run_loses_nothing_and_sends_nothing_twice(
    tmp_path: Path, own_redis: RedisServer, sandbox: SandboxServer, how: str
) -> None:
    rt = await build_runtime(settings_for(tmp_path / "ledger.db", sandbox.url, own_redis.url))
    stopping = asyncio.Event()
    workers = [rt.worker("email", f"w{i}") for i in range(2)]
    tasks: list[asyncio.Task[Any]] = []
    try:
        # given the relay, two workers and the reconciler running on Redis Streams
        tasks = [asyncio.create_task(w.run()) for w in workers]
        tasks.append(asyncio.create_task(reconcile_until(rt, stopping)))

        async def no_pauses() -> list[str]:
            return []

        tasks.append(asyncio.create_task(relay_loop(
            rt.store, rt.transport, rt.relay_config(), clock=rt.clock, stopping=stopping,
            paused_channels=no_pauses)))

        # when intents are admitted and, a third of the way through, Redis restarts
        keys = [k for i in range(INTENTS) for k in await rt.notify(
            key=f"order-{i:04d}", recipient={"id": f"c{i:04d}", "email": f"c{i:04d}@example.com"},
            channels=["email"], template="receipt")]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_DEADLINE_S
        while loop.time() < deadline:  # the sandbox's count is the witness: poll it
            if accepted(sandbox) >= INTENTS // 3:
                break
            await asyncio.sleep(0.02)
        at_restart = accepted(sandbox)
        if how == "shutdown":
            await asyncio.to_thread(own_redis.stop)
        else:
            await asyncio.to_thread(own_redis.kill)
        if how == "wiped":
            await asyncio.to_thread(own_redis.wipe)
        await asyncio.sleep(1.0)
        await asyncio.to_thread(own_redis.start)

        # then every intent becomes terminal and the stream drains
        while loop.time() < deadline:
            intents = await rt.store.intent_find(states=list(State), limit=2 * INTENTS)
            depth = await rt.transport.depth("email", now=rt.clock.now())
            if (len(intents) == INTENTS and all(i.state in DONE for i in intents)
                    and depth.ready + depth.delayed + depth.in_flight == 0):
                break
            await asyncio.sleep(0.1)
        counts = await rt.store.intent_counts()
        assert counts == {"email": {"accepted": INTENTS}}, counts
        assert 0 < at_restart < INTENTS

        # and the sandbox accepted every key exactly once
        stats: dict[str, Any] = sandbox.core.stats()["channels"]["email"]
        assert stats["accepted_keys"] == INTENTS
        assert stats["keys_accepted_twice"] == 0, stats["keys_accepted_twice_sample"]
        assert stats["accepted"] == INTENTS
        assert await rt.transport.contains("email", keys) == set()
    finally:
        stopping.set()
        for w in workers:
            w.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
        await rt.close()
