"""Workers and the scheduler inside an application's own event loop: a FastAPI app whose
lifespan runs them, notify from a route, delivery judged by the sandbox, a graceful
drain on shutdown, and the host's signal handlers left alone."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tidings import Settings, build_runtime
from tidings.core.clock import SystemClock
from tidings.embedded import embedded
from tidings.providers.sandbox import SandboxTwinProvider
from tidings.sandbox import SandboxConfig, SandboxCore

ORDERS = 30


def world(tmp_path: Path) -> tuple[Settings, SandboxCore, SandboxTwinProvider]:
    clock = SystemClock()
    core = SandboxCore(SandboxConfig(), now=clock.now, seed=1)
    provider = SandboxTwinProvider(core=core, channel="email", clock=clock)
    settings = Settings.parse({"store": f"sqlite:///{tmp_path / 'app.db'}",
                               "channels": {"email": {}}})
    return settings, core, provider


async def test_a_fastapi_lifespan_runs_the_worker_and_drains_on_shutdown(tmp_path: Path) -> None:
    settings, core, provider = world(tmp_path)
    seen: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with await build_runtime(settings, providers={"email": provider}) as runtime:
            before = signal.getsignal(signal.SIGTERM)
            async with embedded(runtime, channels=["email"], scheduler=True) as services:
                app.state.runtime = runtime
                seen["services"] = services
                yield
            seen["sigterm_kept"] = signal.getsignal(signal.SIGTERM) == before
            seen["states"] = await runtime.store.intent_counts()

    app = FastAPI(lifespan=lifespan)

    @app.post("/orders/{order_id}")
    async def place(order_id: int) -> dict[str, Any]:
        keys = await app.state.runtime.notify(
            key=f"order-{order_id}", recipient={"id": f"c{order_id}",
                                               "email": f"c{order_id}@example.com"},
            channels=["email"], template="t")
        return {"keys": keys}

    # The lifespan as uvicorn drives it, and requests through the ASGI app itself.
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://app") as client:
        for i in range(ORDERS):
            assert (await client.post(f"/orders/{i}")).status_code == 200
        deadline = time.monotonic() + 30
        while core.stats()["channels"]["email"]["accepted"] < ORDERS:
            assert time.monotonic() < deadline, core.stats()
            await asyncio.sleep(0.05)
        services = seen["services"]
        assert all(not t.done() for t in services.tasks)  # still serving
    assert all(t.done() for t in services.tasks)
    assert services.failed() == []
    assert seen["sigterm_kept"]
    assert seen["states"] == {"email": {"accepted": ORDERS}}
    stats = core.stats()["channels"]["email"]
    assert (stats["accepted"], stats["accepted_keys"]) == (ORDERS, ORDERS)


async def test_an_exit_mid_backlog_finishes_or_releases_what_it_holds(tmp_path: Path) -> None:
    settings, core, provider = world(tmp_path)
    async with await build_runtime(settings, providers={"email": provider}) as runtime:
        for i in range(200):
            await runtime.notify(key=f"n-{i}", recipient={"id": f"c{i}",
                                                         "email": f"c{i}@example.com"},
                                 channels=["email"], template="t")
        async with embedded(runtime) as services:
            while core.stats()["channels"]["email"]["accepted"] == 0:  # noqa: ASYNC110
                await asyncio.sleep(0.01)  # the sandbox has no event to wait on
        assert services.failed() == []
        counts = (await runtime.store.intent_counts())["email"]
        # Nothing is left claimed: each intent was sent, or is back for the next worker.
        assert set(counts) <= {"accepted", "enqueued", "retryable"}, counts
        accepted = core.stats()["channels"]["email"]["accepted"]
        assert counts.get("accepted", 0) == accepted


async def test_tune_gc_tunes_the_collector_while_the_services_run_and_puts_it_back(
        tmp_path: Path) -> None:
    import gc

    from tidings.processes.gc_tuning import WORKER_GC_YOUNG

    settings, core, provider = world(tmp_path)
    before = gc.get_threshold()
    async with await build_runtime(settings, providers={"email": provider}) as runtime:
        await runtime.notify(key="gc-1", recipient={"id": "c1", "email": "c1@example.com"},
                             channels=["email"], template="t")
        async with embedded(runtime, tune_gc=True) as services:
            assert gc.get_threshold()[0] == WORKER_GC_YOUNG
            while core.stats()["channels"]["email"]["accepted"] == 0:  # noqa: ASYNC110
                await asyncio.sleep(0.01)  # the sandbox has no event to wait on
        assert services.failed() == []
    assert gc.get_threshold() == before
    assert core.stats()["channels"]["email"]["accepted"] == 1


def test_the_public_home_and_the_old_path() -> None:
    """docs/frameworks.md and application.md told users to import an internal module;
    tidings.embedded is the public home, and the old path warns naming it."""
    import importlib
    import sys

    import tidings.embedded
    from tidings.processes.hosted import Embedded

    assert tidings.embedded.embedded is embedded
    assert tidings.embedded.Embedded is Embedded
    sys.modules.pop("tidings.processes.embedded", None)
    with pytest.warns(DeprecationWarning, match=r"import Embedded, embedded from "
                                                r"tidings\.embedded"):
        old = importlib.import_module("tidings.processes.embedded")
    assert old.embedded is embedded
