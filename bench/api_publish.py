"""``POST /v1/queue/publish`` under many concurrent connections, one request per intent.

    python bench/api_publish.py [--n 20000] [--connections 200] [--processes 2|1,2]
                                [--client raw|aiohttp] [--against SRC] [--pg URL]
                                [--sqlite] [--json]

An existing publisher sends one request per message (a web request, a webhook, a
domain event), from many connections at once. Here a real ``tidings api --processes P``
(each process its own runtime, all on one port) serves a throw-away PostgreSQL
database (``--pg``, default the local server; ``--sqlite`` measures a SQLite file as
well), and an aiohttp client in this process keeps ``--connections`` requests in flight
until N have been answered: each a fresh ``Idempotency-Key`` and customer, to a channel
queue (``email``), so each 2xx stands for exactly one new intent due now, born enqueued
on the store's own queue.

Measured: requests/s (N / wall time from the first request to the last answer), latency
p50/p99/max from send to answer, and the status codes. Checked in the store after the
run: intents == queue messages == 2xx answers, every answer ``new == 1``, and no key
twice. Concurrent publishes of one API process are written in one transaction
(``group_commit.Coalescer``); ``--processes 1`` and a second run show what the
processes add. The client shares the machine with the server: on 2 cores it takes a
good part of one. So the API processes' CPU time per request is reported as well
(their process trees, from /proc): requests per CPU second is what the API would
serve on a core of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import Report, emit, per_s, rounded, source_revision, sqlite_url

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/tidings_bench_api_publish"
QUEUE = "receipts"
#: The channel on the in-process sandbox, named as such (no channel has a provider by default).
TWIN = {"provider": {"kind": "sandbox-twin"}}
CORES = os.cpu_count() or 1
_LISTENING = re.compile(r"listening on (http://\S+)")


def _tidings() -> list[str]:
    return [sys.executable, "-m", "tidings"]


def _settings(folder: Path, store: str) -> Path:
    path = folder / "tidings.toml"
    path.write_text(
        f'store = "{store}"\n'
        "[channels.email]\n"
        'provider = { kind = "sandbox-twin" }\n'
        "[api.queues.receipts]\n"
        'channel = "email"\n')
    return path


def _token(config: Path) -> str:
    out = subprocess.run([*_tidings(), "token", "create", "--scope", "publish", "--name",
                          "bench", "--json", "--config", str(config)],
                         check=True, capture_output=True, text=True).stdout
    return str(json.loads(out.strip().splitlines()[-1])["token"])


def _start_api(config: Path, processes: int, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    with log.open("wb") as sink:
        # --processes only when asked for: one process runs as tidings api always did.
        many = ["--processes", str(processes)] if processes != 1 else []
        proc = subprocess.Popen([*_tidings(), "api", "--config", str(config), "--port", "0",
                                 *many],
                                stdout=sink, stderr=sink, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        found = _LISTENING.findall(text)
        if len(found) >= processes:
            return proc, found[0]
        if proc.poll() is not None:
            raise SystemExit(f"tidings api exited ({proc.returncode}):\n{text[-2000:]}")
        time.sleep(0.1)
    _stop(proc)
    raise SystemExit(f"tidings api did not listen within 60 s:\n{log.read_text()[-2000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) used so far by ``root`` and its descendants."""
    ticks = os.sysconf("SC_CLK_TCK")
    parent_of: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent_of[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / ticks
    total = 0.0
    for pid in cpu:
        walk = pid
        while walk not in (0, 1, root) and walk in parent_of:
            walk = parent_of[walk]
        if walk == root:
            total += cpu[pid]
    return total


def _body(i: int, run: str) -> bytes:
    return json.dumps({"queue": QUEUE, "payload": {
        "customer_id": f"{run}-c{i:07d}", "schedule_day": "2026-12-01",
        "email": f"c{i:07d}@example.com", "template": "receipt-v1"}}).encode()


def _pct(latencies: list[float], q: float) -> float:
    return rounded(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 1)


class _Tally:
    """Every answer checked: status counted, a 2xx body decoded, its ``new`` and keys kept."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.statuses: dict[int, int] = {}
        self.new_counts: dict[int, int] = {}
        self.keys: list[str] = []

    def answer(self, status: int, raw: bytes, took: float) -> None:
        self.latencies.append(took)
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if 200 <= status < 300:
            answer = json.loads(raw)
            self.new_counts[answer["new"]] = self.new_counts.get(answer["new"], 0) + 1
            self.keys.extend(answer["keys"])

    def report(self, n: int, elapsed: float) -> Report:
        latencies = sorted(self.latencies)
        return {"requests": n, "seconds": rounded(elapsed),
                "rate_per_s": rounded(per_s(n, elapsed), 1),
                "p50_ms": _pct(latencies, 0.50), "p99_ms": _pct(latencies, 0.99),
                "max_ms": rounded(latencies[-1] * 1000, 1),
                "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
                "new_per_answer": {str(k): v for k, v in sorted(self.new_counts.items())},
                "keys": len(self.keys), "distinct_keys": len(set(self.keys))}


async def _drive_aiohttp(base: str, token: str, n: int, connections: int, run: str,
                         first: int = 0) -> Report:
    import aiohttp

    tally = _Tally()
    taken = iter(range(first, first + n))
    url = f"{base}/v1/queue/publish"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=connections, limit_per_host=connections)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one_connection() -> None:
            for i in taken:
                sent = time.perf_counter()
                async with session.post(url, data=_body(i, run), headers={
                        **headers, "Idempotency-Key": f"{run}-{i:07d}"}) as response:
                    raw = await response.read()
                tally.answer(response.status, raw, time.perf_counter() - sent)

        started = time.perf_counter()
        await asyncio.gather(*(one_connection() for _ in range(connections)))
        elapsed = time.perf_counter() - started
    return tally.report(n, elapsed)


def _request(host: str, token: str, i: int, run: str) -> bytes:
    body = _body(i, run)
    return (f"POST /v1/queue/publish HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Idempotency-Key: {run}-{i:07d}\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode() + body


async def _drive_raw(base: str, token: str, n: int, connections: int, run: str,
                     first: int = 0) -> Report:
    """The same requests over plain keep-alive HTTP/1.1 connections (asyncio streams):
    a client that spends its CPU on the requests rather than on a client library, so
    more of the machine's two cores is left to the server measured. Each answer is read
    whole (status line, ``Content-Length``) and checked as the aiohttp client does."""
    hostport = base.removeprefix("http://")
    host, _, port = hostport.rpartition(":")
    tally = _Tally()
    taken = iter(range(first, first + n))

    async def one_connection() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            for i in taken:
                request = _request(hostport, token, i, run)
                sent = time.perf_counter()
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head[9:12])
                length = None
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                    elif name.strip().lower() == b"transfer-encoding":
                        raise SystemExit(f"unexpected Transfer-Encoding answer: {head!r}")
                if length is None:
                    raise SystemExit(f"an answer without Content-Length: {head!r}")
                raw = await reader.readexactly(length)
                tally.answer(status, raw, time.perf_counter() - sent)
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(one_connection() for _ in range(connections)))
    return tally.report(n, time.perf_counter() - started)


CLIENTS = {"raw": _drive_raw, "aiohttp": _drive_aiohttp}


def _run_client(client: str, *args: Any) -> Report:
    """One client run on its own event loop (uvloop for the raw client, where installed)."""
    if client == "raw":
        try:
            import uvloop
        except ImportError:  # pragma: no cover - a dependency of the API's extra
            pass
        else:
            return uvloop.run(_drive_raw(*args))
    return asyncio.run(CLIENTS[client](*args))


def _pg_backends_cpu_s(store: str) -> float:
    """CPU seconds used so far by the PostgreSQL server processes serving ``store``'s
    database (their command lines name it; readable from /proc when the server runs on
    this machine, else 0)."""
    if not store.startswith(("postgresql://", "postgres://")):
        return 0.0
    dbname = store.rsplit("/", 1)[1].split("?", 1)[0]
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmd:
                words = cmd.read().replace(b"\0", b" ").split()
            if b"postgres:" not in words or dbname.encode() not in words:
                continue
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


async def _count(store: str) -> Report:
    from tidings.config.settings import Settings
    from tidings.runtime import build_runtime

    rt = await build_runtime(Settings.parse({"store": store, "channels": {"email": TWIN}}))
    try:
        counts = await rt.store.intent_counts()
        depth = await rt.transport.depth("email", now=rt.clock.now())
    finally:
        await rt.close()
    return {"intents": sum(n for states in counts.values() for n in states.values()),
            "by_state": counts, "queued": depth.ready + depth.delayed + depth.in_flight}


def _write_groups(store: str) -> int:
    """Transactions that wrote the run's intents (one ``created_at`` each)."""
    if store.startswith(("postgresql://", "postgres://")):
        from pglib import write_groups

        return write_groups(store)
    import sqlite3

    with sqlite3.connect(store.removeprefix("sqlite:///")) as conn:
        return int(conn.execute("SELECT count(DISTINCT created_at) FROM intents").fetchone()[0])


def run_store(kind: str, store: str, n: int, connections: int, processes: int,
              folder: Path, client: str = "raw") -> Report:
    config = _settings(folder, store)
    from pglib import migrate

    migrate(store)  # the schema first, so the API processes do not race to make it
    token = _token(config)
    proc, base = _start_api(config, processes, folder / f"api-{kind}.log")
    try:
        # Warm-up (connections opened, first queries planned), counted in the check.
        warm = _run_client(client, base, token, 2 * connections, connections, "warm")
        cpu_before, client_before = _tree_cpu_s(proc.pid), time.process_time()
        pg_before = _pg_backends_cpu_s(store)
        result = _run_client(client, base, token, n, connections, "run")
        server_cpu = _tree_cpu_s(proc.pid) - cpu_before
        client_cpu = time.process_time() - client_before
        pg_cpu = _pg_backends_cpu_s(store) - pg_before
    finally:
        _stop(proc)
    counted = asyncio.run(_count(store))
    counted["write_groups"] = _write_groups(store)
    ok = sum(v for k, v in result["statuses"].items() if k.startswith("2"))
    ok += sum(v for k, v in warm["statuses"].items() if k.startswith("2"))
    new = result["new_per_answer"].get("1", 0) + warm["new_per_answer"].get("1", 0)
    problems = []
    if counted["intents"] != ok:
        problems.append(f"{counted['intents']} intents for {ok} 2xx answers")
    if counted["queued"] != ok:
        problems.append(f"{counted['queued']} queue messages for {ok} 2xx answers")
    if new != ok:
        problems.append(f"{ok - new} 2xx answers without exactly one new intent")
    if result["distinct_keys"] != result["keys"]:
        problems.append("a key in two answers")
    if ok != n + 2 * connections:
        problems.append(f"{n + 2 * connections - ok} requests not answered 2xx: "
                        f"{result['statuses']}")
    seconds = result["seconds"]
    return {"store": kind, "processes": processes, "client": client, **result,
            "counted": counted,
            "api_cpu_ms_per_request": rounded(server_cpu * 1000 / n, 3),
            "client_cpu_ms_per_request": rounded(client_cpu * 1000 / n, 3),
            "pg_cpu_ms_per_request": rounded(pg_cpu * 1000 / n, 3),
            # Of the machine's CPU time during the run (all cores): who used it.
            "cpu_share": {"api": rounded(server_cpu / (seconds * CORES), 3),
                          "client": rounded(client_cpu / (seconds * CORES), 3),
                          "postgres": rounded(pg_cpu / (seconds * CORES), 3)},
            "api_requests_per_cpu_s": rounded(per_s(n, server_cpu), 1),
            "problems": problems}


def summary(report: Report) -> str:
    lines = [f"POST /v1/queue/publish x {report['n']}, {report['connections']} connections, "
             "one request per intent (target on PostgreSQL: >= 2,000/s, p99 < 250 ms)"]
    for r in report["stores"]:
        source = "" if r["served_from"] == "this checkout" else f"  [from {r['served_from']}]"
        lines.append(
            f"  {r['store']:<8} {r['processes']} processes {r['rate_per_s']:>8,.0f} req/s   "
            f"p50 {r['p50_ms']:>6.1f} ms  p99 {r['p99_ms']:>7.1f} ms  max {r['max_ms']:>7.1f} ms"
            f"   statuses {r['statuses']}   intents {r['counted']['intents']} in "
            f"{r['counted']['write_groups']:,} transactions{source}\n"
            f"           API CPU {r['api_cpu_ms_per_request']:.2f} ms/request "
            f"({r['api_requests_per_cpu_s']:,.0f} requests per CPU second), "
            f"{r['client']} client CPU {r['client_cpu_ms_per_request']:.2f} ms/request, "
            f"PostgreSQL CPU {r['pg_cpu_ms_per_request']:.2f} ms/request\n"
            f"           share of the machine's {CORES} cores: API "
            f"{r['cpu_share']['api']:.0%}, client {r['cpu_share']['client']:.0%}, "
            f"PostgreSQL {r['cpu_share']['postgres']:.0%}"
            + (f"   PROBLEMS: {r['problems']}" if r["problems"] else "   checks ok"))
    for name, ratio in ratios(report["stores"]).items():
        lines.append(f"  this checkout / the other tree, {name}: {ratio['rate']:.2f}x the "
                     f"requests/s, {ratio['api_cpu']:.2f}x the API CPU per request")
    for skipped in report["skipped"]:
        lines.append(f"  skipped: {skipped}")
    return "\n".join(lines)


def ratios(stores: list[Report]) -> dict[str, dict[str, float]]:
    """This checkout against ``--against``'s tree, per store and process count."""
    found: dict[str, dict[str, float]] = {}
    for mine in stores:
        if mine["served_from"] != "this checkout":
            continue
        for other in stores:
            if (other["served_from"] != "this checkout" and other["store"] == mine["store"]
                    and other["processes"] == mine["processes"]):
                found[f"{mine['store']} {mine['processes']} processes"] = {
                    "rate": rounded(mine["rate_per_s"] / other["rate_per_s"], 2),
                    "api_cpu": rounded(mine["api_cpu_ms_per_request"]
                                       / other["api_cpu_ms_per_request"], 2)}
    return found


def _counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: process counts, like 2 or 1,2") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: process counts, like 2 or 1,2")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="measured requests")
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--processes", type=_counts, default=[2],
                        help="API processes; several (1,2) are measured one after another")
    parser.add_argument("--client", choices=sorted(CLIENTS), default="raw",
                        help="the load generator (default raw: plain HTTP/1.1 on asyncio)")
    parser.add_argument("--against", metavar="SRC", type=Path, default=None,
                        help="also serve from this source tree (another checkout's src/), "
                             "in the same run, for a before/after ratio")
    parser.add_argument("--pg", default=DEFAULT_PG,
                        help="a PostgreSQL URL whose server may hold throw-away databases")
    parser.add_argument("--no-pg", action="store_true", help="skip PostgreSQL")
    parser.add_argument("--sqlite", action="store_true", help="measure a SQLite file too")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    stores: list[Report] = []
    skipped: list[str] = []
    trees: list[Path | None] = [None] if args.against is None else [args.against, None]
    with tempfile.TemporaryDirectory(prefix="tidings-bench-publish-") as tmp:
        folder = Path(tmp)
        for tree in trees:
            for processes in args.processes:
                stores += _measure(args, folder, processes, tree, skipped)
    report: dict[str, Any] = {"n": args.n, "connections": args.connections, "stores": stores,
                              "ratios": ratios(stores), "skipped": skipped,
                              "tidings": source_revision()}
    emit(report, as_json=args.json, summary=summary)
    return 1 if any(s["problems"] for s in stores) else 0


def _measure(args: argparse.Namespace, folder: Path, processes: int, tree: Path | None,
             skipped: list[str]) -> list[Report]:
    """One run per store asked for, the API served from ``tree`` (None: this checkout)."""
    found: list[Report] = []
    saved = os.environ.get("PYTHONPATH")
    if tree is not None:  # the API processes (children) import tidings from there
        os.environ["PYTHONPATH"] = str(tree.resolve())
    try:
        if not args.no_pg:
            from pglib import sibling_pg

            try:
                url = sibling_pg(args.pg, "run")
            except SystemExit as exc:  # pglib's refusal: no server, say so and go on
                skipped.append(f"postgres: {exc}")
            else:
                found.append(run_store("postgres", url, args.n, args.connections,
                                       processes, folder, args.client))
        if args.sqlite:
            db = folder / f"publish-{len(os.listdir(folder))}.db"
            found.append(run_store("sqlite", sqlite_url(db), args.n, args.connections,
                                   processes, folder, args.client))
        for r in found:
            r["served_from"] = "this checkout" if tree is None else str(tree)
    finally:
        if tree is not None:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved
    return found


if __name__ == "__main__":
    sys.exit(main())
