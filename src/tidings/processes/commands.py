"""What ``tidings worker``, ``tidings scheduler`` and ``tidings reconcile`` run once their
settings are read: the CLI (``tidings.cli``) and Django's management commands
(``tidings.contrib.django``) call these same functions.

A worker process starts here: what is imported before its first send stays small
(tests/unit/test_worker_imports.py), so each function imports what it runs.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

from tidings.config.settings import Settings
from tidings.core import logs
from tidings.core.errors import ConfigurationError, unknown_name
from tidings.runtime import Runtime, build_runtime, check_settings

T = TypeVar("T")
#: Seconds a command that is not a service tries an unreachable broker again.
COMMAND_PATIENCE_S = 5.0


async def run_on(settings: Settings, fn: Callable[[Runtime], Awaitable[T]], *,
                 migrate: bool | Literal["new"] = False, channel: str | None = None) -> T:
    """Run ``fn`` on a runtime built from ``settings`` (checked first); ``channel``, when
    given, must be declared before anything (a new database included) is created.
    ``migrate="new"``: a service, which creates a new database's schema and rides out
    a broker outage however long it lasts; otherwise a command someone waits on."""
    check_settings(settings)
    if channel is not None and channel not in settings.channels:
        raise ConfigurationError("channel", unknown_name("channel", channel,
                                                         sorted(settings.channels)))
    runtime = await build_runtime(
        settings, migrate=migrate,
        patience_s=math.inf if migrate == "new" else COMMAND_PATIENCE_S)
    logs.use_clock(runtime.clock)  # log times are the simulated ones when set
    async with runtime:
        return await fn(runtime)


def worker_process(settings: Settings, channel: str, reconcile: bool) -> None:
    """One worker process of ``channel`` until SIGTERM (a supervised child starts here)."""
    from tidings.processes.service import serve_worker

    logs.configure_logging(*logs.from_env(os.environ))
    asyncio.run(run_on(settings, lambda rt: serve_worker(rt, channel, reconcile=reconcile),
                       migrate="new", channel=channel))


def run_worker(settings: Settings, channel: str, *, reconcile: bool = True,
               processes: int = 1) -> int:
    """``tidings worker``: one process, or ``processes`` supervised ones; the exit code."""
    if processes == 1:
        worker_process(settings, channel, reconcile)
        return 0
    from tidings.processes.supervisor import Supervisor

    return Supervisor(processes, worker_process, (settings, channel, reconcile),
                      name=f"tidings-worker-{channel}").run()


def run_scheduler(settings: Settings, *, once: bool = False) -> None:
    """``tidings scheduler``: admission passes until SIGTERM (one with ``once``)."""
    from tidings.processes.service import serve_scheduler

    asyncio.run(run_on(settings, lambda rt: serve_scheduler(rt, once=once), migrate="new"))


async def reconcile_pass(runtime: Runtime) -> dict[str, Any]:
    """``tidings reconcile``: one reconciler sweep; what it did, by kind."""
    from tidings.admission.scheduler import Switches

    switches = Switches.of(await runtime.store.switch_all())
    result = await runtime.reconciler().run_pass(now=runtime.clock.now(),
                                                 paused_channels=switches.paused_channels())
    return dict(result.__dict__)


def reconcile_once(settings: Settings) -> dict[str, Any]:
    """``reconcile_pass`` on a runtime of its own."""
    return asyncio.run(run_on(settings, reconcile_pass))


async def migrate_store(settings: Settings) -> tuple[list[int], int]:
    """``tidings db migrate``: apply the store's pending migrations (none is applied
    twice); the numbers applied now, and the schema's version after."""
    from tidings.core.clock import SystemClock
    from tidings.runtime import open_store

    store, transport = await open_store(settings.store)
    try:
        applied = await store.migrate(now=SystemClock(settings.clock_offset_s).now())
        return applied, await store.schema_version()
    finally:
        await transport.close()
        await store.close()
