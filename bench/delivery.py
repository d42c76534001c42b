"""Delivery: N enqueued intents drained by K worker processes against the sandbox twin.

Set-up (not timed as the headline): a fresh SQLite file, N one-off intents made by
``runtime.notify_many`` in batches, each published on the ``email`` queue at once.

Measured: K spawned processes each ``build_runtime`` from the same settings on that
file and run ``Worker.run()`` on ``email``. Their provider is an in-process
``SandboxTwinProvider`` with no latency and a quota of 1,000,000/s; the channel has no
quota and ``max_in_flight`` 10,000, so no pacing limit binds. Every outcome is
committed before its message is acked (that is how the Worker works). The parent
starts them together and polls the ledger (an indexed count of accepted intents,
every 20 ms) until all N are accepted, then tells them to stop. ``rate_per_s`` = N /
(time from the start signal to the poll that saw N accepted).

Floor ("queue-only"): the same N messages on a fresh file, received and acked in
batches of the worker's batch size through the bare ``SqliteTransport`` by K processes,
with no ledger work at all. ``ratio`` = floor rate / tidings rate: the cost of the
ledger (claim, outcome, events) and of the worker's machinery.

Correctness: each worker process has its own sandbox twin core, so each reports its
own counts and the key -> receipt map of what its core accepted; the parent sums
them: accepted keys must equal N, no key accepted twice within a core nor across
cores, and every receipt in the ledger is the receipt the sandbox issued.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import queue
import sqlite3
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

from benchlib import (
    SPAWN,
    Report,
    cpu_seconds,
    fresh_file,
    mean,
    now_s,
    path_of,
    peak_rss_mb,
    per_s,
    rounded,
    source_revision,
    sqlite_url,
)
from pglib import count_accepted, is_pg, receipts_mismatched, sibling_pg
from profiling import ThreadProfiles, format_profile
from tidings.admission.intake import NotifyRequest
from tidings.admission.relay import relay_pass
from tidings.config.settings import Settings, WorkerSettings
from tidings.core.clock import SystemClock
from tidings.core.keys import notify_key
from tidings.core.model import Message, OutgoingMessage, Recipient
from tidings.providers.sandbox import SandboxTwinProvider
from tidings.runtime import build_runtime, open_store
from tidings.sandbox.core import SandboxConfig, SandboxCore
from tidings.stores.base import Store
from tidings.stores.sqlite import SqliteStore
from tidings.transports.base import Transport
from tidings.transports.open import is_store_queue, open_transport, redact_url, split_prefix

CHANNEL = "email"
SANDBOX_QUOTA = 1_000_000
MAX_IN_FLIGHT = 10_000
SEED_BATCH = 5_000
POLL_S = 0.02
STALL_S = 120.0  # no progress for this long: a worker is stuck, stop and say so
TARGETS = {"rate_per_s_min_one_process": 3_000}

#: The transport under test (``--transport``): "sql" (the store's own queue) or a broker
#: URL. Spawned children read it from the environment; a broker URL gets a key prefix per
#: store URL (``transport_for``), so the measured run and each floor have queues of their own.
TRANSPORT_ENV = "TIDINGS_BENCH_TRANSPORT"


def transport_for(url: str) -> str:
    transport = os.environ.get(TRANSPORT_ENV, "sql")
    if is_store_queue(transport):
        return transport
    plain, prefix = split_prefix(transport)
    tag = hashlib.sha256(url.encode()).hexdigest()[:12]
    return f"{plain}{'&' if '?' in plain else '?'}prefix={prefix}-bench-{tag}"


def settings_for(url: str) -> Settings:
    return Settings.parse({"store": url, "transport": transport_for(url),
                           "channels": {CHANNEL: {"max_in_flight": MAX_IN_FLIGHT,
                                                  "provider": {"kind": "sandbox-twin"}}}})


async def open_pair(url: str) -> tuple[Store, Transport]:
    """The store of ``url`` and the transport under test."""
    store, queue = await open_store(url)
    transport = await open_transport(transport_for(url), store_queue=queue)
    if transport is not queue:
        await queue.close()
    return store, transport


async def drop_broker(url: str) -> None:
    """Delete what a broker holds of this run (the store's queue needs nothing)."""
    if is_store_queue(transport_for(url)):
        return
    transport = await open_transport(transport_for(url))
    await transport.drop_all()
    await transport.close()


def request_key(i: int) -> str:
    return f"bench-{i:09d}"


def intent_key(i: int) -> str:
    return notify_key(request_key(i), CHANNEL)


# ---------------------------------------------------------------- set-up


async def seed_intents(url: str, n: int) -> Report:
    """N enqueued intents through ``notify_many``, in batches (with a broker: written to
    the outbox, then published by relay passes, timed apart)."""
    runtime = await build_runtime(settings_for(url))
    start = now_s()
    for first in range(0, n, SEED_BATCH):
        await runtime.notify_many([
            NotifyRequest(key=request_key(i),
                          recipient=Recipient(id=f"c{i:09d}", email=f"r{i}@example.com"),
                          channels=[CHANNEL], template="receipt")
            for i in range(first, min(n, first + SEED_BATCH))
        ])
    elapsed = now_s() - start
    relay: Report | None = None
    if not runtime.enqueue_in_store:
        relay_start = now_s()
        relayed = 0
        while relayed < n:
            moved = await relay_pass(runtime.store, runtime.transport, now=runtime.clock.now(),
                                     config=runtime.relay_config())
            if not moved:
                break
            relayed += moved
        relay_s = now_s() - relay_start
        relay = {"elapsed_s": rounded(relay_s), "rate_per_s": round(per_s(relayed, relay_s)),
                 "how": "relay_pass (claim a page, publish, mark enqueued) until done"}
    counts = await runtime.store.intent_counts()
    depth = await runtime.transport.depth(CHANNEL, now=runtime.clock.now())
    await runtime.close()
    if counts != {CHANNEL: {"enqueued": n}} or depth.ready != n:
        raise RuntimeError(f"seeding left {counts} and {depth.ready} ready messages")
    return {"elapsed_s": rounded(elapsed), "rate_per_s": round(per_s(n, elapsed)),
            "how": f"runtime.notify_many, {SEED_BATCH} requests per call",
            **({"relay": relay} if relay is not None else {})}


async def seed_messages(url: str, n: int) -> None:
    """N messages on the queue, as admission publishes them, with no intents behind."""
    store, transport = await open_pair(url)
    now = time.time()
    await store.migrate(now=now)
    for first in range(0, n, SEED_BATCH):
        await transport.publish(CHANNEL, [
            OutgoingMessage(message_id=intent_key(i), body=Message(key=intent_key(i)).encode())
            for i in range(first, min(n, first + SEED_BATCH))
        ], now=now)
    await transport.close()
    await store.close()


# ---------------------------------------------------------------- the worker processes


def worker_child(url: str, index: int, n: int, go: EventType, stop: EventType,
                 out: Queue[tuple[str, int, Any]], profile_top: int) -> None:
    try:
        report = asyncio.run(_work(url, index, n, go, stop, out, profile_top))
    except BaseException as exc:
        out.put(("error", index, f"{type(exc).__name__}: {exc}"))
        raise
    out.put(("done", index, report))


async def _work(url: str, index: int, n: int, go: EventType, stop: EventType,
                out: Queue[tuple[str, int, Any]], profile_top: int) -> Report:
    clock = SystemClock()
    core = SandboxCore(SandboxConfig(quotas={CHANNEL: SANDBOX_QUOTA}), now=clock.now, seed=index)
    provider = SandboxTwinProvider(core=core, channel=CHANNEL, clock=clock)
    runtime = await build_runtime(settings_for(url), clock=clock, providers={CHANNEL: provider},
                                  migrate=False)
    store = runtime.store
    worker = runtime.worker(CHANNEL, worker_id=f"bench-worker-{index}")
    profiles = ThreadProfiles(store.db) if profile_top and isinstance(store, SqliteStore) \
        else None
    out.put(("ready", index, None))
    if not await asyncio.to_thread(go.wait, 600.0):
        raise TimeoutError("no start signal")
    if profiles is not None:
        await profiles.start()
    cpu0 = cpu_seconds()
    task = asyncio.create_task(worker.run())
    while not task.done() and not stop.is_set():
        await asyncio.wait({task}, timeout=POLL_S)
    worker.stop()
    await task
    cpu = cpu_seconds() - cpu0
    if profiles is not None:
        await profiles.stop()
    await runtime.close()
    peak = peak_rss_mb()  # before the receipts map below, which is the benchmark's own
    sandbox = core.stats()["channels"][CHANNEL]
    receipts: dict[str, str] = {}
    for i in range(n):
        found = core.lookup(intent_key(i), CHANNEL)
        if found is not None:
            receipts[intent_key(i)] = found[1]
    stats = worker.stats
    return {
        "cpu_s": rounded(cpu),
        "peak_rss_mb": rounded(peak, 1),
        "worker": {"received": stats.received, "sent": stats.sent, "accepted": stats.accepted,
                   "duplicates": stats.duplicates, "lease_lost": stats.lease_lost,
                   "released": stats.released, "commits": stats.commits,
                   "claims": {str(k): v for k, v in stats.by_kind.items()},
                   "pacer_reservations": worker.pacer.reservations},
        "sandbox": {k: sandbox[k] for k in ("requests", "accepted", "deduplicated",
                                            "accepted_keys", "keys_accepted_twice",
                                            "refused_quota", "max_rate_1s")},
        "receipts": receipts,
        **({"profile": profiles.report(profile_top)} if profiles is not None else {}),
    }


def queue_child(url: str, index: int, go: EventType, out: Queue[tuple[str, int, Any]]) -> None:
    try:
        report = asyncio.run(_drain(url, index, go, out))
    except BaseException as exc:
        out.put(("error", index, f"{type(exc).__name__}: {exc}"))
        raise
    out.put(("done", index, report))


async def _drain(url: str, index: int, go: EventType, out: Queue[tuple[str, int, Any]]) -> Report:
    """Receive and ack until the queue is empty: the transport's work and nothing else."""
    store, transport = await open_pair(url)
    batch = WorkerSettings().batch_size
    visibility = WorkerSettings().visibility_s
    out.put(("ready", index, None))
    if not await asyncio.to_thread(go.wait, 600.0):
        raise TimeoutError("no start signal")
    cpu0 = cpu_seconds()
    received = 0
    while True:
        messages = await transport.receive(CHANNEL, max_messages=batch,
                                           visibility_s=visibility, now=time.time())
        if not messages:
            break
        await transport.ack(CHANNEL, [m.receipt for m in messages])
        received += len(messages)
    finished = now_s()
    cpu = cpu_seconds() - cpu0
    await transport.close()
    await store.close()
    return {"finished_at": finished, "received": received, "cpu_s": rounded(cpu),
            "peak_rss_mb": rounded(peak_rss_mb(), 1)}


# ---------------------------------------------------------------- the parent's side


class Children:
    """K spawned processes started together on one signal, reporting through a queue."""

    def __init__(self, target: Any, args_for: Any, k: int) -> None:
        self.go = SPAWN.Event()
        self.stop = SPAWN.Event()
        self.out: Queue[tuple[str, int, Any]] = SPAWN.Queue()
        self.processes = [SPAWN.Process(target=target, args=args_for(i, self), daemon=True)
                          for i in range(k)]
        self.reports: dict[int, Report] = {}

    def start(self) -> float:
        """Start every process, wait until each is ready, then signal go; return when."""
        for p in self.processes:
            p.start()
        ready = 0
        while ready < len(self.processes):
            kind, index, payload = self.out.get(timeout=120)
            if kind == "error":
                raise RuntimeError(f"process {index} failed while starting: {payload}")
            ready += kind == "ready"
        started = now_s()
        self.go.set()
        return started

    def collect(self) -> list[Report]:
        while len(self.reports) < len(self.processes):
            kind, index, payload = self.out.get(timeout=300)
            if kind == "error":
                raise RuntimeError(f"process {index} failed: {payload}")
            if kind == "done":
                self.reports[index] = payload
        for p in self.processes:
            p.join(timeout=60)
        return [self.reports[i] for i in range(len(self.processes))]

    def errors(self, wait_s: float = 15.0) -> list[str]:
        """Whatever the processes report within ``wait_s`` after being told to stop."""
        said: list[str] = []
        deadline = now_s() + wait_s
        while len(said) < len(self.processes) and now_s() < deadline:
            try:
                kind, index, payload = self.out.get(timeout=max(0.1, deadline - now_s()))
            except queue.Empty:
                break
            said.append(f"process {index}: {kind}"
                        + (f": {payload}" if kind == "error" else " (stopped cleanly)"))
        return said or ["nothing"]

    def alive(self) -> bool:
        return all(p.is_alive() for p in self.processes)

    def kill(self) -> None:
        for p in self.processes:
            if p.is_alive():
                p.kill()


def _accepted_count(conn: sqlite3.Connection) -> int:
    # Served by the intents_state (state, due_at) index: cheap next to intent_counts().
    (count,) = conn.execute("SELECT count(*) FROM intents WHERE state = 'accepted'").fetchone()
    return int(count)


def wait_all_accepted(url: str, n: int, children: Children) -> float:
    """Poll the ledger until ``n`` intents are accepted; return when that was seen."""
    conn: Any
    if is_pg(url):
        import psycopg

        conn = psycopg.connect(url, autocommit=True)
        counter: Any = count_accepted
    else:
        conn = sqlite3.connect(path_of(url), isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 15000")
        counter = _accepted_count
    last, progress_at = -1, now_s()
    try:
        while True:
            count = counter(conn)
            seen = now_s()
            if count >= n:
                return seen
            if count != last:
                last, progress_at = count, seen
            elif seen - progress_at > STALL_S or not children.alive():
                raise RuntimeError(f"stalled at {count} of {n} accepted "
                                   f"(processes alive: {children.alive()})")
            time.sleep(POLL_S)
    finally:
        conn.close()


def run_workers(url: str, n: int, k: int, profile_top: int) -> tuple[float, list[Report]]:
    children = Children(worker_child, lambda i, c: (url, i, n, c.go, c.stop, c.out, profile_top),
                        k)
    try:
        started = children.start()
        try:
            done = wait_all_accepted(url, n, children)
        except RuntimeError as exc:
            children.stop.set()
            raise RuntimeError(f"{exc}; the workers said: {children.errors()}") from None
        children.stop.set()
        return done - started, children.collect()
    finally:
        children.kill()


def run_queue_floor(url: str, k: int) -> tuple[float, list[Report]]:
    children = Children(queue_child, lambda i, c: (url, i, c.go, c.out), k)
    try:
        started = children.start()
        reports = children.collect()
        return max(r.pop("finished_at") for r in reports) - started, reports
    finally:
        children.kill()


async def ledger_check(url: str, n: int, receipts: dict[str, str]) -> Report:
    store, transport = await open_pair(url)
    counts = await store.intent_counts()
    depth = await transport.depth(CHANNEL, now=time.time())

    def mismatches(conn: sqlite3.Connection) -> int:
        wrong = 0
        for key, receipt in conn.execute("SELECT key, receipt FROM intents"):
            wrong += receipts.get(key) != receipt
        return wrong

    if isinstance(store, SqliteStore):
        wrong = await store.db.read(mismatches)
    else:
        wrong = await asyncio.to_thread(receipts_mismatched, url, receipts)
    await transport.close()
    await store.close()
    return {"ledger": counts, "messages_left": depth.ready + depth.delayed + depth.in_flight,
            "ledger_receipts_not_from_sandbox": wrong}


def run(*, n: int, processes: int, folder: Path, store: str | None, profile_top: int) -> Report:
    """Floor, tidings, floor again (the floor is the mean of the two runs)."""
    url = store or sqlite_url(folder / "delivery.db")
    pg = is_pg(url)
    floor_urls = [sibling_pg(url, f"floor_{i}") if pg else
                  sqlite_url(fresh_file(folder / f"queue-floor-{i}.db")) for i in (1, 2)]
    seeded = asyncio.run(seed_intents(url, n))
    for floor_url in floor_urls:
        asyncio.run(seed_messages(floor_url, n))

    floors = [run_queue_floor(floor_urls[0], processes)]
    elapsed, reports = run_workers(url, n, processes, 0)
    floors.append(run_queue_floor(floor_urls[1], processes))

    per_process = [{k: v for k, v in r.items() if k != "receipts"} for r in reports]
    union: dict[str, str] = {}
    for r in reports:
        union.update(r["receipts"])
    summed = sum(len(r["receipts"]) for r in reports)
    check = asyncio.run(ledger_check(url, n, union))
    accepted_keys = sum(r["sandbox"]["accepted_keys"] for r in reports)
    twice = sum(r["sandbox"]["keys_accepted_twice"] for r in reports)
    check.update(
        sandbox_accepted_keys=accepted_keys,
        sandbox_keys_accepted_twice=twice,
        keys_accepted_by_two_processes=summed - len(union),
        how="each worker process has its own sandbox twin core; its counts and the keys it "
            "accepted come back through a queue and are summed here",
    )
    check["ok"] = (accepted_keys == n and twice == 0 and summed == len(union) == n
                   and check["ledger"] == {CHANNEL: {"accepted": n}}
                   and check["messages_left"] == 0
                   and check["ledger_receipts_not_from_sandbox"] == 0)

    for dropped in (url, *floor_urls):
        asyncio.run(drop_broker(dropped))
    rate = per_s(n, elapsed)
    floor_rate = mean([per_s(n, floor_s) for floor_s, _ in floors])
    transport = transport_for(url)
    bare = ("PostgresTransport" if pg else "SqliteTransport") if is_store_queue(transport) \
        else "RedisStreamsTransport" if transport.startswith("redis") else transport.split(":")[0]
    cpu_total = sum(r["cpu_s"] for r in reports)
    report: Report = {
        "benchmark": "delivery",
        "n": n,
        "processes": processes,
        "store": url,
        "transport": redact_url(transport),
        "tidings": source_revision(),
        "rate_per_s": round(rate),
        "floor_rate_per_s": round(floor_rate),
        "ratio": rounded(floor_rate / rate, 2),
        "elapsed_s": rounded(elapsed),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in reports),
        "cpu_s": {"per_process": [r["cpu_s"] for r in reports], "total": rounded(cpu_total),
                  "per_delivery_us": rounded(cpu_total / n * 1e6, 1),
                  "cores_busy": rounded(cpu_total / elapsed, 2)},
        "workers": per_process,
        "floor": {"what": "queue-only: the same N messages received and acked through the "
                          f"bare {bare} by {processes} "
                          "process(es), no ledger work; "
                          "mean rate of a run before and a run after the measured one",
                  "elapsed_s": [rounded(floor_s) for floor_s, _ in floors],
                  "cpu_s": [[r["cpu_s"] for r in runs] for _, runs in floors],
                  "received": [[r["received"] for r in runs] for _, runs in floors]},
        "seed": seeded,
        "check": check,
        "settings": {"batch_size": WorkerSettings().batch_size, "max_in_flight": MAX_IN_FLIGHT,
                     "channel_quota": None, "sandbox_quota_per_s": SANDBOX_QUOTA,
                     "sandbox_latency": 0, "poll_s": POLL_S},
        "targets": TARGETS,
    }
    if profile_top and not pg:
        profile_url = sqlite_url(fresh_file(folder / "profiled.db"))
        asyncio.run(seed_intents(profile_url, n))
        profile_s, profiled = run_workers(profile_url, n, 1, profile_top)
        report["profile"] = {
            "n": n, "processes": 1, "elapsed_s": rounded(profile_s),
            "cpu_s": profiled[0]["cpu_s"],
            "note": "a separate one-process run under cProfile (slower); self time per thread",
            **profiled[0]["profile"]}
    return report


def summary(report: Report) -> str:
    check = report["check"]
    lines = [
        f"delivery of {report['n']:,} intents by {report['processes']} worker process(es), "
        f"store {report['store']}",
        f"  tidings at {report['tidings'].get('commit', '?')}"
        f"{' (src modified)' if report['tidings'].get('src_dirty') else ''}, "
        f"{report['tidings']['package']}",
        f"  tidings : {report['rate_per_s']:>8,} deliveries/s  ({report['elapsed_s']:.2f} s)",
        f"  floor   : {report['floor_rate_per_s']:>8,} messages/s    "
        f"({' and '.join(f'{s:.2f}' for s in report['floor']['elapsed_s'])} s before and "
        "after: queue-only receive+ack)",
        f"  ratio   : {report['ratio']:.2f}  (floor / tidings: what the ledger costs)",
        f"  CPU     : {report['cpu_s']['per_process']} s per process, "
        f"{report['cpu_s']['per_delivery_us']:.0f} µs per delivery, "
        f"{report['cpu_s']['cores_busy']:.2f} cores busy",
        f"  peak RSS: {report['peak_rss_mb']:.1f} MB (largest worker process)",
        f"  seeding : {report['seed']['rate_per_s']:,} intents/s through notify_many "
        f"(not part of the rate)",
        f"  check   : {'ok' if check['ok'] else 'FAILED'}: sandbox accepted "
        f"{check['sandbox_accepted_keys']:,} keys (summed over the processes' own twins), "
        f"{check['sandbox_keys_accepted_twice']} accepted twice, "
        f"{check['keys_accepted_by_two_processes']} by two processes; ledger {check['ledger']}, "
        f"{check['messages_left']} messages left, "
        f"{check['ledger_receipts_not_from_sandbox']} ledger receipts not from the sandbox",
    ]
    for i, w in enumerate(report["workers"]):
        lines.append(f"  worker {i}: {w['worker']['accepted']:,} accepted, "
                     f"{w['worker']['commits']} commits, {w['worker']['duplicates']} duplicates, "
                     f"{w['worker']['lease_lost']} leases lost, {w['cpu_s']:.2f} CPU s, "
                     f"{w['peak_rss_mb']:.0f} MB")
    if "profile" in report:
        profile = report["profile"]
        lines.append(f"  profile of a separate one-process run (cProfile, "
                     f"{profile['elapsed_s']:.2f} s):")
        lines.append(format_profile(profile))
    return "\n".join(lines)

