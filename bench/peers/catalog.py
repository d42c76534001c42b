"""The systems under test as the driver sees them: how to start, kill and describe each.

Nothing here imports a task library; each system's settings and the reasons for them
are the docstring of its ``systems/<module>.py``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
#: The Redis database the benchmark owns: emptied before each Redis peer's run. Two runs
#: at once need a database each (``PEERS_REDIS=redis://127.0.0.1:6379/14``).
REDIS_URL = os.environ.get("PEERS_REDIS", "redis://127.0.0.1:6379/15")


@dataclass(frozen=True, kw_only=True)
class Context:
    workload: str
    processes: int
    tidings_config: Path | None = None


Commands = Callable[[Context], list[list[str]]]


@dataclass(frozen=True, kw_only=True)
class System:
    name: str
    module: str                # systems.<module>: its docstring holds its settings
    packages: tuple[str, ...]  # the distributions whose versions are reported
    backend: str               # "redis", "postgresql" or "sqlite"
    commands: Commands         # one command per instance
    topology: str              # how P worker processes are laid out
    limiter: str               # the rate-limit feature used by the pacing workload
    transport: str | None = None  # tidings: a broker transport beside the store
    kill: str = "instance"     # crash: "instance" (driver kills + restarts an instance's
    #                            process group) or "child" (kill a pool process; the
    #                            system's own supervisor replaces it)


def _py(*args: str) -> list[str]:
    return [sys.executable, *args]


def _celery(ctx: Context) -> list[list[str]]:
    return [_py("-m", "celery", "-A", "systems.celery", "worker", "--pool", "prefork",
                "--concurrency", str(ctx.processes), "--prefetch-multiplier", "1",
                "--without-gossip", "--without-mingle", "--without-heartbeat", "-O", "fair",
                "-Q", "bench", "--loglevel", "WARNING")]


def _dramatiq(ctx: Context) -> list[list[str]]:
    return [_py("-m", "dramatiq", "systems.dramatiq", "--processes", "1", "--threads", "8",
                "--queues", "bench")] * ctx.processes


def _taskiq(ctx: Context) -> list[list[str]]:
    return [_py("-m", "taskiq", "worker", "systems.taskiq:broker", "--workers",
                str(ctx.processes), "--log-level", "WARNING")]


def _arq(ctx: Context) -> list[list[str]]:
    # arq's CLI logs every job at INFO; this runs the same run_worker at WARNING.
    return [_py("-c", "import logging; logging.basicConfig(level=logging.WARNING); "
                      "from arq.worker import run_worker; "
                      "from systems.arq import WorkerSettings; run_worker(WorkerSettings)")
            ] * ctx.processes


def _rq(worker_class: str) -> Commands:
    def commands(ctx: Context) -> list[list[str]]:
        # RQ's performance notes: preload the job's module before the worker forks, so a
        # work horse does not import it again for every job. Otherwise it is `rq worker`.
        preload = ("import sys, systems.rq; from rq.cli.cli import main; "
                   "sys.argv[0] = 'rq'; main()")
        return [[sys.executable, "-c", preload, "worker", "--url", REDIS_URL,
                 "--worker-class", worker_class,
                 "--with-scheduler", "--maintenance-interval", "10",
                 "--job-monitoring-interval", "5", "--quiet", "bench"]] * ctx.processes
    return commands


def _procrastinate(ctx: Context) -> list[list[str]]:
    return [_py("-m", "procrastinate", "--app=systems.procrastinate.app", "worker",
                "--concurrency", "10", "--delete-jobs", "successful")] * ctx.processes


def _tidings(ctx: Context) -> list[list[str]]:
    assert ctx.tidings_config is not None
    if ctx.workload in ("throughput", "io"):
        return [_py("-m", "systems.tidings", "worker")] * ctx.processes
    return [[str(BIN / "tidings"), "worker", "--channel", "email", "--config",
             str(ctx.tidings_config)]] * ctx.processes


SYSTEMS: dict[str, System] = {s.name: s for s in [
    System(name="tidings-sqlite", module="tidings", packages=("tidings",), backend="sqlite",
           commands=_tidings, topology="P × `tidings worker` (reconciler inside)",
           limiter="tidings pacer, quota 50/s shared through the store"),
    System(name="tidings-pg", module="tidings", packages=("tidings",), backend="postgresql",
           commands=_tidings, topology="P × `tidings worker` (reconciler inside)",
           limiter="tidings pacer, quota 50/s shared through the store"),
    System(name="tidings-pg-redis", module="tidings", packages=("tidings", "redis"),
           backend="postgresql", transport="redis", commands=_tidings,
           topology="P × `tidings worker` (reconciler inside); the producer runs the relay",
           limiter="tidings pacer, quota 50/s shared through the store"),
    System(name="celery", module="celery", packages=("celery", "kombu", "redis"), backend="redis",
           commands=_celery, topology="1 node, prefork `--concurrency P`",
           limiter='rate_limit="50/s" (per worker node)', kill="child"),
    System(name="dramatiq", module="dramatiq", packages=("dramatiq", "redis"), backend="redis",
           commands=_dramatiq, topology="P × `dramatiq --processes 1 --threads 8`",
           limiter="WindowRateLimiter(limit=50, window=1) on Redis"),
    System(name="taskiq", module="taskiq", packages=("taskiq", "taskiq-redis", "redis"),
           backend="redis", commands=_taskiq, topology="1 × `taskiq worker --workers P`",
           limiter="none", kill="child"),
    System(name="arq", module="arq", packages=("arq", "redis"), backend="redis", commands=_arq,
           topology="P × arq worker (max_jobs 10)", limiter="none"),
    System(name="rq-simple", module="rq", packages=("rq", "redis"), backend="redis",
           commands=_rq("rq.worker.SimpleWorker"), topology="P × `rq worker` SimpleWorker",
           limiter="none"),
    System(name="rq-fork", module="rq", packages=("rq", "redis"), backend="redis",
           commands=_rq("rq.worker.Worker"), topology="P × `rq worker` (fork per job)",
           limiter="none"),
    System(name="procrastinate", module="procrastinate", packages=("procrastinate", "psycopg"),
           backend="postgresql", commands=_procrastinate,
           topology="P × `procrastinate worker --concurrency 10`", limiter="none"),
]}
