"""Workers, the reconciler and the scheduler inside an application's own event loop.

Beside the separate-process way (``tidings worker``, ``tidings scheduler``), an app
that already runs an event loop (a FastAPI/Starlette lifespan, aiohttp's
``cleanup_ctx``) may run tidings' services as its own tasks. Applications import them
from ``tidings.embedded``, their public home::

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with await tidings.build_runtime(settings) as runtime:
            async with embedded(runtime, channels=["email"], scheduler=True):
                app.state.tidings = runtime
                yield                      # serve requests; notify() on app.state.tidings
        # leaving: every worker finishes or releases what it holds, then the runtime closes

Each worker runs the reconciler and the liveness heartbeat beside it, exactly as
``tidings worker`` does, so uncertain sends are settled and a crashed process's work is
taken back. Signals stay the host's: nothing here installs a handler, and the services
stop when the context exits (the host's own shutdown).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from tidings.processes.gc_tuning import WORKER_GC_YOUNG, serving_gc
from tidings.processes.service import serve_scheduler, serve_worker
from tidings.runtime import Runtime

log = logging.getLogger("tidings.service")


@dataclass
class Embedded:
    """The services running inside the host: one task each."""

    channels: tuple[str, ...]
    scheduler: bool
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def failed(self) -> list[BaseException]:
        """The errors of services that ended on their own (a host may check it in its
        health probe)."""
        return [t.exception() for t in self.tasks  # type: ignore[misc]
                if t.done() and not t.cancelled() and t.exception() is not None]


@contextlib.asynccontextmanager
async def embedded(runtime: Runtime, *, channels: Sequence[str] | None = None,
                   scheduler: bool = False, reconcile: bool = True,
                   drain_timeout_s: float | None = None,
                   tune_gc: bool = False) -> AsyncIterator[Embedded]:
    """Run a worker per channel (default: every channel) and, with ``scheduler``, the
    admission loop, as tasks of the running loop; on exit stop them and wait until each
    has finished or released the work it held (at most ``drain_timeout_s``, then they
    are cancelled, which leaves their leases to the reconciler as a crash would).

    ``tune_gc``: tune the host's garbage collector as ``tidings worker`` tunes its own
    (``gc_tuning.serving_gc``) while the services run. Off by default, as the collector
    is the host's; on, embedded workers spent about as much CPU per delivery as
    ``tidings worker`` (``bench/embedded_drain.py --modes``), against ~1.2x without."""
    if tune_gc:
        with serving_gc(WORKER_GC_YOUNG):
            async with embedded(runtime, channels=channels, scheduler=scheduler,
                                reconcile=reconcile,
                                drain_timeout_s=drain_timeout_s) as services:
                yield services
        return
    chosen = tuple(channels if channels is not None else runtime.channels)
    services = Embedded(channels=chosen, scheduler=scheduler)
    for channel in chosen:
        services.tasks.append(asyncio.create_task(
            serve_worker(runtime, channel, reconcile=reconcile, stop=services.stop,
                         signals=False), name=f"tidings-worker-{channel}"))
    if scheduler:
        services.tasks.append(asyncio.create_task(
            serve_scheduler(runtime, stop=services.stop, signals=False),
            name="tidings-scheduler"))
    try:
        yield services
    finally:
        services.stop.set()
        done, pending = await asyncio.wait(services.tasks, timeout=drain_timeout_s)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("embedded services cancelled after the drain timeout",
                        extra={"pending": len(pending)})
            await asyncio.gather(*pending, return_exceptions=True)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.error("an embedded service failed", exc_info=task.exception(),
                          extra={"task": task.get_name()})
