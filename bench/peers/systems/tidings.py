"""tidings (this checkout) on SQLite or PostgreSQL — settings used and why.

The store is a fresh SQLite file (WAL) in the run's folder, or a throw-away PostgreSQL
database ``tidings_bench_<random>``; the transport is the store's own queue table, so
a job is an intent row plus a queue row written in one transaction. ``tidings-pg-redis``
keeps the ledger in PostgreSQL and the queue in Redis Streams (``transport =
"redis://…/15?prefix=<run's own>"``, the Redis database the Redis peers use, under a
key prefix of the run's own, deleted at teardown): a job is an intent row written
``selected`` (the outbox), then a stream entry published by the relay, then marked
``enqueued``; the producer runs the relay loop (as ``tidings scheduler`` does beside
admission) and ends once every job is on the stream. The driver writes
the settings file (``PEERS_TIDINGS_CONFIG``, TOML) for each workload:

* every workload: channel ``email``; default worker settings (outcomes committed in
  batches before their messages are acked); the reconciler runs in every worker process
  every 5 s (``tidings worker``'s default).
* throughput: ``max_in_flight = 10000`` and no quota (no pacing limit binds, as for the
  peers). The provider is the in-process sandbox twin with a 1,000,000/s quota wrapped
  so that every accepted send also calls the shared in-process sink; the worker is this
  module's ``worker`` command, which is ``tidings worker`` (``service.serve_worker``,
  reconciler included) with that provider injected: ``tidings worker`` cannot be given
  a twin with a quota above the twin's default 1,000/s from settings.
* pacing: ``quota = "50/s"`` with the default ``quota_safety`` (the share of the quota
  the pacer aims at; the report records its value) and ``max_in_flight = 64``; the
  pacer's state is in the store, so the P worker processes
  share one budget. Provider ``{kind = "sandbox", url = <the sandbox>}``; the worker is
  the real ``tidings worker --channel email --config <file>``.
* crash: as pacing without a quota, and ``lease_s = 10``, ``visibility_s = 15``
  (defaults 30 s and 60 s): a killed process's leases expire and the reconciler
  resolves them by asking the sandbox (lookup by idempotency key) within seconds,
  shortened as for the peers so a run ends.
* P processes are P ``tidings worker`` instances; the crash workload kills and restarts
  an instance.
* io: as throughput, and each send first makes one Redis round trip
  (``jobs.io_round_trip``: ``INCR`` on a per-job key, a pool of its own per process).
* producer: ``runtime.notify_many`` with 5,000 requests per call (one transaction each);
  with ``PEERS_ENQUEUE=single`` (the io workload's end-to-end phase) ``runtime.notify``
  once per job from 200 concurrent tasks, concurrent calls sharing a transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys

import jobs

from systems._producer import main
from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.model import Recipient, SendRequest
from tidings.core.outcomes import Outcome
from tidings.providers.sandbox import SandboxTwinProvider
from tidings.runtime import Runtime, build_runtime
from tidings.sandbox.core import SandboxConfig, SandboxCore

CONFIG = os.environ.get("PEERS_TIDINGS_CONFIG", "tidings.toml")
CHANNEL = "email"
BATCH = 5_000
SINGLE = os.environ.get("PEERS_ENQUEUE") == "single"
CALLERS = 200


class SinkTwin(SandboxTwinProvider):
    """The in-process sandbox twin; every send it accepts also goes to the sink. In the
    io workload each send first makes its one Redis round trip (``jobs.io_round_trip``,
    a pool per process), as every peer's handler does."""

    async def send(self, request: SendRequest) -> Outcome:
        i = int(request.key.split(":", 1)[0].removeprefix("job-"))
        if jobs.WORKLOAD == "io":
            await jobs.io_round_trip(i)
        outcome = await super().send(request)
        if getattr(outcome, "receipt", None):
            jobs.sink(i)
        return outcome


async def enqueue(ids: range) -> None:
    runtime = await build_runtime(Settings.load(CONFIG))
    try:
        if runtime.enqueue_in_store:
            await _produce(runtime, ids)
        else:
            await _produce_with_relay(runtime, ids)
    finally:
        await runtime.close()


async def _produce(runtime: Runtime, ids: range) -> None:
    if SINGLE:
        await _one_call_per_job(runtime, ids)
        return
    items = list(ids)
    for first in range(0, len(items), BATCH):
        await runtime.notify_many([
            NotifyRequest(key=jobs.key_of(i),
                          recipient=Recipient(id=f"c{i}", email=f"r{i}@example.com"),
                          channels=[CHANNEL], template="bench")
            for i in items[first:first + BATCH]])


async def _produce_with_relay(runtime: Runtime, ids: range) -> None:
    """With a broker: the calls write the outbox and return, and the relay loop (what
    ``tidings scheduler`` runs beside admission) publishes it meanwhile; the producer
    ends once no intent is left ``selected`` (the workers' reconcilers may publish some
    of them too), so its time is the time to the broker."""
    from tidings.admission.relay import relay_loop

    stopping = asyncio.Event()

    async def no_pauses() -> list[str]:
        return []

    relay = asyncio.create_task(relay_loop(
        runtime.store, runtime.transport, runtime.relay_config(), clock=runtime.clock,
        stopping=stopping, paused_channels=no_pauses))
    try:
        await _produce(runtime, ids)
        while (await runtime.store.intent_counts()).get(CHANNEL, {}).get("selected", 0):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), timeout=0.05)
    finally:
        stopping.set()
        await relay


async def _one_call_per_job(runtime: Runtime, ids: range) -> None:
    """``runtime.notify`` once per job, from ``CALLERS`` concurrent tasks (as a web app's
    requests each send one event); concurrent calls share a transaction (group commit)."""
    taken = iter(ids)

    async def caller() -> None:
        for i in taken:
            await runtime.notify(key=jobs.key_of(i), recipient={
                "id": f"c{i}", "email": f"r{i}@example.com"}, channels=[CHANNEL],
                template="bench")

    await asyncio.gather(*(caller() for _ in range(CALLERS)))


async def serve() -> None:
    from tidings.core.clock import SystemClock
    from tidings.processes.service import serve_worker

    clock = SystemClock()
    core = SandboxCore(SandboxConfig(quotas={CHANNEL: 1_000_000}), now=clock.now,
                       seed=os.getpid())
    provider = SinkTwin(core=core, channel=CHANNEL, clock=clock)
    runtime = await build_runtime(Settings.load(CONFIG), clock=clock,
                                  providers={CHANNEL: provider}, migrate=False)
    async with runtime:
        await serve_worker(runtime, CHANNEL)


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        asyncio.run(serve())
    else:
        main(enqueue, f"runtime.notify per job from {CALLERS} concurrent tasks" if SINGLE
             else "runtime.notify_many, 5,000 requests per call")
