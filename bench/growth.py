"""Growth: how every hot path of tidings moves as the retained ledger grows.

    .venv/bin/python bench/growth.py --store postgresql://postgres@127.0.0.1:5432/postgres \\
        --sizes 0,1M,10M
    .venv/bin/python bench/growth.py --store sqlite:///var/tmp/growth/ --sizes 0,1M
    .venv/bin/python bench/growth.py --smoke --store sqlite:///tmp/growth-smoke/

For each size N (``--sizes``), a database holding a month of ledger of N intents is
filled (``growth_fill``: server-side ``INSERT … SELECT`` chunks, resumable), or reused
when one of that size and schema version exists: ``tidings_growth_<size>_v<schema>``
on the PostgreSQL server of ``--store``, or that file in the SQLite folder of
``--store`` (``--refill`` makes it again). Then, on that ledger, in this order:

=====================  ==============================================================
``status_s``           ``tidings status --json`` as a process (start-up included), median
``dashboard_s``        ``GET /ui`` (the dashboard's overview) through the app in-process
``inspect_s``          ``Runtime.inspect(recipient=cust_00000042)``: ~50 deliveries
``reconcile_s``        one ``Reconciler.run_pass`` (leases, stuck and lost publishes,
                       uncertain sends, orphans)
``notify_p50/p99_ms``  ``Runtime.notify`` of one email intent, one caller in a loop
``notify50_p99_ms``    the same from 50 concurrent callers sharing the runtime
``admit_per_s``        admission of one campaign occurrence of ``--recipients``
                       recipients (``Scheduler.run_pass`` until done), on the store's
                       own queue
``drain_per_s``        one worker process drains what admission and notify enqueued,
                       against the sandbox twin answering every send after 2 ms (an
                       io-like provider); rate from start to empty queue
``claim_p50/p99_ms``   each ``intent_claim_many`` call of that worker (a batch)
``prune_s``            retention's prune of the oldest day (``recovery.retention.prune``
                       repeated until nothing more is due), with ``prune_lock_s``: the
                       longest a relation lock that blocks writers (share mode or
                       stronger) was seen held by a client session (``pg_locks``
                       sampled every 5 ms; the longest of any mode is in the JSON),
                       and ``probe_max_ms``: the
                       longest a probe write transaction (an event insert, rolled back;
                       on SQLite ``BEGIN IMMEDIATE``) waited during the prune
``bytes_per_intent``   database bytes / retained intents (before the run's writes)
``dead_tuples…``      ``n_dead_tup`` of messages and intents right after the drain (and
                       ``--settle-s`` later, with autovacuum's counts; PostgreSQL)
=====================  ==============================================================

The measurements write to the ledger (admission, notify and the drain add
``recipients`` + notifies intents; the prune removes the oldest day): a reused
database is measured as it is then, and the report names its intents count. Ratios
are against the empty ledger of the same run: time at N / time at 0, or rate at 0 /
rate at N (above 1 is slower either way). Printed as a table; the JSON report and a
PNG plot go to ``--out``. A size already in the report is not measured again unless
``--remeasure``.

``--budget-min M`` stops cleanly between chunks of the fill and between sizes; the next
run goes on from there. ``--smoke``: sizes 0 and 100,000, small measurements, no timing
judged; it checks the fill's row counts against the plan and that every figure was
measured (exit 2 otherwise). ``tests/integration/test_bench_growth.py`` runs it on both stores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import growth_fill as gf
import pglib
import tidings
from benchlib import SPAWN, source_revision

CHANNELS = ("email", "sms")
SEND_LATENCY_MS = 2.0
VIEWER_SCOPE = "viewer"

FIGURES: dict[str, dict[str, str]] = {
    # name: unit, and "rate" (higher is better) or "time" (lower is better)
    "admit_per_s": {"unit": "intents/s", "kind": "rate"},
    "drain_per_s": {"unit": "deliveries/s", "kind": "rate"},
    "claim_p50_ms": {"unit": "ms", "kind": "time"},
    "claim_p99_ms": {"unit": "ms", "kind": "time"},
    "notify_p50_ms": {"unit": "ms", "kind": "time"},
    "notify_p99_ms": {"unit": "ms", "kind": "time"},
    "notify50_p99_ms": {"unit": "ms", "kind": "time"},
    "status_s": {"unit": "s", "kind": "time"},
    "dashboard_s": {"unit": "s", "kind": "time"},
    "inspect_s": {"unit": "s", "kind": "time"},
    "reconcile_s": {"unit": "s", "kind": "time"},
    "prune_s": {"unit": "s", "kind": "time"},
    "prune_lock_s": {"unit": "s", "kind": "time"},
    "probe_max_ms": {"unit": "ms", "kind": "time"},
    "bytes_per_intent": {"unit": "B", "kind": "time"},
    "dead_tuples_after_drain": {"unit": "rows", "kind": "time"},
}
#: Figures that do not exist on a store (no sampled pg_locks, no dead tuples on SQLite),
#: and at the empty ledger (no bytes per intent of nothing, no day to prune).
NOT_ON = {"sqlite": {"prune_lock_s", "dead_tuples_after_drain"}}
NOT_AT_ZERO = {"bytes_per_intent"}


def log(message: str) -> None:
    print(f"[{datetime.now(UTC).strftime('%H:%M:%S')}] {message}", flush=True)


def parse_size(text: str) -> int:
    t = text.strip().lower().replace("_", "")
    mult = {"k": 1_000, "m": 1_000_000}.get(t[-1:], 1)
    return int(float(t[:-1] if mult > 1 else t) * mult)


def size_label(n: int) -> str:
    if n and n % 1_000_000 == 0:
        return f"{n // 1_000_000}m"
    if n and n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


def schema_version(store: str) -> int:
    folder = Path(tidings.__file__).parent / "stores" / "sql" / store / "migrations"
    return max(int(p.name.split("_", 1)[0]) for p in folder.glob("*.sql"))


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def r3(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(x, digits)


# ---------------------------------------------------------------- where the ledgers live


class Target:
    """One store kind: where a size's database is, how to make, reach and drop it."""

    def __init__(self, store: str, prefix: str) -> None:
        self.prefix = prefix
        if pglib.is_pg(store):
            self.kind = "postgresql"
            self.server = store
            self.folder = None
        elif store.startswith("sqlite:///"):
            self.kind = "sqlite"
            self.server = None
            folder = Path(store[len("sqlite:///") - 1:])
            self.folder = folder if folder.suffix != ".db" else folder.parent
        else:
            raise SystemExit("--store: a postgresql:// server URL or sqlite:///folder/")
        self.dialect = gf.Dialect(self.kind)
        self.schema = schema_version(self.kind)

    def name(self, size: int) -> str:
        return f"{self.prefix}_{size_label(size)}_v{self.schema}"

    def url(self, size: int) -> str:
        if self.server is not None:
            return pglib._with_db(self.server, self.name(size))
        assert self.folder is not None
        return f"sqlite:///{self.folder / (self.name(size) + '.db')}"

    def path(self, size: int) -> Path:
        assert self.folder is not None
        return self.folder / (self.name(size) + ".db")

    def exists(self, size: int) -> bool:
        if self.server is None:
            return self.path(size).exists()
        with pglib._admin(self.server) as admin:
            return pglib._exists(admin, self.name(size))

    def drop(self, size: int) -> None:
        if self.server is None:
            for suffix in ("", "-wal", "-shm"):
                with suppress(FileNotFoundError):
                    Path(str(self.path(size)) + suffix).unlink()
            return
        from psycopg import sql as pgsql
        with pglib._admin(self.server) as admin:
            admin.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                pgsql.Identifier(self.name(size))))

    def create(self, size: int) -> None:
        if self.server is None:
            assert self.folder is not None
            self.folder.mkdir(parents=True, exist_ok=True)
        else:
            from psycopg import sql as pgsql
            with pglib._admin(self.server) as admin:
                admin.execute(pgsql.SQL("CREATE DATABASE {}").format(
                    pgsql.Identifier(self.name(size))))
        pglib.migrate(self.url(size))

    def connect(self, size: int) -> Any:
        if self.server is None:
            return gf.sqlite_connect(str(self.path(size)))
        import psycopg
        return psycopg.connect(self.url(size))


# ---------------------------------------------------------------- fill


def fill(target: Target, size: int, *, refill: bool, budget: gf.Budget) -> dict[str, Any]:
    if refill and target.exists(size):
        log(f"{target.name(size)}: --refill, dropping it")
        target.drop(size)
    if not target.exists(size):
        log(f"{target.name(size)}: creating (migrations up to {target.schema:04d})")
        target.create(size)
    conn = target.connect(size)
    try:
        filler = gf.Filler(target.dialect, conn, log)
        anchor = filler.ensure_meta(size, time.time(), target.schema)
        plan = gf.make_plan(size, anchor)
        if filler.meta().get("filled") == "1":
            log(f"{target.name(size)}: filled already (anchor "
                f"{datetime.fromtimestamp(anchor, UTC):%Y-%m-%d %H:%M}), reused")
            return {"reused": True, "done": True, "anchor": anchor}
        log(f"{target.name(size)}: filling {size:,} intents in {len(plan.segments)} "
            f"segments, chunks of {gf.CHUNK[target.kind]:,}")
        result = filler.run(plan, budget)
        info = result.as_dict()
        if result.done:
            log(f"{target.name(size)}: filled, {result.intents - result.resumed_from:,} "
                f"intents in {result.seconds:.1f} s ({info['intents_per_s']:,}/s)"
                + (f", resumed from {result.resumed_from:,}" if result.resumed_from else ""))
        return {"reused": False, "anchor": anchor, **info}
    finally:
        conn.close()


def check_fill(target: Target, size: int) -> dict[str, Any]:
    """The fill's row counts against the plan's (the smoke's check)."""
    conn = target.connect(size)
    try:
        anchor = float(gf.Filler(target.dialect, conn, log).meta()["anchor"])
        want = gf.expected_rows(gf.make_plan(size, anchor))
        got = gf.count_rows(conn, list(want))
    finally:
        conn.close()
    wrong = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
    return {"ok": not wrong, "rows": got, "wrong": wrong}


# ---------------------------------------------------------------- the runtime


def settings_dict(url: str) -> dict[str, Any]:
    return {"store": url,
            "channels": {c: {"provider": {"kind": "sandbox-twin"}, "max_in_flight": 64}
                         for c in CHANNELS}}


def toml_of(url: str) -> str:
    lines = [f'store = "{url}"']
    for c in CHANNELS:
        lines += [f"[channels.{c}]", "max_in_flight = 64", f"[channels.{c}.provider]",
                  'kind = "sandbox-twin"']
    return "\n".join(lines) + "\n"


async def build(url: str, **kwargs: Any) -> Any:
    from tidings.config.settings import Settings
    from tidings.runtime import build_runtime

    return await build_runtime(Settings.parse(settings_dict(url)), migrate=False, **kwargs)


async def timed(fn: Callable[[], Awaitable[Any]], reps: int) -> tuple[float, Any]:
    """The median wall time of ``reps`` calls, and the last call's answer."""
    times, answer = [], None
    for _ in range(reps):
        started = time.perf_counter()
        answer = await fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), answer


# ---------------------------------------------------------------- the reads


def status_cli(url: str, reps: int) -> float:
    folder = Path(tempfile.mkdtemp(prefix="tidings-growth-"))
    try:
        (folder / "tidings.toml").write_text(toml_of(url))
        tidings_bin = Path(sys.executable).with_name("tidings")
        times = []
        for _ in range(reps):
            started = time.perf_counter()
            done = subprocess.run([str(tidings_bin), "status", "--json", "--config",
                                   str(folder / "tidings.toml")],
                                  capture_output=True, text=True, timeout=900, check=False)
            times.append(time.perf_counter() - started)
            if done.returncode != 0:
                raise RuntimeError(f"tidings status failed: {done.stderr[-2000:]}")
            json.loads(done.stdout)
        return statistics.median(times)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def reads(url: str, reps: int) -> dict[str, Any]:
    import httpx

    from tidings.api import create_app
    from tidings.api.tokens import new_token

    rt = await build(url)
    try:
        text, row = new_token(name="growth bench", scopes=[VIEWER_SCOPE], now=time.time())
        await rt.store.api_token_insert(row)
        app = create_app(rt, resume_on_start=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://growth.test") as client:
            async def page() -> int:
                answer = await client.get("/ui", headers={"Authorization": f"Bearer {text}"})
                if answer.status_code != 200:
                    raise RuntimeError(f"GET /ui: {answer.status_code} {answer.text[:300]}")
                return len(answer.content)
            dashboard_s, page_bytes = await timed(page, reps)
        await app.state.ctx.admission.close()
        # What the overview's snapshot reads, each call once: where its time goes.
        now = time.time()
        store = rt.store
        parts: dict[str, float] = {}
        for name, call in (
                ("intent_summary", lambda: store.intent_summary(now=now, since=now - 300.0)),
                ("intent_counts", store.intent_counts), ("event_counts", store.event_counts),
                ("occurrence_list", store.occurrence_list),
                ("intent_age_span", store.intent_age_span),
                ("digest_pending", store.digest_pending),
                ("queue_depth", lambda: rt.transport.depth("email", now=now))):
            parts[name], _ = await timed(call, 1)
        inspect_s, found = await timed(lambda: rt.inspect(recipient=gf.INSPECTED), reps)
        reconciler = rt.reconciler()
        reconcile_s, result = await timed(lambda: reconciler.run_pass(now=time.time()), reps)
    finally:
        await rt.close()
    return {"dashboard_s": dashboard_s, "dashboard_bytes": page_bytes,
            "snapshot_calls_s": {k: round(v, 4) for k, v in parts.items()},
            "inspect_s": inspect_s,
            "inspect_deliveries": len(found), "reconcile_s": reconcile_s,
            "reconcile": {k: v for k, v in result.__dict__.items() if v}}


# ---------------------------------------------------------------- notify


async def notify_calls(url: str, run_id: str, calls: int, callers: int,
                       pool: int) -> dict[str, Any]:
    rt = await build(url)
    try:
        async def one(tag: str, i: int) -> float:
            r = 1 + (i * 7919) % pool
            started = time.perf_counter()
            await rt.notify(key=f"growth-{run_id}-{tag}-{i}",
                            recipient={"id": gf.recipient_id(r), "email": f"c{r}@example.com"},
                            channels=["email"], template="receipt", data={"order": i})
            return (time.perf_counter() - started) * 1000.0

        for i in range(10):  # warm-up: connections, statements
            await one("warm", i)
        single = [await one("one", i) for i in range(calls)]

        async def caller(c: int) -> list[float]:
            return [await one(f"many{c}", i) for i in range(max(1, calls // callers))]
        many = [x for xs in await asyncio.gather(*(caller(c) for c in range(callers)))
                for x in xs]
    finally:
        await rt.close()
    return {"notify_p50_ms": pct(single, 0.5), "notify_p99_ms": pct(single, 0.99),
            "notify50_p50_ms": pct(many, 0.5), "notify50_p99_ms": pct(many, 0.99),
            "notify_calls": len(single), "notify50_calls": len(many),
            "enqueued": 10 + len(single) + len(many)}


# ---------------------------------------------------------------- admission


async def admission(url: str, run_id: str, recipients: int) -> dict[str, Any]:
    from tidings.admission.audience import GeneratorAudience
    from tidings.admission.campaign import Campaign
    from tidings.core.cron import Schedule
    from tidings.core.model import Recipient

    def members() -> Any:
        return (Recipient(id=gf.recipient_id(i), email=f"c{i}@example.com",
                          data={"first": f"C{i}"}) for i in range(1, recipients + 1))

    campaign = Campaign(name=f"growth-adm-{run_id}", schedule=Schedule("0 0 * * *", "UTC"),
                        channels=("email",), template="growth-news", version=1,
                        audience=GeneratorAudience(members), expires_after_s=3 * 86400.0,
                        grace_s=2 * 86400.0)
    rt = await build(url, campaigns=[campaign])
    try:
        scheduler = rt.scheduler()
        admitted = passes = members = 0
        started = time.perf_counter()
        while True:
            result = await scheduler.run_pass(now=time.time())
            admitted += result.admitted
            members += result.admitted + result.skipped + result.suppressed
            passes += 1
            if not result.more:
                break
        seconds = time.perf_counter() - started
    finally:
        await rt.close()
    if members != recipients:
        raise RuntimeError(f"admission went through {members} of {recipients} recipients")
    # Recipients whose address the fill's bounces suppressed are skipped, as they should.
    return {"admit_per_s": recipients / seconds, "admit_s": seconds, "admit_passes": passes,
            "admitted": admitted, "suppressed": members - admitted}


# ---------------------------------------------------------------- delivery


def worker_child(url: str, go: Any, stop: Any, out: Any) -> None:
    try:
        out.put(("done", asyncio.run(_work(url, go, stop, out))))
    except BaseException as exc:
        out.put(("error", f"{type(exc).__name__}: {exc}"))
        raise


async def _work(url: str, go: Any, stop: Any, out: Any) -> dict[str, Any]:
    from tidings.core.clock import SystemClock
    from tidings.providers.sandbox import SandboxTwinProvider
    from tidings.sandbox.core import LatencySpec, SandboxConfig, SandboxCore

    clock = SystemClock()
    core = SandboxCore(SandboxConfig(
        quotas={"email": 1_000_000},
        latency={"email": LatencySpec(median_ms=SEND_LATENCY_MS, p99_ms=SEND_LATENCY_MS)}),
        now=clock.now, seed=1)
    provider = SandboxTwinProvider(core=core, channel="email", clock=clock)
    rt = await build(url, clock=clock, providers={"email": provider})
    store = rt.store
    claims: list[float] = []
    claim = store.intent_claim_many

    async def timed_claim(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await claim(*args, **kwargs)
        finally:
            claims.append((time.perf_counter() - started) * 1000.0)

    store.intent_claim_many = timed_claim
    worker = rt.worker("email", worker_id="growth-worker")
    out.put(("ready", None))
    if not await asyncio.to_thread(go.wait, 600.0):
        raise TimeoutError("no start signal")
    task = asyncio.create_task(worker.run())
    while not task.done() and not stop.is_set():
        await asyncio.wait({task}, timeout=0.05)
    worker.stop()
    await task
    await rt.close()
    return {"claim_p50_ms": pct(claims, 0.5), "claim_p99_ms": pct(claims, 0.99),
            "claim_calls": len(claims), "accepted": worker.stats.accepted,
            "sandbox_accepted": core.stats()["channels"]["email"]["accepted"]}


class Ledger:
    """Small reads of the database under test, from the parent."""

    def __init__(self, target: Target, size: int) -> None:
        self.target = target
        self.conn = target.connect(size)
        if target.kind == "postgresql":
            self.conn.autocommit = True

    def one(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        sql = sql if self.target.kind == "postgresql" else sql.replace("%s", "?")
        row = self.conn.execute(sql, params).fetchone()
        if self.target.kind == "sqlite":
            self.conn.commit()
        return row[0] if row else None

    def ready(self, before: float) -> int:
        return int(self.one("SELECT count(*) FROM messages WHERE queue = 'email' "
                            "AND available_at < %s", (before,)))

    def intents(self) -> int:
        return int(self.one("SELECT count(*) FROM intents"))

    def nbytes(self) -> int:
        if self.target.kind == "postgresql":
            return int(self.one("SELECT pg_database_size(current_database())"))
        page_count = int(self.one("PRAGMA page_count"))
        page_size = int(self.one("PRAGMA page_size"))
        return page_count * page_size

    def tables(self) -> dict[str, int]:
        if self.target.kind == "sqlite":
            try:
                rows = self.conn.execute("SELECT name, sum(pgsize) FROM dbstat "
                                         "GROUP BY name").fetchall()
            except sqlite3.OperationalError:
                return {}
            return {str(n): int(b) for n, b in rows if b > 1 << 20}
        rows = self.conn.execute("""
            SELECT coalesce(p.relname, c.relname), sum(pg_total_relation_size(c.oid))
            FROM pg_class c
            LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
            LEFT JOIN pg_class p ON p.oid = i.inhparent
            WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace
            GROUP BY 1""").fetchall()
        return {str(n): int(b) for n, b in rows if b > 1 << 20}

    def vacuum_stats(self) -> dict[str, Any]:
        if self.target.kind == "sqlite":
            return {"freelist_pages": int(self.one("PRAGMA freelist_count"))}
        rows = self.conn.execute(
            "SELECT relname, n_live_tup, n_dead_tup, autovacuum_count, autoanalyze_count, "
            "last_autovacuum IS NOT NULL FROM pg_stat_user_tables "
            "WHERE relname IN ('messages', 'intents', 'pacer_state', 'publish_leases')"
        ).fetchall()
        return {str(r[0]): {"live": r[1], "dead": r[2], "autovacuums": r[3],
                            "autoanalyzes": r[4]} for r in rows}

    def close(self) -> None:
        self.conn.close()


def drain(target: Target, size: int, expected: int, anchor: float, settle_s: float
          ) -> dict[str, Any]:
    ledger = Ledger(target, size)
    # Work in flight from the fill becomes visible a day after the anchor; all of this
    # run's messages are visible well before.
    before = min(time.time() + 3600.0, anchor + gf.DAY_S - 1.0)
    try:
        ready = ledger.ready(before)
        go, stop, out = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
        process = SPAWN.Process(target=worker_child, args=(target.url(size), go, stop, out),
                                daemon=True)
        process.start()
        kind, payload = out.get(timeout=180)
        if kind != "ready":
            raise RuntimeError(f"worker: {payload}")
        vacuum_before = ledger.vacuum_stats()
        started = time.perf_counter()
        go.set()
        last, last_change = ready, time.perf_counter()
        while True:
            time.sleep(0.05)
            left = ledger.ready(before)
            now = time.perf_counter()
            if left != last:
                last, last_change = left, now
            if left == 0:
                break
            if now - last_change > 120.0 or not process.is_alive():
                stop.set()
                raise RuntimeError(f"drain stalled with {left} messages left")
        seconds = time.perf_counter() - started
        stop.set()
        kind, payload = out.get(timeout=120)
        process.join(timeout=60)
        if kind != "done":
            raise RuntimeError(f"worker: {payload}")
        after = ledger.vacuum_stats()
        time.sleep(settle_s)
        later = ledger.vacuum_stats()
    finally:
        ledger.close()
    # Notifies to an address the fill's bounces suppressed end "suppressed", unsent.
    if payload["accepted"] < 0.9 * expected:
        raise RuntimeError(f"drain: {payload['accepted']} accepted of {expected}")
    return {"drain_per_s": ready / seconds, "drain_s": seconds, "drained": ready, **payload,
            "vacuum": {"before": vacuum_before, "after_drain": after, "settled": later}}


def dead_after(vacuum: dict[str, Any]) -> int | None:
    after = vacuum["after_drain"]
    if "messages" not in after:
        return None
    return int(after["messages"]["dead"]) + int(after.get("intents", {}).get("dead", 0))


# ---------------------------------------------------------------- retention


#: Lock modes that block a writer's RowExclusiveLock (an insert, update or delete).
BLOCKING_MODES = frozenset({"ShareLock", "ShareRowExclusiveLock", "ExclusiveLock",
                            "AccessExclusiveLock"})


class LockSampler:
    """Relation locks of other client sessions, sampled from a probe connection: the
    longest any one (session, relation, mode) was seen held without a gap, and the
    longest of those in a mode that blocks writers (``BLOCKING_MODES``)."""

    def __init__(self, url: str, period_s: float = 0.005) -> None:
        self.url, self.period = url, period_s
        self.stop = threading.Event()
        self.longest: tuple[float, str] = (0.0, "")
        self.blocking: tuple[float, str] = (0.0, "")
        self.samples = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LockSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def _run(self) -> None:
        import psycopg
        seen: dict[tuple[Any, ...], tuple[float, float]] = {}
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stop.is_set():
                now = time.perf_counter()
                rows = conn.execute("""
                    SELECT l.pid, coalesce(c.relname, l.relation::text), l.mode
                    FROM pg_locks l
                    JOIN pg_stat_activity a ON a.pid = l.pid
                    LEFT JOIN pg_class c ON c.oid = l.relation
                    WHERE l.locktype = 'relation' AND l.granted
                      AND l.pid <> pg_backend_pid() AND a.backend_type = 'client backend'
                      AND c.relnamespace = 'public'::regnamespace
                      AND l.database = (SELECT oid FROM pg_database
                                        WHERE datname = current_database())""").fetchall()
                self.samples += 1
                current = {tuple(r) for r in rows}
                for key in current:
                    first, last = seen.get(key, (now, now))
                    if now - last > 5 * self.period + 0.05:  # a gap: a new hold
                        first = now
                    seen[key] = (first, now)
                    held = now - first
                    if held > self.longest[0]:
                        self.longest = (held, f"{key[2]} on {key[1]}")
                    if key[2] in BLOCKING_MODES and held > self.blocking[0]:
                        self.blocking = (held, f"{key[2]} on {key[1]}")
                time.sleep(self.period)


class WriteProbe:
    """A write transaction every 20 ms on a connection of its own; the longest wait."""

    def __init__(self, target: Target, size: int) -> None:
        self.target, self.size = target, size
        self.stop = threading.Event()
        self.worst = 0.0
        self.count = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> WriteProbe:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def _run(self) -> None:
        if self.target.kind == "sqlite":
            conn = sqlite3.connect(str(self.target.path(self.size)), timeout=120,
                                   isolation_level=None)
            statements = ["BEGIN IMMEDIATE", "ROLLBACK"]
        else:
            import psycopg
            conn = psycopg.connect(self.target.url(self.size), autocommit=True)
            statements = ["BEGIN", "INSERT INTO events (key, channel, type, at) "
                          "VALUES ('growth/probe', '-', 'probe', extract(epoch from now()))",
                          "SELECT state FROM intents WHERE key = 'growth/probe'", "ROLLBACK"]
        try:
            while not self.stop.is_set():
                started = time.perf_counter()
                for sql in statements:
                    conn.execute(sql)
                self.worst = max(self.worst, time.perf_counter() - started)
                self.count += 1
                time.sleep(0.02)
        finally:
            conn.close()


async def _prune_day(url: str, first_day: float) -> dict[str, Any]:
    from tidings.core.retention import EVENT_SKEW_S
    from tidings.recovery.retention import PruneCounts, RetentionConfig, prune

    rt = await build(url)
    try:
        span = await rt.store.intent_age_span()
        if span is None:
            return {"prune_s": 0.0, "pruned": {}, "prunes": 0}
        # The oldest day of the month filled; at the empty ledger (whose oldest intents
        # are this run's) a prune with nothing old enough: its fixed cost.
        oldest_day = (span[0] // gf.DAY_S) * gf.DAY_S
        if span[0] > time.time() - 2 * gf.DAY_S:
            oldest_day = first_day
        cutoff = oldest_day + gf.DAY_S + EVENT_SKEW_S + 120.0
        now = time.time()
        config = RetentionConfig(intents_s=now - cutoff, occurrences_s=now - cutoff)
        total = PruneCounts()
        prunes = 0
        started = time.perf_counter()
        while prunes < 200:
            report = await prune(rt.store, config, now=now)
            prunes += 1
            total += report.pruned
            if not report.pruned.any():
                break
        seconds = time.perf_counter() - started
    finally:
        await rt.close()
    return {"prune_s": seconds, "prunes": prunes,
            "pruned": {"intents": total.intents, "events": total.events,
                       "occurrences": total.occurrences, "partitions": total.partitions},
            "day": datetime.fromtimestamp(oldest_day, UTC).strftime("%Y-%m-%d")}


def retention(target: Target, size: int, first_day: float) -> dict[str, Any]:
    url = target.url(size)
    with WriteProbe(target, size) as probe:
        if target.kind == "postgresql":
            with LockSampler(url) as sampler:
                result = asyncio.run(_prune_day(url, first_day))
            result["prune_lock_s"] = sampler.blocking[0]
            result["prune_lock"] = sampler.blocking[1]
            result["longest_lock_s"] = sampler.longest[0]
            result["longest_lock"] = sampler.longest[1]
            result["lock_samples"] = sampler.samples
        else:
            result = asyncio.run(_prune_day(url, first_day))
    result["probe_max_ms"] = probe.worst * 1000.0
    result["probes"] = probe.count
    return result


# ---------------------------------------------------------------- one size


def measure(target: Target, size: int, args: argparse.Namespace, fill_info: dict[str, Any]
            ) -> dict[str, Any]:
    url = target.url(size)
    run_id = str(int(time.time()))
    anchor = float(fill_info["anchor"])
    pool = max(1_000, size // gf.RECIPIENT_SHARE)
    ledger = Ledger(target, size)
    try:
        intents = ledger.intents()
        nbytes = ledger.nbytes()
        tables = ledger.tables()
    finally:
        ledger.close()
    out: dict[str, Any] = {"label": size_label(size), "size": size, "intents": intents,
                           "database": target.name(size), "bytes": nbytes, "tables": tables,
                           "fill": fill_info}
    steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("status", lambda: {"status_s": status_cli(url, args.reps)}),
        ("reads", lambda: asyncio.run(reads(url, args.reps))),
        ("notify", lambda: asyncio.run(notify_calls(url, run_id, args.notify_calls,
                                                    args.callers, pool))),
        ("admission", lambda: asyncio.run(admission(url, run_id, args.recipients))),
        ("delivery", lambda: drain(target, size, out["admission"]["admitted"]
                                   + out["notify"]["enqueued"], anchor, args.settle_s)),
        ("retention", lambda: retention(target, size, gf.make_plan(0, anchor).first_day)),
    ]
    for name, step in steps:
        started = time.perf_counter()
        log(f"  {target.name(size)}: {name} …")
        out[name] = step()
        log(f"  {target.name(size)}: {name} done in {time.perf_counter() - started:.1f} s")
    f = {
        "admit_per_s": out["admission"]["admit_per_s"],
        "drain_per_s": out["delivery"]["drain_per_s"],
        "claim_p50_ms": out["delivery"]["claim_p50_ms"],
        "claim_p99_ms": out["delivery"]["claim_p99_ms"],
        "notify_p50_ms": out["notify"]["notify_p50_ms"],
        "notify_p99_ms": out["notify"]["notify_p99_ms"],
        "notify50_p99_ms": out["notify"]["notify50_p99_ms"],
        "status_s": out["status"]["status_s"],
        "dashboard_s": out["reads"]["dashboard_s"],
        "inspect_s": out["reads"]["inspect_s"],
        "reconcile_s": out["reads"]["reconcile_s"],
        "prune_s": out["retention"]["prune_s"],
        "prune_lock_s": out["retention"].get("prune_lock_s"),
        "probe_max_ms": out["retention"]["probe_max_ms"],
        "bytes_per_intent": nbytes / intents if intents else None,
        "dead_tuples_after_drain": dead_after(out["delivery"]["vacuum"]),
    }
    out["figures"] = {k: r3(v, 4) for k, v in f.items()}
    return out


# ---------------------------------------------------------------- report


def ratios(report: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    sizes = report["sizes"]
    base = sizes.get("0")
    out: dict[str, dict[str, float | None]] = {}
    if base is None:
        return out
    for label, entry in sizes.items():
        row: dict[str, float | None] = {}
        for name, spec in FIGURES.items():
            a, b = base["figures"].get(name), entry["figures"].get(name)
            if a is None or b is None or a == 0 or b == 0:
                row[name] = None
            elif spec["kind"] == "rate":
                row[name] = round(a / b, 2)
            else:
                row[name] = round(b / a, 2)
        out[label] = row
    return out


def table(report: dict[str, Any]) -> str:
    sizes = sorted(report["sizes"].values(), key=lambda s: s["size"])
    rat = report.get("ratios", {})
    head = f"{'figure':<26}" + "".join(f"{s['label'] + ' (' + format(s['intents'], ',') + ')':>26}"
                                       for s in sizes)
    lines = [head]
    for name, spec in FIGURES.items():
        cells = []
        for s in sizes:
            v = s["figures"].get(name)
            r = rat.get(s["label"], {}).get(name)
            text = "-" if v is None else (f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}")
            if r is not None and s["size"]:
                text += f" ({r:.2f}x)"
            cells.append(f"{text:>26}")
        lines.append(f"{name + ' ' + spec['unit']:<26}" + "".join(cells))
    fills = [f"{s['label']}: {s['fill'].get('intents_per_s', 0):,}/s" for s in sizes
             if not s["fill"].get("reused") and s["size"]]
    if fills:
        lines.append("fill rate (intents with their events): " + ", ".join(fills))
    lines.append("ratio = slowdown against the empty ledger of this run (time N / time 0, "
                 "rate 0 / rate N)")
    return "\n".join(lines)


def markdown(report: dict[str, Any]) -> str:
    """The report's figures as a Markdown table, ratios in brackets (for RESULTS.md)."""
    sizes = sorted(report["sizes"].values(), key=lambda s: s["size"])
    rat = report.get("ratios", {})
    lines = ["| figure | " + " | ".join(f"{s['label']} ({s['intents']:,} intents)"
                                       for s in sizes) + " |",
             "|---|" + "---:|" * len(sizes)]
    for name, spec in FIGURES.items():
        cells = []
        for s in sizes:
            v = s["figures"].get(name)
            r = rat.get(s["label"], {}).get(name)
            text = "–" if v is None else (f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}")
            if r is not None and s["size"]:
                text += f" ({r:.2f}×)"
            cells.append(text)
        lines.append(f"| `{name}` {spec['unit']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_report(report: dict[str, Any], out: Path, plot_python: str | None) -> None:
    report["ratios"] = ratios(report)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, sort_keys=False) + "\n")
    png = out.with_suffix(".png")
    python = plot_python or sys.executable
    done = subprocess.run([python, str(Path(__file__).with_name("growth_plot.py")), str(out),
                           str(png)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        log(f"no plot ({python}): {done.stderr.strip().splitlines()[-1:]}; "
            "give --plot-python an interpreter with matplotlib")
    else:
        log(f"report {out}, plot {png}")


def missing_figures(report: dict[str, Any], kind: str) -> list[str]:
    missing = []
    for label, entry in report["sizes"].items():
        for name in FIGURES:
            if name in NOT_ON.get(kind, set()) or (name in NOT_AT_ZERO and not entry["size"]):
                continue
            if entry["figures"].get(name) is None:
                missing.append(f"{label}:{name}")
    return missing


# ---------------------------------------------------------------- main


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", default=None,
                   help="postgresql://user@host:port/anydb (the server: databases "
                        "<prefix>_<size>_v<schema> are made on it) or sqlite:///folder/")
    p.add_argument("--sizes", default="0,1M,10M",
                   help="ledger sizes in intents, e.g. 0,1M,10M (default %(default)s)")
    p.add_argument("--recipients", type=parse_size, default=100_000,
                   help="recipients of the admitted occurrence (default %(default)s)")
    p.add_argument("--notify-calls", type=int, default=1000,
                   help="notify calls of the one caller, and in all of the 50 "
                        "(default %(default)s)")
    p.add_argument("--callers", type=int, default=50, help="concurrent notify callers")
    p.add_argument("--reps", type=int, default=3, help="runs of each read; the median")
    p.add_argument("--settle-s", type=float, default=20.0,
                   help="wait after the drain before reading dead tuples again")
    p.add_argument("--refill", action="store_true",
                   help="drop and fill again a database of that size that exists")
    p.add_argument("--fill-only", action="store_true", help="fill, measure nothing")
    p.add_argument("--remeasure", action="store_true",
                   help="measure sizes the report at --out already holds")
    p.add_argument("--budget-min", type=float, default=None,
                   help="stop cleanly after this many minutes; a rerun goes on")
    p.add_argument("--out", type=Path, default=None,
                   help="the JSON report (the PNG beside it); default "
                        "bench/growth-results/<store>.json")
    p.add_argument("--plot-python", default=None,
                   help="an interpreter with matplotlib, if this one has none")
    p.add_argument("--prefix", default="tidings_growth",
                   help="database (file) name prefix (default %(default)s)")
    p.add_argument("--drop", action="store_true", help="drop the databases at the end")
    p.add_argument("--markdown", type=Path, default=None, metavar="REPORT",
                   help="print a report's figures as a Markdown table, and do nothing else")
    p.add_argument("--smoke", action="store_true",
                   help="sizes 0 and 100k, small measurements; checks the fill's rows "
                        "and that every figure was measured (exit 2 if not)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.markdown is not None:
        print(markdown(json.loads(args.markdown.read_text())))
        return 0
    if args.smoke:
        args.sizes, args.recipients, args.notify_calls = "0,100k", 2_000, 100
        args.callers, args.reps, args.settle_s, args.refill, args.drop = 10, 1, 1.0, True, True
    if args.store is None:
        raise SystemExit("--store: a postgresql:// server URL or sqlite:///folder/")
    target = Target(args.store, args.prefix)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    out = args.out or (Path(tempfile.mkdtemp(prefix="tidings-growth-smoke-")) / "smoke.json"
                       if args.smoke else
                       Path(__file__).with_name("growth-results") / f"{target.kind}.json")
    budget = gf.Budget(args.budget_min)
    report: dict[str, Any] = {"benchmark": "growth", "store": target.kind, "sizes": {}}
    if out.exists() and not args.remeasure and not args.smoke:
        old = json.loads(out.read_text())
        if old.get("schema") == target.schema:
            report = old
    report.update({"schema": target.schema, "date": datetime.now(UTC).strftime("%Y-%m-%d"),
                   "tidings": source_revision(), "figures": FIGURES,
                   "settings": {"recipients": args.recipients,
                                "notify_calls": args.notify_calls, "callers": args.callers,
                                "reps": args.reps, "send_latency_ms": SEND_LATENCY_MS,
                                "os_cpus": os.cpu_count()}})
    failed = False
    try:
        failed = run_sizes(target, sizes, args, report, out, budget)
    finally:
        if args.drop:
            for size in sizes:
                target.drop(size)
    if args.smoke:
        missing = missing_figures(report, target.kind)
        if missing:
            log(f"smoke: figures not measured: {', '.join(missing)}")
            failed = True
        print(json.dumps({"smoke": "failed" if failed else "ok", "missing": missing}))
    return 2 if failed else 0


def run_sizes(target: Target, sizes: list[int], args: argparse.Namespace,
              report: dict[str, Any], out: Path, budget: gf.Budget) -> bool:
    """Fill and measure each size in turn; whether a smoke check failed."""
    failed = False
    for size in sizes:
        label = size_label(size)
        if budget.spent():
            log(f"--budget-min spent before {label}; run again to go on")
            break
        started = time.perf_counter()
        info = fill(target, size, refill=args.refill, budget=budget)
        if not info["done"]:
            break
        if args.smoke:
            check = check_fill(target, size)
            log(f"  fill check: {'ok' if check['ok'] else 'WRONG ' + str(check['wrong'])}")
            failed |= not check["ok"]
        info["wall_s"] = round(time.perf_counter() - started, 1)
        if args.fill_only or (label in report["sizes"] and not args.remeasure):
            continue
        if budget.spent():
            log(f"--budget-min spent before measuring {label}; run again to go on")
            break
        report["sizes"][label] = measure(target, size, args, info)
        write_report(report, out, args.plot_python)
        print(table(report), flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
