"""A worker process killed at each crash point with a broker for its queue; the survivors
deliver every key once.

As ``test_crash_points.py`` (a SQLite ledger, the sandbox over a real socket with
``dedupe`` off, ``crash_worker.py`` dying with ``os._exit(137)``), with the queue on a
real broker (``transport = "redis://…"`` or ``"amqp://…"``), so the outbox relay is
real: ``notify`` writes intents ``selected`` and the relay publishes them. The dead
process held deliveries (RabbitMQ gives them back when it sees the connection close;
Redis keeps them pending until their visibility passes), and the survivor must take
them over. Two points more than the embedded queue has: ``before_ack`` (the outcome
committed, the ack never sent) and ``during_publish`` (the relay published half a
page, confirmed, and died before marking anything enqueued). The verdict is the
sandbox's own count: every key accepted exactly once, and the broker's queue empty at
the end.

A broker joins by adding its URL fixture (``tests/conftest.py``) to ``BROKERS``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tidings.admission.relay import relay_pass
from tidings.config.settings import Settings
from tidings.core.states import DONE, State
from tidings.runtime import Runtime, build_runtime
from tidings.sandbox import LatencySpec, SandboxConfig, SandboxServer, serve

pytestmark = pytest.mark.slow

CRASH_WORKER = Path(__file__).with_name("crash_worker.py")
BROKERS = ["redis_url", "amqp_url"]
INTENTS = 40
LEASE_S = 1.0
VISIBILITY_S = 1.5
SEND_LATENCY_MS = 300.0
EXIT_AFTER_MS = 50.0
GUARD_S = 30.0  # a hang guard: every wait below returns as soon as its condition holds


def settings_for(db: Path, url: str, transport: str) -> Settings:
    return Settings.parse({
        "store": f"sqlite:///{db}",
        "transport": transport,
        "channels": {"email": {"provider": {"kind": "sandbox", "url": url}}},
        "worker": {"lease_s": LEASE_S, "visibility_s": VISIBILITY_S},
        "scheduler": {"relay_lease_s": LEASE_S},
        "reconciler": {"uncertain_after_s": 0.1, "lost_after_s": 2.0},
    })


@pytest.fixture(params=BROKERS)
def broker_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(request.param)
    return url


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


async def crash_worker(db: Path, url: str, point: str, transport: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(CRASH_WORKER), "--db", str(db), "--url", url, "--crash-at", point,
        "--lease-s", str(LEASE_S), "--visibility-s", str(VISIBILITY_S),
        "--exit-after-ms", str(EXIT_AFTER_MS), "--transport", transport,
        "--relay-lease-s", str(LEASE_S),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(process.communicate(), timeout=GUARD_S)
    assert process.returncode is not None
    return process.returncode, err.decode(errors="replace")


async def on_broker(rt: Runtime) -> int:
    depth = await rt.transport.depth("email", now=rt.clock.now())
    return depth.ready + depth.delayed + depth.in_flight


async def until_given_back(rt: Runtime, expected: int) -> int:
    """What the broker holds once it has taken back the dead connection's deliveries
    (it sees the close a moment after the process dies)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + GUARD_S
    while True:
        held = await on_broker(rt)
        if held >= expected or loop.time() > deadline:
            return held
        await asyncio.sleep(0.05)


async def recover(rt: Runtime) -> None:
    """A healthy worker plus the reconciler until every intent is terminal and the
    broker's queue is empty."""
    worker = rt.worker("email", "recovery-worker")
    reconciler = rt.reconciler()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + GUARD_S
    while loop.time() < deadline:
        await worker.run_once()
        await reconciler.run_pass(now=rt.clock.now())
        intents = await rt.store.intent_find(states=list(State), limit=10 * INTENTS)
        if all(i.state in DONE for i in intents) and await on_broker(rt) == 0:
            return
        await asyncio.sleep(0.05)
    counts = await rt.store.intent_counts()
    depth = await rt.transport.depth("email", now=rt.clock.now())
    raise AssertionError(f"not settled after {GUARD_S} s: {counts}, {depth}")


def email_stats(server: SandboxServer) -> dict[str, Any]:
    stats: dict[str, Any] = server.core.stats()["channels"]["email"]
    return stats


@pytest.mark.parametrize(("point", "sandbox"), [
    ("after_claim", 0.0),
    ("after_send", SEND_LATENCY_MS),
    ("after_reply", 0.0),
    ("after_commit", 0.0),
    ("before_ack", 0.0),
    ("during_publish", 0.0),
], indirect=["sandbox"])
async def test_a_process_killed_at_a_crash_point_on_a_broker_loses_and_repeats_nothing(
    tmp_path: Path, sandbox: SandboxServer, broker_url: str, point: str
) -> None:
    # given forty intents in the outbox of a SQLite ledger, the queue on the broker
    db = tmp_path / "crash.db"
    rt = await build_runtime(settings_for(db, sandbox.url, broker_url))
    try:
        keys = [
            (await rt.notify(key=f"order-{i:03d}", recipient={"id": f"c{i:03d}",
                             "email": f"c{i:03d}@example.com"}, channels=["email"],
                             template="receipt"))[0]
            for i in range(INTENTS)
        ]
        assert await rt.store.intent_counts() == {"email": {"selected": INTENTS}}
        if point != "during_publish":  # the relay publishes; the process that dies works
            relayed = await relay_pass(rt.store, rt.transport, now=rt.clock.now(),
                                       config=rt.relay_config())
            assert relayed == INTENTS and await on_broker(rt) == INTENTS

        # when a process is killed at the crash point, holding deliveries or a page
        status, err = await crash_worker(db, sandbox.url, point, broker_url)
        assert status == 137, err

        # then it died exactly there, and the broker took back all it held
        at_crash = email_stats(sandbox)
        counts = (await rt.store.intent_counts()).get("email", {})
        if point == "during_publish":
            assert await until_given_back(rt, INTENTS // 2) == INTENTS // 2  # half confirmed
            assert at_crash["requests"] == 0 and counts == {"selected": INTENTS}
        else:
            assert await until_given_back(rt, INTENTS) == INTENTS  # nothing was acked
        if point == "after_claim":
            assert at_crash["requests"] == 0 and counts == {"claimed": INTENTS}
        elif point in ("after_send", "after_reply"):
            assert at_crash["accepted_keys"] >= 1 and counts == {"claimed": INTENTS}
        elif point in ("after_commit", "before_ack"):
            assert at_crash["accepted_keys"] == INTENTS and counts == {"accepted": INTENTS}

        # when a healthy worker and the reconciler (which relays too) take over
        await recover(rt)

        # then the sandbox accepted every key exactly once and the broker holds nothing
        stats = email_stats(sandbox)
        assert stats["accepted_keys"] == INTENTS
        assert stats["keys_accepted_twice"] == 0, stats["keys_accepted_twice_sample"]
        assert stats["accepted"] == INTENTS
        assert await rt.store.intent_counts() == {"email": {"accepted": INTENTS}}
        assert (await rt.transport.depth("email", now=rt.clock.now())).dead == 0
        assert await rt.transport.contains("email", keys) == set()
        for key in keys:
            intent = await rt.store.intent_get(key)
            found = sandbox.core.lookup(key, "email")
            assert intent is not None and found is not None
            assert intent.receipt == found[1]
    finally:
        await rt.close()
