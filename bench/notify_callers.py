"""One-at-a-time producers: ``notify()`` from many concurrent callers, one call per intent.

    python bench/notify_callers.py [--n 4000] [--callers 200] [--pg URL | --no-pg] [--json]

An application calls ``notify()`` once per event, from many tasks at once (web
requests, webhooks). Here ``--callers`` asyncio tasks in one process share one
runtime and each calls ``Runtime.notify`` for one intent at a time until N intents
exist (channel ``email``, due now, published on the store's own queue).

Measured twice per store, each in a spawned process on a fresh database:

- ``one_each``: ``group_commit=None``, every call its own store transaction (the
  behaviour before group commit);
- ``grouped``: the default ``group_commit``, concurrent calls sharing one
  transaction (``tidings.delivery.group_commit``).

``rate_per_s`` = N / wall time from the first call to the last answer; ``ratio`` =
grouped rate / one-each rate (above 1: group commit is faster). Checked: exactly N
intents, all enqueued, and exactly N queue messages. SQLite runs on a file in a fresh
temporary folder; PostgreSQL (``--pg``, default the local server) in a throw-away
database ``tidings_bench_notify_<mode>``, dropped and re-created by each run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from benchlib import Report, emit, per_s, rounded, run_child, source_revision, sqlite_url

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/tidings_bench_notify"
MODES = ("one_each", "grouped")
#: The channel on the in-process sandbox, named as such (no channel has a provider by default).
TWIN = {"provider": {"kind": "sandbox-twin"}}


def measure(store: str, mode: str, n: int, callers: int) -> Report:
    """In a child: N notify calls from ``callers`` tasks; the rate and the checks."""
    return asyncio.run(_measure(store, mode, n, callers))


async def _measure(store: str, mode: str, n: int, callers: int) -> Report:
    from tidings.config.settings import Settings
    from tidings.runtime import build_runtime

    rt = await build_runtime(Settings.parse({"store": store, "channels": {"email": TWIN}}))
    if mode == "one_each":
        rt.group_commit = None
    taken = iter(range(n))

    async def caller() -> None:
        for i in taken:
            await rt.notify(key=f"event-{i:07d}", recipient={
                "id": f"c{i:07d}", "email": f"c{i:07d}@example.com"},
                channels=["email"], template="receipt")

    try:
        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(callers)))
        elapsed = time.perf_counter() - started
        counts = await rt.store.intent_counts()
        depth = await rt.transport.depth("email", now=rt.clock.now())
        groups = rt.notify_groups if rt.group_commit is not None else None
    finally:
        await rt.close()
    return {"mode": mode, "rate_per_s": rounded(per_s(n, elapsed), 1),
            "seconds": rounded(elapsed), "transactions": groups if groups is not None else n,
            "intents": counts, "queued": depth.ready + depth.delayed + depth.in_flight}


def _fresh_pg(url: str, mode: str) -> str:
    from pglib import sibling_pg

    return sibling_pg(url, mode)


def run_store(kind: str, base: str | None, n: int, callers: int) -> Report:
    runs: dict[str, Report] = {}
    with tempfile.TemporaryDirectory(prefix="tidings-bench-notify-") as folder:
        for mode in MODES:
            store = (sqlite_url(Path(folder) / f"{mode}.db") if kind == "sqlite"
                     else _fresh_pg(str(base), mode))
            runs[mode] = run_child(measure, store, mode, n, callers)
    problems = [f"{mode}: {r['intents']} / {r['queued']} queued" for mode, r in runs.items()
                if r["intents"] != {"email": {"enqueued": n}} or r["queued"] != n]
    return {"store": kind, "runs": runs, "problems": problems,
            "ratio": rounded(runs["grouped"]["rate_per_s"] / runs["one_each"]["rate_per_s"], 2)}


def summary(report: Report) -> str:
    lines = [f"notify() x {report['n']} from {report['callers']} concurrent callers "
             "(ratio = grouped / one transaction each)"]
    for result in report["stores"]:
        one, grouped = result["runs"]["one_each"], result["runs"]["grouped"]
        lines.append(
            f"  {result['store']:<8} one each {one['rate_per_s']:>9,.0f}/s   grouped "
            f"{grouped['rate_per_s']:>9,.0f}/s in {grouped['transactions']} transactions"
            f"   ratio {result['ratio']:.2f}"
            + (f"   PROBLEMS: {result['problems']}" if result["problems"] else ""))
    for skipped in report["skipped"]:
        lines.append(f"  skipped: {skipped}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4000, help="intents (one notify each)")
    parser.add_argument("--callers", type=int, default=200)
    parser.add_argument("--pg", default=DEFAULT_PG,
                        help="a PostgreSQL URL whose server may hold throw-away databases")
    parser.add_argument("--no-pg", action="store_true", help="SQLite only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    stores: list[Report] = [run_store("sqlite", None, args.n, args.callers)]
    skipped: list[str] = []
    if not args.no_pg:
        try:
            stores.append(run_store("postgres", args.pg, args.n, args.callers))
        except SystemExit as exc:  # pglib's refusal: no server, say so and go on
            skipped.append(f"postgres: {exc}")
    report = {"n": args.n, "callers": args.callers, "stores": stores, "skipped": skipped,
              "tidings": source_revision()}
    emit(report, as_json=args.json, summary=summary)
    return 1 if any(s["problems"] for s in stores) else 0


if __name__ == "__main__":
    sys.exit(main())
