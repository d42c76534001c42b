"""Worker processes whose provider raises at random deliver every key exactly once.

Real processes, a real socket, both stores: the sandbox HTTP server runs in this
process (``dedupe`` off, so a second send of a key would count as a second
acceptance); two ``fault_worker.py`` children serve the channel with a provider that
raises before the request reached the sandbox, or after the sandbox accepted it. The
verdict is the sandbox's own count (the independent witness): every key accepted
once, none twice, none lost, no intent left ``claimed``, and neither worker ever
exited until it was told to. PostgreSQL needs a server (see tests/conftest.py: skips
without one, fails under CI).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fault_worker import settings_for

from tidings.admission.intake import NotifyRequest
from tidings.core.states import DONE, State
from tidings.runtime import Runtime, build_runtime
from tidings.sandbox import LatencySpec, SandboxConfig, SandboxServer, serve

pytestmark = pytest.mark.slow

FAULT_WORKER = Path(__file__).with_name("fault_worker.py")
INTENTS = 300
WORKERS = 2
BEFORE, AFTER = 0.15, 0.15
GUARD_S = 120.0  # only against a hang: the test returns as soon as all is settled


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'faults.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxServer]:
    config = SandboxConfig(dedupe=False, quotas={"email": 100_000},
                           latency={"email": LatencySpec(median_ms=2, p99_ms=10)})
    server = await serve(config, "127.0.0.1", 0)
    try:
        yield server
    finally:
        await server.close()


def email_stats(server: SandboxServer) -> dict[str, Any]:
    stats: dict[str, Any] = server.core.stats()["channels"].get("email", {})
    return stats


async def settled(rt: Runtime) -> bool:
    """Every intent terminal and the queue empty."""
    intents = await rt.store.intent_find(states=list(State), limit=10 * INTENTS)
    depth = await rt.transport.depth("email", now=rt.clock.now())
    return (len(intents) == INTENTS and all(i.state in DONE for i in intents)
            and depth.ready + depth.delayed + depth.in_flight == 0)


async def test_workers_whose_provider_raises_at_random_deliver_each_key_once(
        store_url: str, sandbox: SandboxServer, tmp_path: Path) -> None:
    # given three hundred intents on the queue
    rt = await build_runtime(settings_for(store_url, sandbox.url))
    workers: list[asyncio.subprocess.Process] = []
    try:
        await rt.notify_many([
            NotifyRequest(key=f"order-{i:03d}", recipient={"id": f"c{i:03d}",
                          "email": f"c{i:03d}@example.com"}, channels=["email"], template="t")
            for i in range(INTENTS)])

        # when two worker processes serve them through a provider that raises at random
        # (their output goes to files: a full pipe would stall a worker that logs a lot)
        outs = [(tmp_path / f"w{n}.out", tmp_path / f"w{n}.err") for n in range(WORKERS)]
        for seed, (out, err) in enumerate(outs):
            with out.open("wb") as stdout, err.open("wb") as stderr:
                workers.append(await asyncio.create_subprocess_exec(
                    sys.executable, str(FAULT_WORKER), "--store", store_url,
                    "--url", sandbox.url, "--before", str(BEFORE), "--after", str(AFTER),
                    "--seed", str(seed), stdout=stdout, stderr=stderr))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + GUARD_S
        while not await settled(rt):
            # then no worker ever exits on its own
            assert all(w.returncode is None for w in workers), "a worker exited"
            if loop.time() > deadline:
                raise AssertionError(f"not settled: {await rt.store.intent_counts()}")
            await asyncio.sleep(0.1)
        assert all(w.returncode is None for w in workers), "a worker exited"
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            await asyncio.wait_for(w.wait(), timeout=30)
        logs = "".join(err.read_text() for _, err in outs)
        assert [w.returncode for w in workers] == [0] * WORKERS, logs[-3000:]

        # then the provider really raised, both before and after sending
        counts = [json.loads(out.read_text().strip().splitlines()[-1]) for out, _ in outs]
        assert sum(c["raised_before"] for c in counts) > 0
        assert sum(c["raised_after"] for c in counts) > 0
        # and no log line carried an address, though every raised message named one
        assert '"send raised"' in logs
        assert "@example.com" not in logs

        # and the sandbox accepted every key exactly once: none twice, none lost
        stats = email_stats(sandbox)
        assert stats["accepted_keys"] == INTENTS
        assert stats["keys_accepted_twice"] == 0, stats["keys_accepted_twice_sample"]
        # and the ledger agrees, nothing left claimed, every receipt the sandbox's own
        assert await rt.store.intent_counts() == {"email": {State.ACCEPTED.value: INTENTS}}
        for i in range(INTENTS):
            intent = await rt.store.intent_get(f"order-{i:03d}:email")
            found = sandbox.core.lookup(f"order-{i:03d}:email", "email")
            assert intent is not None and found is not None
            assert intent.receipt == found[1]
    finally:
        for w in workers:
            if w.returncode is None:
                w.kill()
                await w.wait()
        await rt.close()
