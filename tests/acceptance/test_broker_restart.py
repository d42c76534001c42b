"""The broker goes away in the middle of a delivery run: nothing is lost, nothing is sent
twice.

A worker and the reconciler deliver intents from a RabbitMQ queue to the sandbox over a
real socket (``dedupe`` off, so a second send of a key counts as a second acceptance)
with a SQLite ledger. Once a part has been accepted, every connection of the run is cut
the way a broker restart cuts them (``rabbitmqctl close_all_connections`` on the test's
vhost: the deliveries the worker held go back to the queue, its acks and nacks after
that fall on receipts the broker no longer knows); with ``TIDINGS_TEST_BROKER_RESTART=1``
the broker itself is stopped and started again (``rabbitmqctl stop_app`` / ``start_app``:
every user of the server sees it, so only where the run owns it, as ``.ci/run`` does).
The verdict is the sandbox's own count: every key accepted exactly once; and every
intent terminal, the queue and its dead letters empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from support.rabbitmq import rabbitmqctl_run
from tidings.config.settings import Settings
from tidings.core.states import DONE, State
from tidings.runtime import Runtime, build_runtime
from tidings.sandbox import LatencySpec, SandboxConfig, SandboxServer, serve
from tidings.transports.rabbitmq import RabbitTransport

pytestmark = pytest.mark.slow

INTENTS = 300
GUARD_S = 60.0  # a hang guard: every wait returns as soon as its condition holds
FULL_RESTART = os.environ.get("TIDINGS_TEST_BROKER_RESTART") == "1"


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxServer]:
    config = SandboxConfig(dedupe=False, quotas={"email": 100_000},
                           latency={"email": LatencySpec(median_ms=5.0, p99_ms=20.0)})
    server = await serve(config, "127.0.0.1", 0)
    try:
        yield server
    finally:
        await server.close()


def accepted(server: SandboxServer) -> dict[str, Any]:
    stats: dict[str, Any] = server.core.stats()["channels"]["email"]
    return stats


async def until(condition: Any, what: str, state: Any) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + GUARD_S
    while not await condition():
        if loop.time() > deadline:
            raise AssertionError(f"{what} not within {GUARD_S} s: {await state()}")
        await asyncio.sleep(0.05)


async def cut_the_broker(vhost: str) -> None:
    """Every connection of the run dropped, as by a restart (or a real restart)."""
    if FULL_RESTART:
        await asyncio.to_thread(rabbitmqctl_run, "stop_app")
        await asyncio.sleep(1.0)
        await asyncio.to_thread(rabbitmqctl_run, "start_app")
        await asyncio.to_thread(rabbitmqctl_run, "await_startup")
    else:
        await asyncio.to_thread(rabbitmqctl_run, "close_all_connections", "-p", vhost,
                                "broker restart (test)")


async def settled(rt: Runtime) -> bool:
    intents = await rt.store.intent_find(states=list(State), limit=2 * INTENTS)
    depth = await rt.transport.depth("email", now=rt.clock.now())
    return (len(intents) == INTENTS and all(i.state in DONE for i in intents)
            and depth.ready + depth.delayed + depth.in_flight == 0)


async def test_a_broker_restart_mid_run_loses_nothing_and_sends_nothing_twice(
    tmp_path: Path, sandbox: SandboxServer, amqp_url: str
) -> None:
    # given intents on a RabbitMQ queue and a worker delivering them
    vhost = unquote(urlsplit(amqp_url).path.lstrip("/"))
    rt = await build_runtime(Settings.parse({
        "store": f"sqlite:///{tmp_path / 'restart.db'}",
        "transport": amqp_url,
        "channels": {"email": {"provider": {"kind": "sandbox", "url": sandbox.url}}},
        "worker": {"lease_s": 2.0, "visibility_s": 3.0, "batch_size": 20},
        "reconciler": {"uncertain_after_s": 0.2, "lost_after_s": 3.0},
    }))
    worker = rt.worker("email", "restart-worker")
    reconciler = rt.reconciler()
    running = asyncio.create_task(worker.run())

    # Stopped between passes, never cancelled mid-pass: a call cancelled while its RPC
    # is on the wire closes the transport's channel under the test's own reads below.
    stop_sweeping = asyncio.Event()

    async def sweep() -> None:
        while not stop_sweeping.is_set():
            with contextlib.suppress(Exception):  # the broker may be away: next pass
                await reconciler.run_pass(now=rt.clock.now())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop_sweeping.wait(), 0.2)

    sweeping = asyncio.create_task(sweep())
    try:
        for start in range(0, INTENTS, 50):
            for i in range(start, start + 50):
                await rt.notify(key=f"restart-{i:04d}", recipient={
                    "id": f"r{i:04d}", "email": f"r{i:04d}@example.com"},
                    channels=["email"], template="receipt")

        # when the broker goes away once a part has been delivered
        async def some_sent() -> bool:
            if running.done():
                running.result()  # the worker's error, if it stopped on one
            return int(accepted(sandbox)["accepted_keys"]) >= INTENTS // 4

        async def state() -> str:
            depth = await rt.transport.depth("email", now=rt.clock.now())
            return f"{await rt.store.intent_counts()}, {depth}, sandbox {accepted(sandbox)}"

        await until(some_sent, "a quarter accepted", state)
        before = int(accepted(sandbox)["accepted_keys"])
        await cut_the_broker(vhost)

        # then the run finishes: every intent terminal, nothing left on the broker
        await until(lambda: settled(rt), "every intent terminal and the queue empty", state)
    finally:
        worker.stop()
        stop_sweeping.set()
        await asyncio.wait_for(sweeping, GUARD_S)
        await asyncio.wait_for(running, GUARD_S)
        stats = accepted(sandbox)
        counts = await rt.store.intent_counts()
        dead = (await rt.transport.depth("email", now=rt.clock.now())).dead
        assert isinstance(rt.transport, RabbitTransport)
        reconnected = rt.transport.connections_opened > 1
        await rt.close()

    # and the sandbox accepted every key exactly once, some of them after the cut
    assert before < INTENTS and reconnected
    assert stats["accepted_keys"] == INTENTS
    assert stats["keys_accepted_twice"] == 0, stats["keys_accepted_twice_sample"]
    assert stats["accepted"] == INTENTS
    assert counts == {"email": {"accepted": INTENTS}}
    assert dead == 0
