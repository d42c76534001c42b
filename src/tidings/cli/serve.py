"""The pipeline's long-running processes: ``tidings worker`` (one channel's deliveries,
optionally as N supervised processes) and ``tidings scheduler``. The HTTP API's
``tidings api`` is in ``cli.api``.

A worker process starts in this package: what it imports before its first send is kept
small (tests/unit/test_worker_imports.py), so everything else is imported where used."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from tidings.cli.common import ConfigOpt, StoreOpt, _with_runtime, app
from tidings.core import logs


@app.command()
def worker(
    channel: Annotated[str, typer.Option(help="The channel to serve (one per worker).")],
    config: ConfigOpt = None, store: StoreOpt = None,
    processes: Annotated[int, typer.Option(min=1, help="Worker processes to run.")] = 1,
    reconcile: Annotated[bool, typer.Option(help="Run the reconciler periodically too.")] = True,
) -> None:
    """Deliver one channel's messages until SIGTERM (work in hand is finished or released).

    With --processes N the command supervises N worker processes: one that dies is
    started again (with a growing pause if it keeps dying), and SIGTERM is passed on
    to all of them.
    """
    if processes == 1:
        _serve_worker(config, store, channel, reconcile)
        return
    from tidings.processes.supervisor import Supervisor

    supervisor = Supervisor(processes, _serve_worker, (config, store, channel, reconcile),
                            name=f"tidings-worker-{channel}")
    raise typer.Exit(supervisor.run())


def _serve_worker(config: Path | None, store: str | None, channel: str, reconcile: bool) -> None:
    from tidings.processes.service import serve_worker

    # A --processes child starts here, not in the callback: set its logs up again.
    logs.configure_logging(*logs.from_env(os.environ))

    # The processes that own the database create a new one's schema on first use.
    _with_runtime(config, store, lambda rt: serve_worker(rt, channel, reconcile=reconcile),
                  migrate="new", channel=channel)


@app.command()
def scheduler(config: ConfigOpt = None, store: StoreOpt = None,
              once: Annotated[bool, typer.Option(help="Run one bounded pass and exit.")] = False
              ) -> None:
    """Admit due campaign occurrences, close due digests and publish due intents, pass
    after pass."""
    from tidings.processes.service import serve_scheduler

    _with_runtime(config, store, lambda rt: serve_scheduler(rt, once=once), migrate="new")
