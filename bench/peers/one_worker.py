"""One tidings worker, in this process, draining an io backlog: where a delivery's time goes.

    PYTHONPATH=src bench/peers/.venv/bin/python bench/peers/one_worker.py --store sqlite
    PYTHONPATH=src bench/peers/.venv/bin/python bench/peers/one_worker.py --store pg --gc default

The io workload of ``run.py`` for one worker and no driver: N intents are enqueued
(``notify_many``), then one ``Worker`` (the channel's, as ``tidings worker`` builds it)
drains them with the io provider of ``systems/tidings.py`` (one Redis ``INCR`` per
send, on keys of this script's own prefix, deleted after). It prints one JSON line:
the drain rate, the process's CPU per delivery (both its threads: the event loop and,
on SQLite, the database thread), the time the cyclic garbage collector took per
delivery (``gc.callbacks``), and the store and transport calls per 1,000 deliveries.
``--gc serving`` (the default) runs the worker under ``gc_tuning.serving_gc``, as
``tidings worker`` does; ``--gc default`` keeps the interpreter's collector settings.

Every figure is absolute, so on a shared machine compare runs made one after the other,
not with another day's; ``py-spy record --gil --threads --pid <this process>`` on it
gives the breakdown by part of the delivery path (``analysis.delivery_breakdown``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ["PEERS_WORKLOAD"] = "io"

import jobs
from systems.tidings import CHANNEL, SinkTwin

from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.clock import SystemClock
from tidings.core.model import Recipient
from tidings.runtime import build_runtime
from tidings.sandbox.core import SandboxConfig, SandboxCore

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def count_calls(target: Any, label: str, calls: Counter[str]) -> None:
    """Count every call of ``target``'s public coroutine methods (per instance)."""
    for name in dir(target):
        method = getattr(target, name, None)
        if name.startswith("_") or not asyncio.iscoroutinefunction(method):
            continue

        def counted(method: Callable[..., Awaitable[Any]] = method,
                    key: str = f"{label}.{name}") -> Callable[..., Awaitable[Any]]:
            async def call(*args: Any, **kwargs: Any) -> Any:
                calls[key] += 1
                return await method(*args, **kwargs)
            return call

        setattr(target, name, counted())


async def drain(config: Path, n: int, gc_mode: str) -> dict[str, Any]:
    runtime = await build_runtime(Settings.load(config))
    for first in range(0, n, 5000):
        await runtime.notify_many([
            NotifyRequest(key=jobs.key_of(i), recipient=Recipient(id=f"c{i}",
                                                                  email=f"r{i}@example.com"),
                          channels=[CHANNEL], template="bench")
            for i in range(first, min(n, first + 5000))])
    await runtime.close()
    clock = SystemClock()
    core = SandboxCore(SandboxConfig(quotas={CHANNEL: 1_000_000}), now=clock.now, seed=1)
    runtime = await build_runtime(Settings.load(config), clock=clock, migrate=False,
                                  providers={CHANNEL: SinkTwin(core=core, channel=CHANNEL,
                                                               clock=clock)})
    worker = runtime.worker(CHANNEL)
    calls: Counter[str] = Counter()
    count_calls(runtime.store, "store", calls)
    if runtime.transport is not runtime.store:
        count_calls(runtime.transport, "transport", calls)
    await jobs.io_round_trip(-1)  # the Redis pool is made before the clock starts
    collected = {"s": 0.0, "since": 0.0}

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collected["since"] = time.perf_counter()
        else:
            collected["s"] += time.perf_counter() - collected["since"]

    if gc_mode == "serving":
        # Imported here, so that --gc default also measures trees from before it.
        from tidings.processes.gc_tuning import serving_gc

        tuned: contextlib.AbstractContextManager[None] = serving_gc()
    else:
        tuned = contextlib.nullcontext()
    with tuned:
        gc.callbacks.append(timed)
        try:
            wall, cpu = time.perf_counter(), time.process_time()
            serving = asyncio.create_task(worker.run())
            # The worker's counters have no event to wait on: looked at every 20 ms.
            while worker.stats.accepted < n:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        finally:
            gc.callbacks.remove(timed)
        worker.stop()
        await serving
    await runtime.close()
    return {"store": runtime.settings.store.split(":", 1)[0], "n": n, "gc": gc_mode,
            "rate_per_s": round(n / wall), "cpu_us_per_delivery": round(cpu / n * 1e6, 1),
            "gc_us_per_delivery": round(collected["s"] / n * 1e6, 1),
            "commits": worker.stats.commits,
            "calls_per_1000": {k: round(v * 1000 / n, 1) for k, v in sorted(calls.items())}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--store", choices=["sqlite", "pg"], default="sqlite")
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--gc", choices=["serving", "default"], default="serving")
    args = parser.parse_args()
    tag = uuid.uuid4().hex[:8]
    # Keys of this script's own, deleted after: never another run's.
    jobs.IO_PREFIX = f"peers-one-worker:{tag}:"
    with tempfile.TemporaryDirectory() as folder:
        os.environ["PEERS_SINK"] = os.path.join(folder, "sink.log")
        database = f"tidings_bench_one_{tag}"
        if args.store == "sqlite":
            store = f"sqlite:///{folder}/one.db"
        else:
            import psycopg

            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{database}"')
            store = f"postgresql://postgres@127.0.0.1:5432/{database}"
        config = Path(folder) / "tidings.toml"
        config.write_text(f'store = "{store}"\n\n[channels.email]\nmax_in_flight = 10000\n\n'
                          '[channels.email.provider]\nkind = "sandbox-twin"\n')
        try:
            print(json.dumps(asyncio.run(drain(config, args.n, args.gc))))
        finally:
            import redis

            client = redis.Redis.from_url(jobs.REDIS_IO)
            keys = list(client.scan_iter(match=f"{jobs.IO_PREFIX}*", count=5000))
            for first in range(0, len(keys), 5000):
                client.delete(*keys[first:first + 5000])
            if args.store == "pg":
                import psycopg

                with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


if __name__ == "__main__":
    main()
