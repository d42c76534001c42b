"""The sync ``Client`` from many threads against procrastinate's sync ``defer``, on
PostgreSQL: one call per event, as a Django or Flask app makes them.

    bench/peers/.venv/bin/python bench/sync_client.py [--n 4000] [--threads 50] [--json]

Both peers commit each call durably before it returns: tidings writes an intent and its
queue message (concurrent calls share one transaction, ``group_commit``), procrastinate
inserts one job row per ``defer``. ``--threads`` OS threads take ids from one counter
until N calls are made; each peer runs in a spawned process on a fresh database.

``rate_per_s`` = N / wall time from the first call to the last answer; ``ratio`` =
tidings / procrastinate (target: at least 1). Checked: exactly N intents enqueued and N
queue messages for tidings, exactly N jobs for procrastinate.

procrastinate is not a dependency of tidings: it comes from the peers' venv
(``bash bench/peers/setup.sh``).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from benchlib import Report, emit, per_s, rounded, run_child, source_revision
from pglib import sibling_pg

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/tidings_bench_sync"
#: The channel on the in-process sandbox, named as such (no channel has a provider by default).
TWIN = {"provider": {"kind": "sandbox-twin"}}


def threaded(n: int, threads: int, call: Callable[[int], None]) -> float:
    """Seconds for ``threads`` threads to make N calls between them."""
    ids = itertools.count()
    lock = threading.Lock()
    errors: list[BaseException] = []

    def run() -> None:
        while True:
            with lock:
                i = next(ids)
            if i >= n:
                return
            try:
                call(i)
            except BaseException as exc:  # the report says it
                errors.append(exc)
                return

    pool = [threading.Thread(target=run) for _ in range(threads)]
    started = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - started


def measure_tidings(url: str, n: int, threads: int) -> Report:
    import asyncio

    from tidings import Client, Settings

    settings = Settings.parse({"store": url, "channels": {"email": TWIN}})
    with Client(settings) as client:
        client.preferences("warm-up")  # builds the runtime and migrates, outside the clock
        seconds = threaded(n, threads, lambda i: client.notify(
            key=f"order-{i:07d}", recipient={"id": f"c{i:07d}", "email": f"c{i}@example.com"},
            channels=["email"], template="receipt"))

    async def counts() -> tuple[Any, int]:
        from tidings.runtime import build_runtime

        async with await build_runtime(settings) as rt:
            depth = await rt.transport.depth("email", now=rt.clock.now())
            return await rt.store.intent_counts(), depth.ready + depth.delayed + depth.in_flight

    intents, queued = asyncio.run(counts())
    ok = intents == {"email": {"enqueued": n}} and queued == n
    return {"rate_per_s": rounded(per_s(n, seconds), 1), "seconds": rounded(seconds),
            "problems": [] if ok else [f"{intents} / {queued} queued"]}


def measure_procrastinate(url: str, n: int, threads: int) -> Report:
    import procrastinate
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(procrastinate.schema.SchemaManager.get_schema())
    app = procrastinate.App(connector=procrastinate.SyncPsycopgConnector(conninfo=url))

    @app.task(name="bench.send", queue="bench")
    def send(i: int) -> None:  # never run here: only deferred
        del i

    with app.open():
        send.defer(i=-1)  # the pool's first connection, outside the clock
        seconds = threaded(n, threads, lambda i: send.defer(i=i) and None)
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM procrastinate_jobs WHERE args->>'i' <> '-1'"
                           ).fetchone()
    jobs = int(row[0]) if row else 0
    return {"rate_per_s": rounded(per_s(n, seconds), 1), "seconds": rounded(seconds),
            "problems": [] if jobs == n else [f"{jobs} jobs"]}


def summary(report: Report) -> str:
    t, p = report["tidings"], report["procrastinate"]
    lines = [f"{report['n']} calls from {report['threads']} threads on PostgreSQL "
             "(ratio = tidings Client.notify / procrastinate defer)",
             f"  tidings Client.notify  {t['rate_per_s']:>9,.0f}/s",
             f"  procrastinate defer    {p['rate_per_s']:>9,.0f}/s",
             f"  ratio {report['ratio']:.2f}"]
    for name in ("tidings", "procrastinate"):
        if report[name]["problems"]:
            lines.append(f"  PROBLEMS {name}: {report[name]['problems']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4000, help="calls, one event each")
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--pg", default=DEFAULT_PG,
                        help="a PostgreSQL URL whose server may hold throw-away databases")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    ours = run_child(measure_tidings, sibling_pg(args.pg, "tidings"), args.n, args.threads)
    theirs = run_child(measure_procrastinate, sibling_pg(args.pg, "procrastinate"), args.n,
                       args.threads)
    report = {"n": args.n, "threads": args.threads, "tidings": ours, "procrastinate": theirs,
              "ratio": rounded(ours["rate_per_s"] / theirs["rate_per_s"], 2),
              "revision": source_revision()}
    emit(report, as_json=args.json, summary=summary)
    return 1 if ours["problems"] or theirs["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
