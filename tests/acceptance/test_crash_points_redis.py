"""The crash points with Redis Streams as the transport: a process killed at each one;
the survivors deliver every key exactly once.

As ``test_crash_points.py`` (a SQLite ledger, the sandbox HTTP server in this process
with ``dedupe`` off, ``crash_worker.py`` dying with ``os._exit(137)``), but the queue
is a Redis stream under a key prefix of this test, so the outbox relay is real:
``notify`` writes intents ``selected`` and the relay publishes them. Two more points
than the embedded queue has: ``before_ack`` (the outcome is committed, the ack never
reaches Redis) and ``during_publish`` (the relay published half a page and died before
marking anything enqueued). The verdict is the sandbox's own count.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tidings.relay import relay_pass
from tidings.runtime import Runtime, build_runtime
from tidings.sandbox import LatencySpec, SandboxConfig, SandboxServer, serve
from tidings.settings import Settings
from tidings.states import DONE, State

pytestmark = pytest.mark.slow

CRASH_WORKER = Path(__file__).with_name("crash_worker.py")
INTENTS = 50
LEASE_S = 1.0
VISIBILITY_S = 1.5
RELAY_LEASE_S = 1.0
SEND_LATENCY_MS = 300.0
EXIT_AFTER_MS = 50.0
RECOVERY_DEADLINE_S = 30.0  # a hang guard: recovery returns as soon as all is settled


def settings_for(db: Path, url: str, transport: str) -> Settings:
    return Settings.parse({
        "store": f"sqlite:///{db}",
        "transport": transport,
        "channels": {"email": {"provider": {"kind": "sandbox", "url": url}}},
        "worker": {"lease_s": LEASE_S, "visibility_s": VISIBILITY_S},
        "scheduler": {"relay_lease_s": RELAY_LEASE_S},
        "reconciler": {"uncertain_after_s": 0.1, "lost_after_s": 2.0},
    })


@pytest.fixture
async def sandbox(request: pytest.FixtureRequest) -> AsyncIterator[SandboxServer]:
    latency = getattr(request, "param", 0.0)
    config = SandboxConfig(dedupe=False, quotas={"email": 100_000},
                           latency={"email": LatencySpec(median_ms=latency, p99_ms=latency)})
    server = await serve(config, "127.0.0.1", 0)
    try:
        yield server
    finally:
        await server.close()


async def crash_process(db: Path, url: str, transport: str, point: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(CRASH_WORKER), "--db", str(db), "--url", url, "--crash-at", point,
        "--transport", transport, "--lease-s", str(LEASE_S),
        "--relay-lease-s", str(RELAY_LEASE_S),
        "--visibility-s", str(VISIBILITY_S), "--exit-after-ms", str(EXIT_AFTER_MS),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode is not None
    return process.returncode, err.decode(errors="replace")


async def recover(rt: Runtime) -> None:
    """A healthy worker plus the reconciler (which relays the outbox too) until every
    intent is terminal and the stream holds nothing (real time: the dead process's
    one-second leases must run out)."""
    worker = rt.worker("email", "recovery-worker")
    reconciler = rt.reconciler()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RECOVERY_DEADLINE_S
    while loop.time() < deadline:
        await worker.run_once()
        await reconciler.run_pass(now=rt.clock.now())
        intents = await rt.store.intent_find(states=list(State), limit=10 * INTENTS)
        depth = await rt.transport.depth("email", now=rt.clock.now())
        if (all(i.state in DONE for i in intents)
                and depth.ready + depth.delayed + depth.in_flight == 0):
            return
        await asyncio.sleep(0.05)
    counts = await rt.store.intent_counts()
    raise AssertionError(f"not settled after {RECOVERY_DEADLINE_S} s: {counts}")


def email_stats(server: SandboxServer) -> dict[str, Any]:
    stats: dict[str, Any] = server.core.stats()["channels"]["email"]
    return stats


@pytest.mark.parametrize(("point", "sandbox"), [
    ("after_claim", 0.0),
    ("after_send", SEND_LATENCY_MS),
    ("after_commit", 0.0),
    ("before_ack", 0.0),
    ("during_publish", 0.0),
], indirect=["sandbox"])
async def test_a_process_killed_at_a_crash_point_on_redis_loses_and_repeats_nothing(
    tmp_path: Path, sandbox: SandboxServer, redis_url: str, point: str
) -> None:
    # given fifty intents in the outbox of a SQLite ledger, Redis Streams the transport
    db = tmp_path / "crash.db"
    rt = await build_runtime(settings_for(db, sandbox.url, redis_url))
    try:
        keys = [
            (await rt.notify(key=f"order-{i:03d}", recipient={"id": f"c{i:03d}",
                             "email": f"c{i:03d}@example.com"}, channels=["email"],
                             template="receipt"))[0]
            for i in range(INTENTS)
        ]
        assert (await rt.store.intent_counts()) == {"email": {"selected": INTENTS}}
        if point != "during_publish":
            # the relay publishes the outbox (the dying process is a worker)
            relayed = await relay_pass(rt.store, rt.transport, now=rt.clock.now(),
                                       config=rt.relay_config())
            assert relayed == INTENTS

        # when a process is killed at the crash point
        status, err = await crash_process(db, sandbox.url, redis_url, point)
        assert status == 137, err

        # then it died exactly there
        at_crash = email_stats(sandbox)
        counts = (await rt.store.intent_counts()).get("email", {})
        depth = await rt.transport.depth("email", now=rt.clock.now())
        on_queue = depth.ready + depth.delayed + depth.in_flight
        if point == "during_publish":
            assert at_crash["requests"] == 0 and counts == {"selected": INTENTS}
            assert on_queue == INTENTS // 2  # half the page reached Redis
        else:
            assert on_queue == INTENTS  # nothing was acked
        if point == "after_claim":
            assert at_crash["requests"] == 0 and counts == {"claimed": INTENTS}
        elif point == "after_send":
            assert at_crash["accepted_keys"] >= 1 and counts == {"claimed": INTENTS}
        elif point in ("after_commit", "before_ack"):
            assert at_crash["accepted_keys"] == INTENTS and counts == {"accepted": INTENTS}

        # when a healthy worker and the reconciler take over
        await recover(rt)

        # then the sandbox accepted every key exactly once, and Redis holds nothing
        stats = email_stats(sandbox)
        assert stats["accepted_keys"] == INTENTS
        assert stats["keys_accepted_twice"] == 0, stats["keys_accepted_twice_sample"]
        assert stats["accepted"] == INTENTS
        assert await rt.store.intent_counts() == {"email": {"accepted": INTENTS}}
        assert await rt.transport.contains("email", keys) == set()
        for key in keys:
            intent = await rt.store.intent_get(key)
            found = sandbox.core.lookup(key, "email")
            assert intent is not None and found is not None
            assert intent.receipt == found[1]
    finally:
        await rt.close()
