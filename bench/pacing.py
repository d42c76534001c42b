"""Pacing: K worker processes share one channel budget, judged by the sandbox's own log.

Set-up: a fresh store (a SQLite file in a temporary folder, or a throw-away database
``tidings_bench_<random>`` on the PostgreSQL server of ``--store postgresql://…``,
dropped at the end), ``ceil(quota * (seconds + 6) * 1.2)`` one-off intents on
``email`` made by ``runtime.notify_many`` in batches, and the sandbox HTTP server in
this (the parent) process with ``quotas={"email": quota}``, ``dedupe`` on and no
injected faults.

Steady phase: K spawned processes each ``build_runtime`` from the same settings
(channel ``email`` with ``quota = "<quota>/s"``, the default ``quota_safety``,
provider ``{kind = "sandbox", url = …}``) and run ``Worker.run()``; the pacer state
lives in the store, so the K processes share one budget. They run ``--seconds``.

429 phase: the next request the sandbox decides is answered 429 with
``Retry-After: 2`` (the benchmark's core forces one injected rate limit); then the
workers run on for the pause and 1.5 s more. From the sandbox's per-request arrival
log: how many requests, from any process, arrived within the pause
``(t429, t429 + 2)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import secrets
import tempfile
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from benchlib import SPAWN, Report, peak_rss_mb, rounded, source_revision, sqlite_url
from tidings.admission.intake import NotifyRequest
from tidings.config.settings import ChannelSettings, Settings
from tidings.core.model import Recipient
from tidings.runtime import build_runtime
from tidings.sandbox.core import SandboxAnswer, SandboxConfig, SandboxCore
from tidings.sandbox.server import serve

CHANNEL = "email"
SEED_BATCH = 5_000
PAUSE_S = 2.0
AFTER_PAUSE_S = 1.5
WARMUP_WINDOWS = 1  # full windows after the start skipped before "steady"


def settings_for(url: str, quota: int, sandbox_url: str) -> Settings:
    return Settings.parse({"store": url, "channels": {CHANNEL: {
        "quota": f"{quota}/s",
        "provider": {"kind": "sandbox", "url": sandbox_url},
    }}})


class LoggingCore(SandboxCore):
    """The sandbox core plus a per-request arrival log and a one-shot forced 429.

    Benchmark-only: the forced 429 is the core's own injected rate limit
    (``rate_limit=1.0``, ``retry_after_s=PAUSE_S``) for exactly one request that is
    not already over quota.
    """

    def __init__(self, config: SandboxConfig, *, now: Any) -> None:
        self.arrivals: list[float] = []
        self.force_429 = False
        self.forced_at: float | None = None
        self.forced = asyncio.Event()
        super().__init__(config, now=now)

    def handle(self, channel: str, key: str | None, to: str | None, *,
               problem: str | None = None) -> SandboxAnswer:
        at = self._now()
        if channel == CHANNEL:
            self.arrivals.append(at)
        if not self.force_429:
            return super().handle(channel, key, to, problem=problem)
        normal = self.config
        self.configure(dataclasses.replace(normal, rate_limit=1.0, retry_after_s=PAUSE_S))
        try:
            answer = super().handle(channel, key, to, problem=problem)
        finally:
            self.configure(normal)
        if answer.status == 429 and answer.retry_after == str(math.ceil(PAUSE_S)):
            self.force_429 = False
            self.forced_at = at
            self.forced.set()
        return answer


# ---------------------------------------------------------------- the store


def _pg_url_with_db(url: str, dbname: str) -> str:
    """``url`` (postgresql://user@host:port/db?query) naming database ``dbname``."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{dbname}"))


class Store:
    """A fresh store for one run; removed afterwards."""

    def __init__(self, store: str | None) -> None:
        self.given = store
        self.folder: Path | None = None
        self.pg_admin: str | None = None
        self.pg_db: str | None = None
        if store is None or store.startswith("sqlite:"):
            if store is None:
                self.folder = Path(tempfile.mkdtemp(prefix="tidings-bench-"))
                self.url = sqlite_url(self.folder / "pacing.db")
            else:
                self.url = store
        elif store.startswith(("postgresql:", "postgres:")):
            import psycopg

            self.pg_admin = _pg_url_with_db(store, "postgres")
            self.pg_db = f"tidings_bench_{secrets.token_hex(4)}"
            with psycopg.connect(self.pg_admin, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.pg_db}"')
            self.url = _pg_url_with_db(store, self.pg_db)
        else:
            raise SystemExit(f"--store: {store!r} is neither sqlite:///… nor postgresql://…")

    @property
    def shown(self) -> str:
        if self.pg_db is not None:
            return f"postgresql (throw-away database {self.pg_db}, dropped)"
        return self.url

    def drop(self, keep: bool) -> None:
        if self.pg_db is not None and self.pg_admin is not None and not keep:
            import psycopg

            for attempt in range(30):  # a busy shared server may refuse a client for a while
                try:
                    with psycopg.connect(self.pg_admin, autocommit=True) as conn:
                        conn.execute(f'DROP DATABASE IF EXISTS "{self.pg_db}" WITH (FORCE)')
                    break
                except psycopg.OperationalError:
                    if attempt == 29:
                        raise
                    time.sleep(1.0)
        if self.folder is not None and not keep:
            import shutil

            shutil.rmtree(self.folder, ignore_errors=True)


# ---------------------------------------------------------------- the worker processes


def worker_child(url: str, quota: int, sandbox_url: str, index: int, go: EventType,
                 stop: EventType, out: Queue[tuple[str, int, Any]]) -> None:
    try:
        report = asyncio.run(_work(url, quota, sandbox_url, index, go, stop, out))
    except BaseException as exc:
        out.put(("error", index, f"{type(exc).__name__}: {exc}"))
        raise
    out.put(("done", index, report))


async def _work(url: str, quota: int, sandbox_url: str, index: int, go: EventType,
                stop: EventType, out: Queue[tuple[str, int, Any]]) -> Report:
    runtime = await build_runtime(settings_for(url, quota, sandbox_url), migrate=False)
    worker = runtime.worker(CHANNEL, worker_id=f"bench-pacer-{index}")
    out.put(("ready", index, None))
    if not await asyncio.to_thread(go.wait, 600.0):
        raise TimeoutError("no start signal")
    task = asyncio.create_task(worker.run())
    while not task.done() and not stop.is_set():
        await asyncio.wait({task}, timeout=0.05)
    worker.stop()
    await task
    await runtime.close()
    s = worker.stats
    return {"peak_rss_mb": rounded(peak_rss_mb(), 1),
            "received": s.received, "sent": s.sent, "accepted": s.accepted,
            "rate_limited": s.rate_limited, "released": s.released,
            "pacer_reservations": worker.pacer.reservations,
            "pacer_forfeited": worker.pacer.forfeited}


# ---------------------------------------------------------------- the parent's side


async def seed(url: str, n: int, quota: int) -> float:
    runtime = await build_runtime(settings_for(url, quota, "http://127.0.0.1:9"))
    start = time.monotonic()
    try:
        for first in range(0, n, SEED_BATCH):
            await runtime.notify_many([
                NotifyRequest(key=f"pace-{i:09d}",
                              recipient=Recipient(id=f"c{i:09d}", email=f"r{i}@example.com"),
                              channels=[CHANNEL], template="receipt")
                for i in range(first, min(n, first + SEED_BATCH))])
    finally:
        await runtime.close()
    return time.monotonic() - start


async def _get(out: Queue[tuple[str, int, Any]], wait_s: float) -> tuple[str, int, Any]:
    return await asyncio.to_thread(out.get, True, wait_s)


async def measure(url: str, *, processes: int, quota: int, seconds: float) -> Report:
    core = LoggingCore(SandboxConfig(quotas={CHANNEL: quota}, dedupe=True), now=time.time)
    server = await serve(core=core)
    go, stop = SPAWN.Event(), SPAWN.Event()
    out: Queue[tuple[str, int, Any]] = SPAWN.Queue()
    children = [SPAWN.Process(target=worker_child, daemon=True,
                              args=(url, quota, server.url, i, go, stop, out))
                for i in range(processes)]
    try:
        for p in children:
            p.start()
        ready = 0
        while ready < processes:
            kind, index, payload = await _get(out, 120)
            if kind == "error":
                raise RuntimeError(f"worker {index} failed while starting: {payload}")
            ready += kind == "ready"
        started = time.time()
        go.set()
        await asyncio.sleep(seconds)
        steady_end = time.time()
        core.force_429 = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(core.forced.wait(), 10)
        forced_at = core.forced_at
        await asyncio.sleep(PAUSE_S + AFTER_PAUSE_S)
        stop.set()
        reports: dict[int, Report] = {}
        while len(reports) < processes:
            kind, index, payload = await _get(out, 120)
            if kind == "error":
                raise RuntimeError(f"worker {index} failed: {payload}")
            if kind == "done":
                reports[index] = payload
        for p in children:
            await asyncio.to_thread(p.join, 30)
    finally:
        for p in children:
            if p.is_alive():
                p.kill()
        await server.close()

    stats = core.stats()["channels"][CHANNEL]
    counted = {int(k): v for k, v in stats["requests_per_window"].items()}
    # The core lists only windows that saw a request: fill the silent ones with 0.
    span = range(min(counted), max(counted) + 1) if counted else range(0)
    windows: dict[int, int] = {w: counted.get(w, 0) for w in span}
    accepted: dict[int, int] = {int(k): v for k, v in stats["accepted_per_window"].items()}
    first_full = math.ceil(started) + WARMUP_WINDOWS
    steady = [w for w in sorted(windows) if w >= first_full and w + 1 <= steady_end]
    steady_req = [windows[w] for w in steady]
    steady_acc = [accepted.get(w, 0) for w in steady]

    pause: Report = {"forced_429": forced_at is not None}
    inside = None
    if forced_at is not None:
        later = [t for t in core.arrivals if t > forced_at]
        inside = sum(1 for t in later if t < forced_at + PAUSE_S)
        pause.update(
            requests_inside=inside,
            inside_offsets_ms=[round((t - forced_at) * 1000, 1)
                               for t in later if t < forced_at + PAUSE_S][:50],
            inside_first_50ms=sum(1 for t in later if t < forced_at + 0.05),
            first_request_after_s=rounded(later[0] - forced_at) if later else None,
            first_request_at_or_after_pause_s=rounded(
                min((t for t in later if t >= forced_at + PAUSE_S), default=math.nan)
                - forced_at),
            requests_after_pause=sum(1 for t in later if t >= forced_at + PAUSE_S))
    safety = ChannelSettings().quota_safety
    return {
        "processes": processes,
        "quota_per_s": quota,
        "quota_safety": safety,
        "paced_at_per_s": rounded(quota * safety, 1),
        "max_rate_1s": stats["max_rate_1s"],
        "violations": stats["quota_violations"],
        "utilisation": rounded(sum(steady_req) / len(steady_req) / quota) if steady else None,
        "utilisation_accepted": (rounded(sum(steady_acc) / len(steady_acc) / quota)
                                 if steady else None),
        "steady_windows": len(steady),
        "steady_min_max": [min(steady_req), max(steady_req)] if steady else None,
        "windows": [windows[w] for w in sorted(windows)],
        "pause_requests_inside": inside,
        "pause_s": PAUSE_S,
        "pause": pause,
        "peak_rss_mb": max(r["peak_rss_mb"] for r in reports.values()),
        "workers": [reports[i] for i in range(processes)],
        "sandbox": {k: stats[k] for k in ("requests", "accepted", "deduplicated",
                                          "refused_quota", "refused_injected",
                                          "keys_accepted_twice")},
        "steady_s": rounded(steady_end - started),
    }


def run(*, store: str | None, processes: int, quota: int, seconds: float,
        keep: bool) -> Report:
    where = Store(store)
    try:
        n = math.ceil(quota * (seconds + PAUSE_S + AFTER_PAUSE_S + 2) * 1.2)
        seed_s = asyncio.run(seed(where.url, n, quota))
        report = asyncio.run(measure(where.url, processes=processes, quota=quota,
                                     seconds=seconds))
    finally:
        where.drop(keep)
    return {"benchmark": "pacing", "store": where.shown, "tidings": source_revision(),
            **report, "intents_seeded": n, "seed_s": rounded(seed_s)}


def summary(report: Report) -> str:
    pause = report["pause"]
    return "\n".join([
        f"pacing: {report['processes']} worker processes on one channel, quota "
        f"{report['quota_per_s']}/s (paced at {report['paced_at_per_s']}/s), "
        f"store {report['store']}",
        f"  max_rate_1s  : {report['max_rate_1s']}  violations: {report['violations']}",
        f"  utilisation  : {report['utilisation']} of the quota over "
        f"{report['steady_windows']} steady windows (accepted: "
        f"{report['utilisation_accepted']})",
        f"  windows      : {report['windows']}",
        f"  429 pause    : {report['pause_requests_inside']} requests inside the "
        f"{report['pause_s']} s pause; {pause}",
        f"  peak RSS     : {report['peak_rss_mb']} MB (largest worker)",
    ])

