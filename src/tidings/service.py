"""Long-running loops for the CLI: worker, scheduler, reconciler; graceful on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable

from tidings.guardrails import enforce
from tidings.runtime import Runtime
from tidings.scheduler import Switches

log = logging.getLogger("tidings.service")


def on_signals(stop: Callable[[], None]) -> None:
    """Call ``stop`` on SIGTERM/SIGINT (finish or release work in hand, then exit)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop)


async def reconcile_loop(runtime: Runtime, every_s: float, stopping: asyncio.Event) -> None:
    """Run the reconciler every ``every_s`` seconds until ``stopping`` is set."""
    reconciler = runtime.reconciler()
    guardrails = runtime.guardrails()
    while not stopping.is_set():
        try:
            # Guardrails first: a crossing pauses admission before the relay's next pass.
            await enforce(runtime.store, runtime.transport, guardrails,
                          now=runtime.clock.now(), worker=reconciler.worker_id)
        except Exception:
            log.exception("guardrail check failed")
        try:
            switches = Switches.of(await runtime.store.switch_all())
            await reconciler.run_pass(now=runtime.clock.now(),
                                      paused_channels=switches.paused_channels())
        except Exception:
            # A failed sweep is retried next interval; it must not take the worker down.
            log.exception("reconcile pass failed")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), timeout=every_s)


async def serve_worker(runtime: Runtime, channel: str, *, worker_id: str | None = None,
                       reconcile: bool = True) -> None:
    """Serve one channel until SIGTERM, running the reconciler beside it."""
    worker = runtime.worker(channel, worker_id)
    stopping = asyncio.Event()

    def stop() -> None:
        stopping.set()
        worker.stop()

    on_signals(stop)
    sweeper = (asyncio.create_task(reconcile_loop(runtime, runtime.settings.worker
                                                  .reconcile_every_s, stopping))
               if reconcile else None)
    try:
        await worker.run()
    finally:
        stopping.set()
        if sweeper is not None:
            await sweeper


async def serve_scheduler(runtime: Runtime, *, once: bool = False) -> None:
    """Run admission passes every ``scheduler.interval_s`` (or one pass with ``once``)."""
    scheduler = runtime.scheduler()
    stopping = asyncio.Event()
    on_signals(stopping.set)
    while not stopping.is_set():
        result = await scheduler.run_pass(now=runtime.clock.now())
        if once:
            return
        if result.more:
            continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), timeout=runtime.settings.scheduler.interval_s)
