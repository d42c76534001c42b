"""``POST /v1/queue/publish`` under many concurrent connections, one request per intent.

    python bench/api_publish.py [--n 20000] [--connections 200] [--processes 2]
                                [--pg URL] [--sqlite] [--json]

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
_LISTENING = re.compile(r"listening on (http://\S+)")


def _tidings() -> list[str]:
    return [sys.executable, "-m", "tidings"]


def _settings(folder: Path, store: str) -> Path:
    path = folder / "tidings.toml"
    path.write_text(
        f'store = "{store}"\n'
        "[channels.email]\n"
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


async def _drive(base: str, token: str, n: int, connections: int, run: str,
                 first: int = 0) -> Report:
    import aiohttp

    latencies: list[float] = []
    statuses: dict[int, int] = {}
    new_counts: dict[int, int] = {}
    keys: list[str] = []
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
                latencies.append(time.perf_counter() - sent)
                statuses[response.status] = statuses.get(response.status, 0) + 1
                if 200 <= response.status < 300:
                    answer = json.loads(raw)
                    new_counts[answer["new"]] = new_counts.get(answer["new"], 0) + 1
                    keys.extend(answer["keys"])

        started = time.perf_counter()
        await asyncio.gather(*(one_connection() for _ in range(connections)))
        elapsed = time.perf_counter() - started
    latencies.sort()

    def pct(q: float) -> float:
        return rounded(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 1)

    return {"requests": n, "seconds": rounded(elapsed), "rate_per_s": rounded(per_s(n, elapsed), 1),
            "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": rounded(latencies[-1] * 1000, 1),
            "statuses": {str(k): v for k, v in sorted(statuses.items())},
            "new_per_answer": {str(k): v for k, v in sorted(new_counts.items())},
            "keys": len(keys), "distinct_keys": len(set(keys))}


async def _count(store: str) -> Report:
    from tidings.runtime import build_runtime
    from tidings.settings import Settings

    rt = await build_runtime(Settings.parse({"store": store, "channels": {"email": {}}}))
    try:
        counts = await rt.store.intent_counts()
        depth = await rt.transport.depth("email", now=rt.clock.now())
    finally:
        await rt.close()
    return {"intents": sum(n for states in counts.values() for n in states.values()),
            "by_state": counts, "queued": depth.ready + depth.delayed + depth.in_flight}


def run_store(kind: str, store: str, n: int, connections: int, processes: int,
              folder: Path) -> Report:
    config = _settings(folder, store)
    from pglib import migrate

    migrate(store)  # the schema first, so the API processes do not race to make it
    token = _token(config)
    proc, base = _start_api(config, processes, folder / f"api-{kind}.log")
    try:
        # Warm-up (connections opened, first queries planned), counted in the check.
        warm = asyncio.run(_drive(base, token, 2 * connections, connections, "warm"))
        cpu_before, client_before = _tree_cpu_s(proc.pid), time.process_time()
        result = asyncio.run(_drive(base, token, n, connections, "run"))
        server_cpu = _tree_cpu_s(proc.pid) - cpu_before
        client_cpu = time.process_time() - client_before
    finally:
        _stop(proc)
    counted = asyncio.run(_count(store))
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
    return {"store": kind, "processes": processes, **result, "counted": counted,
            "api_cpu_ms_per_request": rounded(server_cpu * 1000 / n, 3),
            "client_cpu_ms_per_request": rounded(client_cpu * 1000 / n, 3),
            "api_requests_per_cpu_s": rounded(per_s(n, server_cpu), 1),
            "problems": problems}


def summary(report: Report) -> str:
    lines = [f"POST /v1/queue/publish x {report['n']}, {report['connections']} connections, "
             "one request per intent (target on PostgreSQL: >= 2,000/s, p99 < 250 ms)"]
    for r in report["stores"]:
        lines.append(
            f"  {r['store']:<8} {r['processes']} processes {r['rate_per_s']:>8,.0f} req/s   "
            f"p50 {r['p50_ms']:>6.1f} ms  p99 {r['p99_ms']:>7.1f} ms  max {r['max_ms']:>7.1f} ms"
            f"   statuses {r['statuses']}   intents {r['counted']['intents']}\n"
            f"           API CPU {r['api_cpu_ms_per_request']:.2f} ms/request "
            f"({r['api_requests_per_cpu_s']:,.0f} requests per CPU second), client CPU "
            f"{r['client_cpu_ms_per_request']:.2f} ms/request"
            + (f"   PROBLEMS: {r['problems']}" if r["problems"] else "   checks ok"))
    for skipped in report["skipped"]:
        lines.append(f"  skipped: {skipped}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="measured requests")
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--processes", type=int, default=2, help="API processes")
    parser.add_argument("--pg", default=DEFAULT_PG,
                        help="a PostgreSQL URL whose server may hold throw-away databases")
    parser.add_argument("--no-pg", action="store_true", help="skip PostgreSQL")
    parser.add_argument("--sqlite", action="store_true", help="measure a SQLite file too")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    stores: list[Report] = []
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tidings-bench-publish-") as tmp:
        folder = Path(tmp)
        if not args.no_pg:
            from pglib import sibling_pg

            try:
                url = sibling_pg(args.pg, "run")
            except SystemExit as exc:  # pglib's refusal: no server, say so and go on
                skipped.append(f"postgres: {exc}")
            else:
                stores.append(run_store("postgres", url, args.n, args.connections,
                                        args.processes, folder))
        if args.sqlite:
            stores.append(run_store("sqlite", sqlite_url(folder / "publish.db"), args.n,
                                    args.connections, args.processes, folder))
    report: dict[str, Any] = {"n": args.n, "connections": args.connections, "stores": stores,
                              "skipped": skipped, "tidings": source_revision()}
    emit(report, as_json=args.json, summary=summary)
    return 1 if any(s["problems"] for s in stores) else 0


if __name__ == "__main__":
    sys.exit(main())
