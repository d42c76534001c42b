"""A worker process killed at each crash point; the survivors deliver every key once.

Real processes, a real socket: the sandbox HTTP server runs in this process (with
``dedupe`` off, so a second send of a key would count as a second acceptance), the
intents live in a SQLite file, and ``crash_worker.py`` runs as a child that dies with
``os._exit(137)`` at one point of its batch. A recovery worker and the reconciler,
with a real clock and a one-second lease, then run until every intent is terminal and
the queue is empty. The verdict is the sandbox's own count: every key accepted exactly
once.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tidings.config.settings import Settings
from tidings.core.states import DONE, State
from tidings.runtime import Runtime, build_runtime
from tidings.sandbox import LatencySpec, SandboxConfig, SandboxServer, serve

pytestmark = pytest.mark.slow

CRASH_WORKER = Path(__file__).with_name("crash_worker.py")
INTENTS = 50
LEASE_S = 1.0
VISIBILITY_S = 1.5
#: The sandbox's reply latency when the crash must fall between request and reply.
SEND_LATENCY_MS = 300.0
EXIT_AFTER_MS = 50.0
RECOVERY_DEADLINE_S = 30.0  # a hang guard: recovery returns as soon as all is settled


def settings_for(db: Path, url: str) -> Settings:
    return Settings.parse({
        "store": f"sqlite:///{db}",
        "channels": {"email": {"provider": {"kind": "sandbox", "url": url}}},
        "worker": {"lease_s": LEASE_S, "visibility_s": VISIBILITY_S},
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


async def crash_worker(db: Path, url: str, point: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(CRASH_WORKER), "--db", str(db), "--url", url, "--crash-at", point,
        "--lease-s", str(LEASE_S), "--visibility-s", str(VISIBILITY_S),
        "--exit-after-ms", str(EXIT_AFTER_MS),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode is not None
    return process.returncode, err.decode(errors="replace")


async def recover(rt: Runtime) -> None:
    """A healthy worker plus the reconciler until every intent is terminal and the queue
    is empty (real time: the dead worker's one-second leases must run out)."""
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
    ("after_reply", 0.0),
    ("after_commit", 0.0),
], indirect=["sandbox"])
async def test_a_worker_killed_at_a_crash_point_loses_and_repeats_nothing(
    tmp_path: Path, sandbox: SandboxServer, point: str
) -> None:
    # given fifty intents on the queue of a SQLite store
    db = tmp_path / "crash.db"
    rt = await build_runtime(settings_for(db, sandbox.url))
    try:
        keys = [
            (await rt.notify(key=f"order-{i:03d}", recipient={"id": f"c{i:03d}",
                             "email": f"c{i:03d}@example.com"}, channels=["email"],
                             template="receipt"))[0]
            for i in range(INTENTS)
        ]

        # when a worker process is killed at the crash point
        status, err = await crash_worker(db, sandbox.url, point)
        assert status == 137, err

        # then it died exactly there
        at_crash = email_stats(sandbox)
        counts = (await rt.store.intent_counts()).get("email", {})
        depth = await rt.transport.depth("email", now=rt.clock.now())
        queued = depth.ready + depth.delayed + depth.in_flight
        if point == "after_commit":
            # On the store's own queue the acks committed with the outcomes: none of
            # them is left for a redelivery.
            assert queued == 0
        else:
            assert queued == INTENTS  # nothing was acked
        if point == "after_claim":
            assert at_crash["requests"] == 0 and counts == {"claimed": INTENTS}
        elif point in ("after_send", "after_reply"):
            # the provider took requests the dead worker never recorded an answer for
            assert at_crash["accepted_keys"] >= 1 and counts == {"claimed": INTENTS}
        else:
            assert at_crash["accepted_keys"] == INTENTS and counts == {"accepted": INTENTS}

        # when a healthy worker and the reconciler take over
        await recover(rt)

        # then the sandbox accepted every key exactly once
        stats = email_stats(sandbox)
        assert stats["accepted_keys"] == INTENTS
        assert stats["keys_accepted_twice"] == 0, stats["keys_accepted_twice_sample"]
        assert stats["accepted"] == INTENTS
        assert await rt.store.intent_counts() == {"email": {"accepted": INTENTS}}
        for key in keys:
            intent = await rt.store.intent_get(key)
            found = sandbox.core.lookup(key, "email")
            assert intent is not None and found is not None
            assert intent.receipt == found[1]
    finally:
        await rt.close()
