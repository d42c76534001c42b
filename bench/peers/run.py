"""tidings side by side with Celery, Dramatiq, taskiq, arq, RQ and procrastinate.

    bash bench/peers/setup.sh                       # once: bench/peers/.venv
    bench/peers/.venv/bin/python bench/peers/run.py throughput [--n 20000] [--processes 2] --json
    bench/peers/.venv/bin/python bench/peers/run.py io         [--n 20000] [--processes 2] --json
    bench/peers/.venv/bin/python bench/peers/run.py pacing     [--n 1000]  [--processes 4] --json
    bench/peers/.venv/bin/python bench/peers/run.py crash      [--n 5000]  [--processes 2] --json
    bench/peers/.venv/bin/python bench/peers/run.py all --json  # the four, one after another

Each workload runs every system in turn, A B C … A B C … (``--repeat``, default 2), on
the same machine, against the same Redis (db 15, flushed before each run) and
PostgreSQL (a throw-away database per run). Workers are started as their users start
them (the system's own CLI, production settings: ``systems/<name>.py``). Their peak
RSS is sampled (psutil, every 0.2 s, every process of each worker instance's tree).

throughput  N jobs whose handler calls an in-process sink (an O_APPEND write of
            "<id> <time>" to one file). Phase 1: the producer enqueues N jobs with no
            worker running (enqueue rate). Phase 2: P worker processes drain that
            backlog (processing rate = N / first to last job done). Phase 3, on a fresh
            queue: P workers already running (warmed up by 2P jobs), the producer
            enqueues N (end-to-end rate = N / producer start to last job done). A phase
            still running --phase-cap seconds after its first job is cut there and
            measured on the jobs done by then.
            tidings runs with its ledger committed before ack; its last job counts as
            done when the ledger holds N accepted intents, not when it was sent.
io          As throughput, with real I/O: every handler (tidings: its provider) makes one
            round trip to the same Redis (INCR on a per-job key, a connection pool of
            its own per process) before the sink, as a provider call is a network round
            trip. Phase 1 enqueues in bulk where the system has a bulk API; phase 3's
            producer makes one enqueue call per job (tidings: notify() per job from 200
            concurrent tasks), as an application sends events. The per-job Redis counts
            witness repeats beside the sink.
pacing      N jobs through the sandbox HTTP provider (quota 50/s, dedupe on), each
            system with its own rate-limit feature where it has one. From the
            sandbox's per-second log: highest count in a 1-second window, windows over
            quota, utilisation of the quota.
crash       N jobs to the sandbox (quota 1,000,000/s, dedupe OFF, so a second
            acceptance of a key is counted); every 2 s one worker process is SIGKILLed
            and restarted. From the sandbox: lost (keys never accepted) and keys
            accepted twice or more. --latency-ms gives the sandbox a provider latency,
            so that fast systems are still sending when the kills come.

Results go to ``--out`` (default bench/peers/results/) as <workload>.json;
``bench/peers/report.py`` turns them into bench/RESULTS.md and its plots.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg
import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import analysis  # noqa: E402 - after the path above
from catalog import BIN, REDIS_URL, SYSTEMS, Context, System  # noqa: E402

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_START = ["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1", "--port",
               "6379", "--save", "", "--appendonly", "no", "--dir", "/var/lib/redis",
               "--logfile", "/var/log/redis/ci.log"]
DEFAULTS = {"throughput": (20_000, 2), "io": (20_000, 2), "pacing": (1_000, 4),
            "crash": (5_000, 2)}
QUOTA = 50
CRASH_QUOTA = 1_000_000
KILL_EVERY_S = 2.0
KILL_PHASE_MAX_S = 45.0
STALL_S = 30.0
CRASH_STALL_S = 80.0  # recovery: RQ finds abandoned jobs after its 65 s heartbeat TTL
SETTLE_S = 12.0
PACING_CAP_S = 60.0   # 3 × the 20 s that 1,000 jobs take at exactly 50/s
CRASH_CAP_S = 180.0
POLL_S = 0.1

Report = dict[str, Any]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- services


def ensure_services(need_pg: bool) -> None:
    """Redis on 127.0.0.1:6379 and PostgreSQL on 127.0.0.1:5432, started if down."""
    r = redis.Redis.from_url(REDIS_URL)
    try:
        r.ping()
    except redis.ConnectionError:
        log("redis is down: starting it")
        subprocess.run(REDIS_START, check=True)
        _wait(lambda: _pings(r), "redis")
    if need_pg and subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432"],
                                  check=False).returncode != 0:
        log("postgresql is down: starting it")
        cluster = sorted(os.listdir("/etc/postgresql"))[-1]
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", cluster, "main", "start"],
                       check=True)
        _wait(lambda: subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432"],
                                     check=False).returncode == 0, "postgresql")


def _pings(r: redis.Redis) -> bool:
    try:
        return bool(r.ping())
    except redis.ConnectionError:
        return False


def _wait(ready: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not come up within {timeout:.0f} s")
        time.sleep(0.2)


def create_db(prefix: str) -> tuple[str, str]:
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name, f"postgresql://postgres@127.0.0.1:5432/{name}"


def drop_db(name: str) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# ---------------------------------------------------------------- the sandbox


class Sandbox:
    """``tidings sandbox`` in a process of its own, configured and read over HTTP."""

    def __init__(self, folder: Path) -> None:
        config = folder / "sandbox.json"
        config.write_text(json.dumps({"quotas": {"email": CRASH_QUOTA}}))
        self.process = subprocess.Popen(
            [str(BIN / "tidings"), "sandbox", "--port", "0", "--config", str(config)],
            stdout=subprocess.PIPE, stderr=open(folder / "sandbox.log", "w"),  # noqa: SIM115
            text=True, start_new_session=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if "listening on" not in line:
            raise SystemExit(f"the sandbox did not start: {line!r}")
        self.url = line.rsplit(" ", 1)[1].strip()
        self.http = httpx.Client(base_url=self.url, timeout=30)

    def configure(self, *, quota: int, dedupe: bool, latency_ms: float = 0.0) -> None:
        latency = ({"email": {"median_ms": latency_ms, "p99_ms": latency_ms * 3}}
                   if latency_ms > 0 else {})
        self.http.post("/v1/config", json={"quotas": {"email": quota}, "dedupe": dedupe,
                                           "latency": latency}).raise_for_status()
        self.http.post("/v1/reset").raise_for_status()

    def email(self) -> Report:
        stats: Report = self.http.get("/v1/stats").raise_for_status().json()
        return stats["channels"]["email"]

    def close(self) -> None:
        self.http.close()
        self.process.terminate()
        self.process.wait(10)


# ---------------------------------------------------------------- worker instances


@dataclass
class Instances:
    """The worker instances of one run: started, sampled for RSS, killed, stopped."""

    commands: list[list[str]]
    env: dict[str, str]
    logs: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    peak_total_mb: float = 0.0
    peak_process_mb: float = 0.0
    kills: list[Report] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _sampler: threading.Thread | None = None

    def _spawn(self, index: int) -> subprocess.Popen[bytes]:
        out = open(self.logs / f"instance-{index}.log", "ab")  # noqa: SIM115
        return subprocess.Popen(self.commands[index], cwd=HERE, env=self.env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def start(self) -> None:
        self.processes = [self._spawn(i) for i in range(len(self.commands))]
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _tree(self) -> list[psutil.Process]:
        procs: list[psutil.Process] = []
        for p in self.processes:
            with suppress(psutil.Error):
                root = psutil.Process(p.pid)
                procs.extend([root, *root.children(recursive=True)])
        return procs

    def _sample(self) -> None:
        while not self._stop.is_set():
            total, biggest = 0, 0
            for proc in self._tree():
                with suppress(psutil.Error):
                    rss = proc.memory_info().rss
                    total += rss
                    biggest = max(biggest, rss)
            self.peak_total_mb = max(self.peak_total_mb, total / 2**20)
            self.peak_process_mb = max(self.peak_process_mb, biggest / 2**20)
            self._stop.wait(0.2)

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.processes)

    def kill_one(self, index: int, mode: str, at: float) -> None:
        """SIGKILL instance ``index`` (and restart it) or one pool process of it."""
        p = self.processes[index]
        if mode == "child":
            with suppress(psutil.Error):
                kids = [c for c in psutil.Process(p.pid).children()
                        if "tracker" not in " ".join(c.cmdline())]
                if kids:
                    victim = sorted(kids, key=lambda c: c.pid)[len(self.kills) % len(kids)]
                    victim.kill()
                    self.kills.append({"at": at, "pid": victim.pid, "what": "pool process"})
                    return
        with suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        self.kills.append({"at": at, "pid": p.pid, "what": "instance"})
        self.processes[index] = self._spawn(index)

    def stop(self) -> None:
        for p in self.processes:
            with suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self.processes:
            with suppress(subprocess.TimeoutExpired):
                p.wait(max(0.1, deadline - time.monotonic()))
        for p in self.processes:
            with suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)  # the group: stragglers and orphans too
            with suppress(subprocess.TimeoutExpired):
                p.wait(5)
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join()


# ---------------------------------------------------------------- one run of one system


class Run:
    """A system's run folder, its backend state, its environment and its producer."""

    def __init__(self, system: System, workload: str, n: int, processes: int, root: Path,
                 sandbox: Sandbox, phase_cap_s: float = 30.0, profile: bool = False) -> None:
        self.system = system
        self.profile = profile
        self.phase_cap_s = phase_cap_s
        self.cap_s = phase_cap_s if phase_cap_s > 0 else 900.0
        self.workload = workload
        self.n = n
        self.processes = processes
        self.folder = Path(tempfile.mkdtemp(prefix=f"{system.name}-{workload}-", dir=root))
        self.sink = self.folder / "sink.log"
        self.sandbox = sandbox
        self.db: str | None = None
        self.pg_url: str | None = None
        self.tidings_config: Path | None = None
        self.transport_url: str | None = None
        self.env = {**os.environ,
                    "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
                    "PEERS_WORKLOAD": workload, "PEERS_SANDBOX": sandbox.url,
                    "PEERS_SINK": str(self.sink), "PEERS_REDIS": REDIS_URL,
                    "PEERS_QUOTA": str(QUOTA),
                    # io: the handlers' Redis keys, this run's own
                    "PEERS_IO_PREFIX": f"peers-io:{secrets.token_hex(4)}:"}

    # -- backend

    def prepare(self) -> None:
        """Fresh queue state: flush Redis db 15, or a new database / SQLite file."""
        self.sink.unlink(missing_ok=True)
        self.reader = SinkReader()
        backend = self.system.backend
        if backend == "redis":
            redis.Redis.from_url(REDIS_URL).flushdb()
        elif self.system.name == "procrastinate":
            self.db, self.pg_url = create_db("tidings_bench_procrastinate")
            self.env["PEERS_PG"] = self.pg_url
            self._check([sys.executable, "-m", "procrastinate",
                         "--app=systems.procrastinate.app", "schema", "--apply"])
        if self.system.module == "tidings":
            if backend == "postgresql":
                self.db, store = create_db("tidings_bench")
            else:
                store = f"sqlite:///{self.folder / f'tidings-{secrets.token_hex(3)}.db'}"
            self.tidings_config = self.folder / "tidings.toml"
            self.transport_url = None
            if self.system.transport == "redis":
                # Db 15 as the Redis peers, under a prefix of this run's own (never flushed).
                self.transport_url = f"{REDIS_URL}?prefix=peers-tidings-{secrets.token_hex(4)}"
            self.tidings_config.write_text(tidings_settings(self.workload, store,
                                                            self.sandbox.url,
                                                            transport=self.transport_url))
            self.env["PEERS_TIDINGS_CONFIG"] = str(self.tidings_config)
            self.ledger_url = store
            self._check([str(BIN / "tidings"), "db", "migrate", "--config",
                         str(self.tidings_config)])

    def teardown(self) -> None:
        if self.db is not None:
            drop_db(self.db)
            self.db = None
        if self.transport_url:
            r = redis.Redis.from_url(REDIS_URL)
            prefix = self.transport_url.rsplit("prefix=", 1)[1]
            keys = list(r.scan_iter(match=f"{prefix}:*", count=5000))
            for first in range(0, len(keys), 5000):
                r.unlink(*keys[first:first + 5000])
            self.transport_url = None
        if self.workload == "io":
            r = redis.Redis.from_url(REDIS_URL)
            keys = list(r.scan_iter(match=self.env["PEERS_IO_PREFIX"] + "*", count=5000))
            for first in range(0, len(keys), 5000):
                r.unlink(*keys[first:first + 5000])

    def io_counts(self) -> tuple[int, int] | None:
        """io: (keys, repeats) under this run's prefix: how many jobs' Redis keys the
        handlers incremented, and how many more than once (a second run of the job), the
        handlers' own witness beside the sink. Keys short of the jobs done mean the
        handlers wrote elsewhere and the repeats say nothing."""
        if self.workload != "io":
            return None
        r = redis.Redis.from_url(REDIS_URL)
        keys = list(r.scan_iter(match=self.env["PEERS_IO_PREFIX"] + "*", count=5000))
        repeats = 0
        for first in range(0, len(keys), 5000):
            repeats += sum(int(v) > 1 for v in r.mget(keys[first:first + 5000]) if v)
        return len(keys), repeats

    def _check(self, command: list[str]) -> None:
        done = subprocess.run(command, cwd=HERE, env=self.env, capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stderr[-2000:]}")

    # -- producer and workers

    def enqueue(self, n: int, first: int = 0, *, single: bool = False) -> Report:
        """The producer; ``single``: one enqueue call per job (``PEERS_ENQUEUE=single``)
        where the system's producer would otherwise use its bulk API."""
        env = {**self.env, "PEERS_ENQUEUE": "single"} if single else self.env
        done = subprocess.run(
            [sys.executable, "-m", f"systems.{self.system.module}", "enqueue", "--n", str(n),
             "--first", str(first)],
            cwd=HERE, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{self.system.name} producer failed: {done.stderr[-3000:]}")
        report: Report = json.loads(done.stdout.strip().splitlines()[-1])
        return report

    def instances(self) -> Instances:
        ctx = Context(workload=self.workload, processes=self.processes,
                      tidings_config=self.tidings_config)
        return Instances(commands=self.system.commands(ctx), env=self.env, logs=self.folder)

    def sink_summary(self) -> analysis.SinkSummary:
        """The sink so far, read incrementally (the driver must not steal a core)."""
        return self.reader.summary(self.sink, self.n)

    def start_profile(self, workers: Instances) -> subprocess.Popen[bytes]:
        """py-spy on the first worker process (every thread, idle time left out)."""
        self.profile_file = self.folder / "py-spy.txt"
        return subprocess.Popen(
            [str(BIN / "py-spy"), "record", "--format", "raw", "--rate", "200", "--threads",
             "--output", str(self.profile_file), "--pid", str(workers.processes[0].pid)],
            stdout=subprocess.DEVNULL, stderr=open(self.folder / "py-spy.log", "wb"))

    def stop_profile(self, spy: subprocess.Popen[bytes]) -> Report:
        spy.send_signal(signal.SIGINT)
        try:
            spy.wait(60)
        except subprocess.TimeoutExpired:
            spy.kill()
            return {"error": "py-spy did not stop"}
        if not self.profile_file.exists():
            return {"error": (self.folder / "py-spy.log").read_text()[-500:]}
        lines = self.profile_file.read_text().splitlines()
        return {"tool": "py-spy record --rate 200 --threads (idle threads excluded), the first "
                        "worker process, during the drain phase",
                **analysis.profile_summary(lines, top=25),
                "delivery_breakdown": analysis.delivery_breakdown(lines)}

    def first_done(self) -> float | None:
        """When the first job of the run was done (the sink's first line), if yet."""
        try:
            with open(self.sink) as f:
                line = f.readline().split()
        except FileNotFoundError:
            return None
        return float(line[1]) if len(line) == 2 else None

    def sink_count(self, lo: int, hi: int) -> int:
        try:
            lines = self.sink.read_text().splitlines()
        except FileNotFoundError:
            return 0
        return len({p[0] for p in (line.split() for line in lines)
                    if len(p) == 2 and lo <= int(p[0]) < hi})

    def ledger_accepted(self) -> int:
        """tidings only: intents the ledger holds as accepted (committed)."""
        query = "SELECT count(*) FROM intents WHERE state = 'accepted'"
        if self.ledger_url.startswith("sqlite:"):
            import sqlite3

            conn = sqlite3.connect(self.ledger_url.removeprefix("sqlite:///"), timeout=15)
            try:
                return int(conn.execute(query).fetchone()[0])
            finally:
                conn.close()
        with psycopg.connect(self.ledger_url) as pg:
            row = pg.execute(query).fetchone()
            return int(row[0]) if row else 0

    def logs_tail(self) -> str:
        tails = []
        for path in sorted(self.folder.glob("instance-*.log")):
            tails.append(f"--- {path.name}\n" + path.read_text(errors="replace")[-1500:])
        return "\n".join(tails)


class SinkReader:
    """Reads only what was appended to the sink since the last call."""

    def __init__(self) -> None:
        self.offset = 0
        self.partial = ""
        self.lines: list[str] = []
        self.seen: set[int] = set()
        self.records = 0
        self.first: float | None = None
        self.last: float | None = None

    def summary(self, path: Path, n: int) -> analysis.SinkSummary:
        try:
            with open(path) as f:
                f.seek(self.offset)
                chunk = f.read()
                self.offset = f.tell()
        except FileNotFoundError:
            chunk = ""
        text = self.partial + chunk
        complete, _, self.partial = text.rpartition("\n")
        if complete:
            part = analysis.parse_sink(complete.split("\n"), n)
            ids = (int(line.split()[0]) for line in complete.split("\n") if line.strip())
            self.seen.update(i for i in ids if 0 <= i < n)
            self.records += part.records
            if part.first_at is not None:
                self.first = part.first_at if self.first is None else min(self.first,
                                                                          part.first_at)
                self.last = part.last_at if self.last is None else max(self.last or 0.0,
                                                                       part.last_at or 0.0)
        return analysis.SinkSummary(done=len(self.seen), records=self.records,
                                    repeats=self.records - len(self.seen),
                                    first_at=self.first, last_at=self.last)


def tidings_settings(workload: str, store: str, sandbox_url: str,
                     transport: str | None = None) -> str:
    lines = [f'store = "{store}"']
    if transport is not None:
        lines.append(f'transport = "{transport}"')
    lines.append("")
    if workload == "crash":
        lines += ["[worker]", "lease_s = 10.0", "visibility_s = 15.0", ""]
    lines += ["[channels.email]"]
    if workload in ("throughput", "io"):
        lines += ["max_in_flight = 10000", "", "[channels.email.provider]",
                  'kind = "sandbox-twin"']
    else:
        if workload == "pacing":
            lines += [f'quota = "{QUOTA}/s"']
        lines += ["", "[channels.email.provider]", 'kind = "sandbox"', f'url = "{sandbox_url}"']
    return "\n".join(lines) + "\n"


def wait_until(done: Any, progress: Any, *, stall_s: float, cap_s: float,
               alive: Any = None, cap_after: Any = None, cap_after_s: float = 0.0) -> bool:
    """Poll ``done()`` until true; give up after ``stall_s`` with no change of
    ``progress()``, after ``cap_s`` in all, or ``cap_after_s`` after the epoch time
    ``cap_after()`` returns (once it returns one). Returns whether it got done."""
    start = last_change = time.monotonic()
    last = progress()
    while not done():
        now = time.monotonic()
        current = progress()
        if current != last:
            last, last_change = current, now
        if now - last_change > stall_s or now - start > cap_s:
            return False
        began = cap_after() if cap_after is not None else None
        if began is not None and time.time() - began > cap_after_s:
            return False
        if alive is not None and not alive():
            log("a worker instance exited")
        time.sleep(POLL_S)
    return True


# ---------------------------------------------------------------- workloads


def run_throughput(run: Run) -> Report:
    n, tidings = run.n, run.system.module == "tidings"
    out: Report = {}
    # Phase 1 and 2: enqueue a backlog, then drain it.
    run.prepare()
    try:
        produced = run.enqueue(n)
        out["enqueue_s"] = produced["elapsed_s"]
        out["enqueue_how"] = produced["how"]
        workers = run.instances()
        workers.start()
        spy = None
        if run.profile and tidings:  # from the first job done: start-up is not profiled
            wait_until(lambda: run.first_done() is not None, lambda: 0, stall_s=60, cap_s=60)
            spy = run.start_profile(workers)
        try:
            ok = wait_until(lambda: run.sink_summary().done >= n
                            and (not tidings or run.ledger_accepted() >= n),
                            lambda: run.sink_summary().records, stall_s=60,
                            cap_s=run.cap_s + 30, cap_after=lambda: run.first_done(),
                            cap_after_s=run.cap_s)
            seen = time.time()
        finally:
            if spy is not None:
                out["profile"] = run.stop_profile(spy)
            workers.stop()
        sink = run.sink_summary()
        end = max(sink.last_at or 0.0, seen) if tidings and ok else sink.last_at
        out["processing_s"] = (end - sink.first_at) if end and sink.first_at else None
        out["drained"] = ok
        out["done"], out["repeats"] = sink.done, sink.repeats
        out["io_keys"], out["io_repeats"] = run.io_counts() or (None, None)
        done_2 = sink.done
        peak = (workers.peak_total_mb, workers.peak_process_mb)
        if not ok:
            out["logs"] = run.logs_tail()
    finally:
        run.teardown()
    # Phase 3: workers running and warm, then the producer enqueues N.
    run.prepare()
    try:
        workers = run.instances()
        workers.start()
        try:
            warm = 2 * run.processes
            run.enqueue(warm, first=-warm)
            wait_until(lambda: run.sink_count(-warm, 0) >= warm, lambda: 0, stall_s=60,
                       cap_s=60)
            time.sleep(1.0)
            t0 = time.time()
            # io: events arrive one at a time while the workers run (one call per job).
            produced = run.enqueue(n, single=run.workload == "io")
            ok3 = wait_until(lambda: run.sink_summary().done >= n
                             and (not tidings or run.ledger_accepted() >= n + warm),
                             lambda: run.sink_summary().records, stall_s=60,
                             cap_s=max(1.0, run.cap_s - produced["elapsed_s"]))
            seen = time.time()
        finally:
            workers.stop()
        sink = run.sink_summary()
        end = max(sink.last_at or 0.0, seen) if tidings and ok3 else sink.last_at
        out["e2e_s"] = (end - t0) if end else None
        out["enqueue_concurrent_s"] = produced["elapsed_s"]
        out["e2e_done"], out["e2e_repeats"] = sink.done, sink.repeats
        out["e2e_enqueue_how"] = produced["how"]
        out["e2e_io_keys"], out["e2e_io_repeats"] = run.io_counts() or (None, None)
        peak = (max(peak[0], workers.peak_total_mb), max(peak[1], workers.peak_process_mb))
    finally:
        run.teardown()
    # A phase cut by the time cap is measured on the jobs done within it.
    out["capped"] = not (ok and ok3)
    out["enqueue_rate"] = analysis.rate(n, out["enqueue_s"])
    out["processing_rate"] = analysis.rate(done_2, out["processing_s"])
    out["e2e_rate"] = analysis.rate(out["e2e_done"], out["e2e_s"])
    out["enqueue_e2e_rate"] = analysis.rate(n, out["enqueue_concurrent_s"])
    out["peak_rss_total_mb"], out["peak_rss_process_mb"] = peak
    out["ok"] = (out["repeats"] == 0 and out["e2e_repeats"] == 0
                 and not out["io_repeats"] and not out["e2e_io_repeats"]
                 and (out["io_keys"] is None or out["io_keys"] >= out["done"])
                 and (out["e2e_io_keys"] is None or out["e2e_io_keys"] >= out["e2e_done"]))
    return out


def run_paced(run: Run, *, quota: int, dedupe: bool, kill: bool,
              latency_ms: float = 0.0) -> Report:
    """pacing (kill=False) and crash (kill=True): N jobs to the sandbox, judged by it."""
    n = run.n
    run.prepare()
    run.sandbox.configure(quota=quota, dedupe=dedupe, latency_ms=latency_ms)
    out: Report = {}
    try:
        produced = run.enqueue(n)
        out["enqueue_s"], out["enqueue_how"] = produced["elapsed_s"], produced["how"]
        workers = run.instances()
        started = time.time()
        workers.start()
        stats = run.sandbox.email()

        def accepted_keys() -> int:
            nonlocal stats
            stats = run.sandbox.email()
            return int(stats["accepted_keys"])

        try:
            if kill:
                deadline = time.monotonic() + KILL_PHASE_MAX_S
                next_kill = time.monotonic() + KILL_EVERY_S
                index = 0
                while time.monotonic() < deadline and accepted_keys() < n:
                    if time.monotonic() >= next_kill:
                        workers.kill_one(index % len(workers.processes), run.system.kill,
                                         time.time())
                        index += 1
                        next_kill += KILL_EVERY_S
                    time.sleep(POLL_S)
            complete = wait_until(lambda: accepted_keys() >= n, lambda: stats["accepted"],
                                  stall_s=CRASH_STALL_S if kill else STALL_S,
                                  cap_s=max(1.0, started + (CRASH_CAP_S if kill
                                                            else PACING_CAP_S) - time.time()))
            finished = time.time()
            if kill and complete:
                time.sleep(SETTLE_S)  # late redeliveries of killed work still count
                accepted_keys()
        finally:
            workers.stop()
        out.update(complete=complete, started_at=started,
                   completion_s=finished - started if complete else None,
                   peak_rss_total_mb=workers.peak_total_mb,
                   peak_rss_process_mb=workers.peak_process_mb)
        figures = analysis.pacing_figures(stats["requests_per_window"],
                                          stats["accepted_per_window"], quota)
        out["requests_per_window"] = {int(k): v for k, v in stats["requests_per_window"].items()}
        out["accepted_per_window"] = {int(k): v for k, v in stats["accepted_per_window"].items()}
        out["sandbox"] = {k: stats[k] for k in ("requests", "accepted", "accepted_keys",
                                                "keys_accepted_twice", "accepted_twice",
                                                "deduplicated", "refused_quota",
                                                "quota_violations", "max_rate_1s")}
        if kill:
            out.update(kills=workers.kills, lost=n - int(stats["accepted_keys"]),
                       delivered_twice=int(stats["keys_accepted_twice"]),
                       extra_deliveries=int(stats["accepted"]) - int(stats["accepted_keys"]))
        else:
            out.update({k: figures[k] for k in ("max_rate_1s", "windows_over_quota",
                                                "utilisation", "steady_windows", "span_s")})
            out["refused_429"] = int(stats["refused_quota"])
        if not complete:
            out["logs"] = run.logs_tail()
    finally:
        run.teardown()
    return out


# ---------------------------------------------------------------- the driver


def tidings_revision() -> Report:
    """Which tidings is measured: the commit of the tree that ``import tidings`` finds
    (the checkout, or a snapshot put first on PYTHONPATH), and whether it has local
    changes. Workers import it when they start, so a run records it per tidings run."""
    import tidings

    src = Path(tidings.__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=src, text=True,
                                capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=src, text=True,
                               capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {}
    from tidings.config.settings import ChannelSettings

    return {"package": str(src), "commit": commit, "src_dirty": bool(dirty),
            "quota_safety_default": ChannelSettings().quota_safety}


def versions(system: System) -> dict[str, str]:
    found = {}
    for package in system.packages:
        with suppress(Exception):
            found[package] = version(package)
    return found


def machine() -> Report:
    cpu = "?"
    with suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    redis_version = redis.Redis.from_url(REDIS_URL).info("server").get("redis_version")
    with psycopg.connect(PG_ADMIN) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return {"cpu": cpu, "cores": os.cpu_count(),
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "os": platform.platform(), "python": platform.python_version(),
            "redis": redis_version, "postgresql": row[0] if row else None,
            "load_avg_at_end": os.getloadavg()}


def run_workload(workload: str, systems: list[System], *, n: int, processes: int,
                 repeat: int, root: Path, sandbox: Sandbox, phase_cap_s: float,
                 profile: bool = False, latency_ms: float = 0.0) -> Report:
    runs: dict[str, list[Report]] = {s.name: [] for s in systems}
    load_at_start = os.getloadavg()
    for rep in range(repeat):
        for system in systems:  # A B C … then A B C … again
            log(f"{workload} #{rep + 1}: {system.name}")
            run = Run(system, workload, n, processes, root, sandbox, phase_cap_s, profile)
            t0 = time.monotonic()
            try:
                if workload in ("throughput", "io"):
                    result = run_throughput(run)
                elif workload == "pacing":
                    result = run_paced(run, quota=QUOTA, dedupe=True, kill=False)
                else:
                    result = run_paced(run, quota=CRASH_QUOTA, dedupe=False, kill=True,
                                       latency_ms=latency_ms)
            except Exception as exc:  # one system failing must not sink the others
                log(f"  {system.name} failed: {exc}")
                result = {"error": f"{type(exc).__name__}: {exc}", "ok": False}
            result["wall_s"] = time.monotonic() - t0
            if system.module == "tidings":
                result["tidings"] = tidings_revision()
            runs[system.name].append(result)
            log("  " + brief(workload, result))
    return {
        "workload": workload, "n": n, "processes": processes, "repeat": repeat,
        "phase_cap_s": phase_cap_s if workload in ("throughput", "io") else None,
        "latency_ms": latency_ms if workload == "crash" else None,
        "order": "each repetition runs every system once, in the order listed",
        "load_avg_at_start": load_at_start,
        "tidings_at_start": tidings_revision(),
        "systems": {s.name: {"versions": versions(s), "settings": f"bench/peers/systems/"
                             f"{s.module}.py (docstring)", "topology": s.topology,
                             "limiter": s.limiter if workload == "pacing" else None,
                             "crash_kill": s.kill if workload == "crash" else None,
                             "runs": runs[s.name], "summary": summary(workload, runs[s.name])}
                    for s in systems},
    }


SUMMARY_KEYS = {
    "throughput": ("enqueue_rate", "processing_rate", "e2e_rate", "peak_rss_total_mb",
                   "peak_rss_process_mb"),
    "io": ("enqueue_rate", "enqueue_e2e_rate", "processing_rate", "e2e_rate",
           "peak_rss_total_mb", "peak_rss_process_mb"),
    "pacing": ("max_rate_1s", "windows_over_quota", "utilisation", "completion_s",
               "refused_429", "peak_rss_total_mb"),
    "crash": ("lost", "delivered_twice", "extra_deliveries", "completion_s",
              "peak_rss_total_mb"),
}


def summary(workload: str, runs: list[Report]) -> Report:
    return {key: analysis.summarise(r.get(key) for r in runs) for key in SUMMARY_KEYS[workload]}


def brief(workload: str, result: Report) -> str:
    if "error" in result:
        return f"ERROR {result['error'][:300]}"
    parts = []
    for key in SUMMARY_KEYS[workload]:
        value = result.get(key)
        parts.append(f"{key}={value:.3g}" if isinstance(value, float) else f"{key}={value}")
    return " ".join(parts) + f" ({result['wall_s']:.0f} s)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench/peers/run.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload", choices=["throughput", "io", "pacing", "crash", "all"])
    parser.add_argument("--n", type=int, help="jobs (default 20,000 / 1,000 / 5,000)")
    parser.add_argument("--processes", type=int,
                        help="worker processes per system (default 2 / 4 / 2)")
    parser.add_argument("--repeat", type=int, default=2,
                        help="repetitions of the A B C … round (default 2)")
    parser.add_argument("--phase-cap", type=float, default=30.0, metavar="S",
                        help="throughput: end a processing or end-to-end phase S seconds "
                             "after its first job was done and measure the jobs done by "
                             "then (default 30; 0 = wait for all N)")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"comma-separated subset of {','.join(SYSTEMS)}")
    parser.add_argument("--out", type=Path, default=HERE / "results",
                        help="folder for <workload>.json (default bench/peers/results)")
    parser.add_argument("--latency-ms", type=float, default=0.0, metavar="MS",
                        help="crash: the sandbox answers after a lognormal latency with this "
                             "median (p99 = 3 × median), so that fast systems are still "
                             "sending when the kills come (default 0: no latency)")
    parser.add_argument("--keep", action="store_true", help="keep the run folders (logs)")
    parser.add_argument("--profile", action="store_true",
                        help="throughput: py-spy on the first tidings worker process of each "
                             "tidings run while it drains the backlog (slows that run a little; "
                             "the summary goes in the report as 'profile')")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    names = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in names if s not in SYSTEMS]
    if unknown:
        parser.error(f"unknown systems {unknown}; known: {', '.join(SYSTEMS)}")
    systems = [SYSTEMS[s] for s in names]
    ensure_services(need_pg=any(s.backend == "postgresql" for s in systems))
    workloads = (["throughput", "io", "pacing", "crash"] if args.workload == "all"
                 else [args.workload])
    args.out.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="tidings-peers-"))
    sandbox = Sandbox(root)
    reports = {}
    try:
        for workload in workloads:
            n, processes = DEFAULTS[workload]
            report = run_workload(workload, systems, n=args.n or n,
                                  processes=args.processes or processes,
                                  repeat=args.repeat, root=root, sandbox=sandbox,
                                  phase_cap_s=args.phase_cap, profile=args.profile,
                                  latency_ms=args.latency_ms)
            report["machine"] = machine()
            report["tidings"] = tidings_revision()
            report["command"] = " ".join(["bench/peers/.venv/bin/python", "bench/peers/run.py",
                                          *(argv if argv is not None else sys.argv[1:])])
            report["finished_at"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
            name = workload if not (workload == "crash" and args.latency_ms) else \
                f"crash-latency-{args.latency_ms:g}ms"
            (args.out / f"{name}.json").write_text(json.dumps(report, indent=1))
            reports[workload] = report
    finally:
        sandbox.close()
        if not args.keep:
            import shutil

            shutil.rmtree(root, ignore_errors=True)
        else:
            log(f"run folders kept in {root}")
    if args.json:
        print(json.dumps(reports if len(reports) > 1 else reports[workloads[0]], indent=1))


if __name__ == "__main__":
    main()
