"""A soak: mixed traffic for half an hour under a SIGKILL a minute, every process watched.

    python bench/soak.py [--store URL] [--minutes 30] [--kill-every-s 60]
        [--notify-rate 20] [--digest-rate 10] [--campaign-size 1500] [--quota 400]
        [--sample-every-s 10] [--warm-up-s 300] [--guard-s 900] [--json] [--out REPORT]
        [--store-as-is] [--keep]

Processes of their own, all real: the sandbox HTTP server (``tests/support/
arrivals_sandbox.py``: the channel's quota, dedupe off, so a key sent twice is counted
twice), a ``tidings scheduler`` (a campaign of ``--campaign-size`` recipients every
minute, from a SQL audience; digest windows closed), two ``tidings worker`` processes
on the channel, and a producer (this script, ``--producer``) that calls ``notify`` one
at a time at ``--notify-rate`` per second and adds events to digest windows at
``--digest-rate`` per second, timing every call. One worker is SIGKILLed every
``--kill-every-s`` and started again at once; the scheduler, the other worker, the
producer and the sandbox run the whole time. The store is a SQLite file, or the
PostgreSQL database ``--store`` names (a sibling made and dropped).

Every ``--sample-every-s`` each process's resident memory, open files and sockets are
read from ``/proc`` (and, on PostgreSQL, the server's backends per process). At the end:

- **the witness**: the sandbox's counts (every intent's key accepted once, none twice,
  no quota violation) against the ledger (every intent terminal);
- **slopes**: least squares over each long-lived process's samples after
  ``--warm-up-s``: resident memory in MB per 10 minutes (target under 1), open files
  and sockets per 10 minutes; the killed worker's memory at each of its deaths;
- **flatness**: ``notify``'s p50 and p99 and the campaigns' drain rate (an
  occurrence's intents over the time from its first admission to its last acceptance),
  in the first 10 minutes and the last 10 (target: last within 1.1x of the first).

``python bench/soak_plot.py REPORT.json OUT.png`` draws the samples (any interpreter
with matplotlib).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import Report, emit, quantile, rounded, source_revision

ROOT = Path(__file__).resolve().parents[1]
SANDBOX = ROOT / "tests" / "support" / "arrivals_sandbox.py"
AUDIENCE = ("SELECT id, email, phone, active FROM customers "
            "WHERE (:after IS NULL OR id > :after) ORDER BY id LIMIT :limit")
PAGE = os.sysconf("SC_PAGE_SIZE")


def slope_per_10_min(points: list[tuple[float, float]]) -> float:
    """The least-squares slope of ``(seconds, value)`` points, per 600 s."""
    if len(points) < 3:
        return 0.0
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0
    return 600.0 * sum((x - mx) * (y - my) for x, y in points) / sxx


# ------------------------------------------------------------------ the producer


async def produce(config: Path, out: Path, minutes: float, notify_rate: float,
                  digest_rate: float) -> None:
    """Call ``notify`` at ``notify_rate`` and add digest events at ``digest_rate`` for
    ``minutes``, each call one at a time in its own loop; every call's (wall time, kind,
    seconds) is appended to ``out`` every few seconds (a crash keeps what was written)."""
    from tidings import Digest
    from tidings.config.settings import Settings
    from tidings.runtime import build_runtime

    runtime = await build_runtime(Settings.load(config))
    calls: list[tuple[float, str, float]] = []
    ends = time.monotonic() + minutes * 60.0

    async def paced(kind: str, rate: float) -> None:
        if rate <= 0:
            return
        every_s, n, began = 1.0 / rate, 0, time.monotonic()
        rng = random.Random(kind)
        while time.monotonic() < ends:
            await asyncio.sleep(max(0.0, began + n * every_s - time.monotonic()))
            r = rng.randrange(5_000)
            start = time.perf_counter()
            if kind == "notify":
                await runtime.notify(
                    key=f"n{n}", recipient={"id": f"u{r}", "email": f"u{r}@example.com"},
                    channels=["email"], template="receipt/v1", data={"n": n})
            else:
                await runtime.notify(
                    key=f"d{n}", recipient={"id": f"u{r}", "email": f"u{r}@example.com"},
                    channels=["email"], template="activity/v1", data={"n": n},
                    digest=Digest(key=f"activity:u{r}", window_s=20.0, max_items=5))
            calls.append((time.time(), kind, time.perf_counter() - start))
            n += 1

    def write_out() -> None:
        # Written calls leave memory: the producer's RSS is then the runtime's alone (a
        # list of every call grew it by ~2.4 MB every 10 minutes in the first soaks).
        done = len(calls)
        with out.open("a") as sink:
            for call in calls[:done]:
                sink.write(json.dumps(call) + "\n")
        del calls[:done]

    async def flush() -> None:
        while True:
            await asyncio.sleep(5.0)
            write_out()

    flusher = asyncio.create_task(flush())
    try:
        await asyncio.gather(paced("notify", notify_rate), paced("digest", digest_rate))
    finally:
        flusher.cancel()
        write_out()
        await runtime.close()


# ------------------------------------------------------------------ the run


class Processes:
    """The scheduler, the two workers and the producer, each with a log; the worker
    ``churn`` is the one killed and started again."""

    def __init__(self, config: Path, folder: Path, args: argparse.Namespace) -> None:
        self.config, self.folder = config, folder
        self.commands = {
            "scheduler": [sys.executable, "-m", "tidings", "scheduler", "--config", str(config)],
            "worker": [sys.executable, "-m", "tidings", "worker", "--channel", "email",
                       "--config", str(config)],
            "churn": [sys.executable, "-m", "tidings", "worker", "--channel", "email",
                      "--config", str(config)],
            "producer": [sys.executable, __file__, "--producer", "--config", str(config),
                         "--out", str(folder / "calls.jsonl"), "--minutes", str(args.minutes),
                         "--notify-rate", str(args.notify_rate),
                         "--digest-rate", str(args.digest_rate)],
        }
        self.procs = {name: self._start(name) for name in self.commands}
        self.kills: list[dict[str, float]] = []

    def _start(self, name: str) -> subprocess.Popen[bytes]:
        with (self.folder / f"{name}.log").open("ab") as log:
            return subprocess.Popen(self.commands[name], stdout=subprocess.DEVNULL,
                                    stderr=log, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def kill_churn(self, at: float) -> None:
        proc = self.procs["churn"]
        rss = read_proc(proc.pid)["rss_mb"]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.kills.append({"at_s": rounded(at, 1), "rss_mb": rss})
        self.procs["churn"] = self._start("churn")

    def failed(self) -> dict[str, int]:
        return {name: p.returncode for name, p in self.procs.items()
                if p.poll() is not None and not (name == "producer" and p.returncode == 0)}

    def stop(self, names: list[str]) -> None:
        for name in names:
            if self.procs[name].poll() is None:
                self.procs[name].send_signal(signal.SIGTERM)
        for name in names:
            try:
                self.procs[name].wait(60)
            except subprocess.TimeoutExpired:
                self.procs[name].kill()
                self.procs[name].wait()


def read_proc(pid: int) -> dict[str, float]:
    """Resident memory (MB), open files and sockets of process ``pid`` (zeros once gone)."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            rss = int(statm.read().split()[1]) * PAGE / 1e6
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return {"rss_mb": 0.0, "files": 0, "sockets": 0}
    sockets = 0
    for fd in fds:
        try:
            sockets += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            continue
    return {"rss_mb": round(rss, 2), "files": len(fds), "sockets": sockets}


def backends(store: str) -> dict[str, int]:
    """PostgreSQL backends per client application, on this database."""
    if store.startswith("sqlite:///"):
        return {}
    import psycopg

    with psycopg.connect(store, autocommit=True) as pg:
        rows = pg.execute("SELECT application_name, count(*) FROM pg_stat_activity "
                          "WHERE datname = current_database() GROUP BY 1").fetchall()
    return {str(name): int(n) for name, n in rows}


def store_bytes(store: str) -> int:
    if store.startswith("sqlite:///"):
        path = Path(store.removeprefix("sqlite:///"))
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    import psycopg

    with psycopg.connect(store, autocommit=True) as pg:
        row = pg.execute("SELECT pg_database_size(current_database())").fetchone()
    return int(row[0]) if row else 0


def set_up(args: argparse.Namespace, folder: Path
           ) -> tuple[str, subprocess.Popen[bytes], str, Path]:
    """The audience, the store (migrated), the sandbox with its URL, and the settings file."""
    audience = folder / "customers.db"
    with sqlite3.connect(audience) as conn:
        conn.execute("CREATE TABLE customers (id TEXT PRIMARY KEY, email TEXT, phone TEXT, "
                     "active INTEGER)")
        conn.executemany("INSERT INTO customers VALUES (?, ?, NULL, 1)",
                         [(f"c{i:06d}", f"c{i}@example.com") for i in range(args.campaign_size)])
    if args.store is None:
        store = f"sqlite:///{folder / 'soak.db'}"
    else:
        store = args.store if args.store_as_is else _fresh_pg(args.store)
    with (folder / "sandbox.log").open("ab") as log:
        sandbox = subprocess.Popen(
            [sys.executable, str(SANDBOX), "127.0.0.1", str(args.quota),
             str(folder / "arrivals.json")], stdout=subprocess.PIPE, stderr=log)
    try:
        assert sandbox.stdout is not None
        sandbox_url = f"http://127.0.0.1:{int(sandbox.stdout.readline().decode().strip())}"
        config = _configure(args, folder, store, sandbox_url, audience)
    except BaseException:
        sandbox.kill()
        sandbox.wait()
        raise
    return store, sandbox, sandbox_url, config


def _configure(args: argparse.Namespace, folder: Path, store: str, sandbox_url: str,
               audience: Path) -> Path:
    config = folder / "tidings.toml"
    config.write_text(f'''
store = "{store}"
[scheduler]
interval_s = 0.5
[worker]
reconcile_every_s = 1.0
heartbeat_s = 0.5
gone_after_s = 3.0
[reconciler]
uncertain_after_s = 1.0
[channels.email]
quota = "{args.quota}/s"
provider = {{ kind = "sandbox", url = "{sandbox_url}" }}
[campaigns.minutely]
cron = "* * * * *"
channels = ["email"]
template = "news"
expires_after_s = 3600
audience = {{ sql = {{ url = "sqlite:///{audience}", query = "{AUDIENCE}" }} }}
''')
    migrated = subprocess.run([sys.executable, "-m", "tidings", "db", "migrate", "--config",
                               str(config)], capture_output=True, text=True, check=False)
    if migrated.returncode != 0:
        raise RuntimeError(f"tidings db migrate failed: {migrated.stderr.strip()[-2000:]}")
    return config


def _fresh_pg(url: str) -> str:
    from pglib import sibling_pg

    return sibling_pg(url, "soak")


async def finished(runtime: Any) -> bool:
    from tidings.core.states import TERMINAL

    pending = await runtime.store.digest_pending()
    counts = (await runtime.store.intent_counts()).get("email", {})
    open_ = sum(n for state, n in counts.items() if state not in {s.value for s in TERMINAL})
    return pending.windows == 0 and open_ == 0


def drain_rates(store: str) -> list[tuple[float, float, int]]:
    """Per campaign occurrence: (its first admission, intents per second from then to
    its last acceptance, intents)."""
    query = ("SELECT occurrence, min(created_at), max(accepted_at), count(*) FROM intents "
             "WHERE campaign = 'minutely' AND state = 'accepted' GROUP BY occurrence")
    if store.startswith("sqlite:///"):
        with sqlite3.connect(store.removeprefix("sqlite:///"), timeout=30) as conn:
            rows = conn.execute(query).fetchall()
    else:
        import psycopg

        with psycopg.connect(store) as pg:
            rows = pg.execute(query).fetchall()
    return sorted((float(first), n / max(float(last) - float(first), 1e-3), int(n))
                  for _, first, last, n in rows)


async def run(args: argparse.Namespace, folder: Path) -> Report:
    from tidings.config.settings import Settings
    from tidings.runtime import build_runtime

    store, sandbox, sandbox_url, config = set_up(args, folder)
    runtime = await build_runtime(Settings.load(config))
    began_wall, began = time.time(), time.monotonic()
    processes = Processes(config, folder, args)
    samples: list[dict[str, Any]] = []
    try:
        next_kill = began + args.kill_every_s
        next_sample = began
        ends = began + args.minutes * 60.0
        while time.monotonic() < ends:
            if failed := processes.failed():
                raise RuntimeError(f"a process exited on its own: {failed} (logs in {folder})")
            now = time.monotonic()
            if now >= next_sample:
                pids = {name: p.pid for name, p in processes.procs.items()}
                pids["sandbox"] = sandbox.pid
                samples.append({"at_s": rounded(now - began, 1),
                                **{name: read_proc(pid) for name, pid in pids.items()},
                                "backends": sum(backends(store).values()),
                                "store_mb": rounded(store_bytes(store) / 1e6, 1)})
                next_sample += args.sample_every_s
            if now >= next_kill:
                processes.kill_churn(now - began)
                next_kill += args.kill_every_s
            await asyncio.sleep(0.2)
        processes.stop(["scheduler"])  # no new occurrence; the producer has finished
        guard = time.monotonic() + args.guard_s
        while not await finished(runtime):
            if time.monotonic() > guard:
                raise RuntimeError(f"not finished after {args.guard_s:g} s: "
                                   f"{await runtime.store.intent_counts()}")
            await asyncio.sleep(0.5)
        counts = await runtime.store.intent_counts()
        import httpx

        async with httpx.AsyncClient() as client:
            answer = await client.get(f"{sandbox_url}/v1/stats")
        stats = answer.json()["channels"]["email"]
    finally:
        processes.stop(list(processes.procs))
        await runtime.close()
        if sandbox.poll() is None:
            sandbox.send_signal(signal.SIGTERM)
            sandbox.wait(60)
    return report(args, store, folder, began_wall, samples, processes.kills, counts, stats)


def report(args: argparse.Namespace, store: str, folder: Path, began_wall: float,
           samples: list[dict[str, Any]], kills: list[dict[str, float]],
           counts: dict[str, dict[str, int]], stats: dict[str, Any]) -> Report:
    calls = [json.loads(line) for line in (folder / "calls.jsonl").read_text().splitlines()]
    span = args.minutes * 60.0
    window = min(600.0, span / 3)

    def latencies(kind: str, lo: float, hi: float) -> list[float]:
        return [s * 1000 for at, k, s in calls if k == kind and lo <= at - began_wall < hi]

    def flat(kind: str) -> dict[str, float]:
        first, last = latencies(kind, 0, window), latencies(kind, span - window, span)
        p99_first, p99_last = quantile(first, 0.99), quantile(last, 0.99)
        return {"calls": len([c for c in calls if c[1] == kind]),
                "p50_first_ms": rounded(quantile(first, 0.5), 2),
                "p50_last_ms": rounded(quantile(last, 0.5), 2),
                "p99_first_ms": rounded(p99_first, 2), "p99_last_ms": rounded(p99_last, 2),
                "p99_last_over_first": rounded(p99_last / p99_first if p99_first else 0.0)}

    drains = drain_rates(store)
    first = [r for at, r, _ in drains if at - began_wall < window]
    last = [r for at, r, _ in drains if at - began_wall >= span - window]
    drain_first = statistics.median(first) if first else 0.0
    drain_last = statistics.median(last) if last else 0.0
    slopes: dict[str, dict[str, float]] = {}
    for name in ("scheduler", "worker", "producer", "sandbox"):
        after = [s for s in samples if s["at_s"] >= args.warm_up_s and s[name]["rss_mb"]]
        slopes[name] = {
            figure: rounded(slope_per_10_min([(s["at_s"], s[name][figure]) for s in after]))
            for figure in ("rss_mb", "files", "sockets")}
        slopes[name]["rss_mb_end"] = after[-1][name]["rss_mb"] if after else 0.0
    intents = sum(sum(states.values()) for states in counts.values())
    return {
        "store": store.split(":", 1)[0], "minutes": args.minutes, "kills": len(kills),
        "kill_every_s": args.kill_every_s, "quota": args.quota,
        "notify_rate": args.notify_rate, "digest_rate": args.digest_rate,
        "campaign_size": args.campaign_size, "warm_up_s": args.warm_up_s,
        "window_s": window, "intents": intents, "states": counts.get("email", {}),
        "sandbox": {k: stats.get(k, 0) for k in ("accepted_keys", "keys_accepted_twice",
                                                  "quota_violations", "refused_quota")},
        "lost": max(0, counts.get("email", {}).get("accepted", 0) - stats.get("accepted_keys", 0)),
        "notify": flat("notify"), "digest_add": flat("digest"),
        "drain": {"occurrences": len(drains), "first_per_s": rounded(drain_first, 1),
                  "last_per_s": rounded(drain_last, 1),
                  "last_over_first": rounded(drain_last / drain_first if drain_first else 0.0)},
        "slopes_per_10_min": slopes,
        "churn_rss_at_kills_mb": [k["rss_mb"] for k in kills],
        "backends_max": max((s["backends"] for s in samples), default=0),
        "store_mb_end": samples[-1]["store_mb"] if samples else 0.0,
        "samples": samples, **source_revision(),
    }


def summary(r: Report) -> str:
    s, n, d, dr = r["sandbox"], r["notify"], r["digest_add"], r["drain"]
    rss = ", ".join(f"{name} {v['rss_mb']:+.2f} (at {v['rss_mb_end']:.0f} MB)"
                    for name, v in r["slopes_per_10_min"].items())
    fds = ", ".join(f"{name} {v['files']:+.1f}/{v['sockets']:+.1f}"
                    for name, v in r["slopes_per_10_min"].items())
    kills = r["churn_rss_at_kills_mb"]
    return (
        f"soak [{r['store']}]: {r['minutes']:g} min, {r['kills']} SIGKILLs (one a "
        f"{r['kill_every_s']:g} s), {r['intents']} intents, states {r['states']}\n"
        f"  sandbox: {s['accepted_keys']} keys accepted, {s['keys_accepted_twice']} twice, "
        f"quota violations {s['quota_violations']}\n"
        f"  RSS slope, MB per 10 min after {r['warm_up_s']:g} s: {rss}\n"
        f"  files/sockets per 10 min: {fds}; PostgreSQL backends at most "
        f"{r['backends_max']}; store {r['store_mb_end']} MB at the end\n"
        f"  killed worker's RSS at its deaths: min {min(kills, default=0)}, max "
        f"{max(kills, default=0)} MB\n"
        f"  notify p50 {n['p50_first_ms']} -> {n['p50_last_ms']} ms, p99 {n['p99_first_ms']}"
        f" -> {n['p99_last_ms']} ms ({n['p99_last_over_first']}x); digest add p99 "
        f"{d['p99_first_ms']} -> {d['p99_last_ms']} ms ({d['p99_last_over_first']}x)\n"
        f"  campaign drain (median of occurrences) {dr['first_per_s']}/s -> "
        f"{dr['last_per_s']}/s ({dr['last_over_first']}x), first {r['window_s']:g} s vs last")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", help="a PostgreSQL URL (a sibling database is made and "
                        "dropped); default a SQLite file in a temporary folder")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--kill-every-s", type=float, default=60.0)
    parser.add_argument("--notify-rate", type=float, default=20.0)
    parser.add_argument("--digest-rate", type=float, default=10.0)
    parser.add_argument("--campaign-size", type=int, default=1500)
    parser.add_argument("--quota", type=int, default=400)
    parser.add_argument("--sample-every-s", type=float, default=10.0)
    parser.add_argument("--warm-up-s", type=float, default=300.0,
                        help="samples before this are left out of the slopes")
    parser.add_argument("--store-as-is", action="store_true",
                        help="use --store as it is (an empty database or schema of the "
                        "caller's) instead of making a sibling database")
    parser.add_argument("--guard-s", type=float, default=900.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, help="write the report (JSON) here as well")
    parser.add_argument("--keep", action="store_true", help="keep the run's folder")
    parser.add_argument("--producer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.producer:
        asyncio.run(produce(args.config, args.out, args.minutes, args.notify_rate,
                            args.digest_rate))
        return
    folder = Path(tempfile.mkdtemp(prefix="soak-"))
    try:
        result = asyncio.run(run(args, folder))
    finally:
        if not args.keep:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
        else:
            print(f"kept {folder}", file=sys.stderr)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    emit(result, as_json=args.json, summary=summary)


if __name__ == "__main__":
    main()
