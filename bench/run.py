"""tidings benchmarks: measurements against a floor taken in the same run, never tests.

    python bench/run.py admission [--n 1000000] [--store sqlite:///path.db] [--json]
    python bench/run.py delivery  [--n 50000] [--processes 1|2] [--json]
    python bench/run.py pacing    [--store sqlite:///…|postgresql://…] [--processes 4]
                                  [--quota 200] [--seconds 15] [--json]
    python bench/run.py capacity  [--n 1000000] [--workers 2] [--calibrate 20000]
                                  [--quota Q] [--store sqlite:///…|postgresql://…] [--json]
    python bench/run.py api-publish [--n 20000] [--connections 200] [--processes 2|1,2]
                                  [--client raw|aiohttp] [--against SRC] [--pg URL]
                                  [--sqlite] [--json]

Each prints one JSON object with ``--json`` (a readable summary otherwise). See
bench/README.md for how to read the figures.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# Run as a script, bench/ is sys.path[0]: the sibling modules import by name (and so do
# the spawned children, which inherit the parent's sys.path).
import admission
import api_publish
import capacity_check
import delivery
import pacing
from benchlib import bench_dir, emit, fresh_file, path_of, sqlite_url
from pglib import fresh_pg, is_pg

DESCRIPTION = """\
Benchmarks of tidings, each reported as a rate and as a ratio against a floor measured
in the same run on the same machine (ratio = floor rate / tidings rate, so 1.0 means
"as fast as the floor" and 3.0 "three times slower"). Wall-clock figures vary on a
shared machine; compare ratios, and run twice.

admission  A campaign with a generated audience of N recipients, admitted by
           Scheduler.run_pass until it has no more pages, on a fresh SQLite file:
           intents inserted, one queue message each, intents marked enqueued.
           Floor: raw sqlite3 executemany of the same intent rows into the same
           schema. Also: peak RSS of the scheduler process, a per-phase split
           and (--profile-n) a cProfile of where the time goes.

delivery   N intents already enqueued, drained by K worker processes
           (Worker.run(), each its own runtime on the same SQLite file) against the
           in-process sandbox twin with no latency and no binding limits.
           Floor: the same N messages received and acked through the bare SQL
           transport by K processes, with no ledger work. Also: CPU seconds and peak
           RSS per process, and the sandbox's own counts (accepted keys == N, none
           accepted twice) as the correctness check.

pacing     K worker processes on one channel with a quota, sharing one pacing
           budget through the store (SQLite file or a throw-away PostgreSQL
           database), against the sandbox HTTP server: per-second request counts,
           windows over quota, utilisation, and a forced 429 (Retry-After 2 s)
           after which no process may send for 2 s. Judged by the sandbox's log.

capacity   The capacity model checked: K worker processes drain C intents (the
           ledger's recent outcomes), tidings.operate.capacity forecasts the drain of an
           N-recipient campaign from them before it is enabled, then the campaign
           is admitted and delivered. Prints forecast, measured drain and their
           ratio (target 0.9-1.1).
api-publish  POST /v1/queue/publish against a real `tidings api --processes P` on a
           throw-away PostgreSQL database, 200 connections, one request per intent:
           requests/s, p50/p99, the API's CPU per request, and every 2xx checked to
           be exactly one intent in the store. Target: >= 2,000/s, p99 < 250 ms.
"""


def _positive(text: str) -> int:
    value = int(text.replace("_", ""))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text.replace("_", ""))
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(
        prog="python bench/run.py", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = main.add_subparsers(dest="benchmark", required=True,
                              metavar="{admission,delivery,pacing,capacity,api-publish}")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true", help="print one JSON object")
        p.add_argument("--keep", action="store_true",
                       help="keep the temporary folder with the database files")

    adm = sub.add_parser("admission", help="campaign admission vs raw inserts",
                         description=admission.__doc__,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    adm.add_argument("--n", type=_positive, default=1_000_000,
                     help="audience size (default 1,000,000)")
    adm.add_argument("--store", metavar="sqlite:///PATH|postgresql://…",
                     help="database file for the measured run (must not exist; the floors "
                          "go beside it), or a PostgreSQL database holding no tidings tables "
                          "(created if missing; the floors use sibling databases <db>_floor_*); "
                          "default: a temporary folder")
    adm.add_argument("--profile-n", type=_non_negative, default=0, metavar="N",
                     help="also profile a separate run of N recipients (cProfile on the "
                          "event loop and the SQLite thread); 0 = no profile")
    adm.add_argument("--top", type=_positive, default=15,
                     help="functions per thread in the profile (default 15)")
    adm.add_argument("--no-all-rows-floor", action="store_true",
                     help="skip the informative second floor (every row admission writes)")
    adm.add_argument("--transport", default="sql", metavar="sql|redis://HOST:PORT/DB",
                     help="sql (the store's own queue, default) or a Redis broker: the "
                          "relay path, timed until every intent is enqueued (PostgreSQL "
                          "--store; the keys go under a prefix of the run's own)")
    common(adm)

    dlv = sub.add_parser("delivery", help="worker processes vs a queue-only floor",
                         description=delivery.__doc__,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    dlv.add_argument("--n", type=_positive, default=50_000,
                     help="intents to deliver (default 50,000)")
    dlv.add_argument("--processes", type=_positive, default=1,
                     help="worker processes, each with its own runtime (default 1; this "
                          "machine has 2 cores)")
    dlv.add_argument("--store", metavar="sqlite:///PATH|postgresql://…",
                     help="database file for the measured run (must not exist; the floor "
                          "goes beside it), or a PostgreSQL database holding no tidings tables "
                          "(created if missing; the floor uses sibling databases <db>_floor_*); "
                          "default: a temporary folder")
    dlv.add_argument("--transport", default="sql", metavar="sql|redis://HOST:PORT/DB",
                     help="the transport under test (default sql: the store's own queue); a "
                          "broker URL gets key prefixes of the run's own, deleted at the end, "
                          "and the floor drains the bare broker transport")
    dlv.add_argument("--profile", action="store_true",
                     help="also profile a separate single-process run (cProfile on the "
                          "event loop and the SQLite thread of the worker)")
    dlv.add_argument("--top", type=_positive, default=15,
                     help="functions per thread in the profile (default 15)")
    common(dlv)

    pac = sub.add_parser("pacing", help="one shared quota across worker processes",
                         description=pacing.__doc__,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    pac.add_argument("--store", metavar="sqlite:///PATH|postgresql://…",
                     help="a SQLite file (must not exist) or a PostgreSQL server URL (a "
                          "throw-away database is created on it and dropped); default: a "
                          "SQLite file in a temporary folder")
    pac.add_argument("--processes", type=_positive, default=4,
                     help="worker processes (default 4)")
    pac.add_argument("--quota", type=_positive, default=200,
                     help="the channel's and the sandbox's quota per second (default 200)")
    pac.add_argument("--seconds", type=_positive, default=15,
                     help="length of the steady phase (default 15)")
    common(pac)

    cap = sub.add_parser("capacity", help="the capacity model's forecast vs a measured drain",
                         description=capacity_check.__doc__,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    cap.add_argument("--n", type=_positive, default=1_000_000,
                     help="campaign recipients (default 1,000,000)")
    cap.add_argument("--workers", type=_positive, default=2,
                     help="worker processes (default 2)")
    cap.add_argument("--calibrate", type=_positive, default=20_000,
                     help="one-off intents the workers drain first, whose outcomes the "
                          "forecast observes (default 20,000)")
    cap.add_argument("--quota", type=_positive, default=None,
                     help="pace the channel at this quota per second (default: unpaced)")
    cap.add_argument("--store", metavar="sqlite:///PATH|postgresql://…",
                     help="database file (must not exist), or a PostgreSQL database holding "
                          "no tidings tables (created if missing); default: a temporary folder")
    common(cap)

    pub = sub.add_parser("api-publish", help="POST /v1/queue/publish, 200 connections",
                         description=api_publish.__doc__,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    pub.add_argument("--n", type=_positive, default=20_000, help="measured requests")
    pub.add_argument("--connections", type=_positive, default=200)
    pub.add_argument("--processes", default="2",
                     help="API processes; several (1,2) are measured one after another")
    pub.add_argument("--client", choices=sorted(api_publish.CLIENTS), default="raw",
                     help="the load generator (default raw: plain HTTP/1.1 on asyncio)")
    pub.add_argument("--against", metavar="SRC", default=None,
                     help="also serve from this source tree (another checkout's src/), in "
                          "the same run, for a before/after ratio")
    pub.add_argument("--pg", default=api_publish.DEFAULT_PG,
                     help="a PostgreSQL URL whose server may hold throw-away databases")
    pub.add_argument("--sqlite", action="store_true", help="measure a SQLite file too")
    pub.add_argument("--json", action="store_true", help="print one JSON object")
    return main


def store_bytes(db: Path) -> dict[str, int]:
    """The SQLite files' sizes (database, WAL) at the end of a run."""
    return {p.name: p.stat().st_size for p in (db, db.with_name(db.name + "-wal"))
            if p.exists()}


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.benchmark == "api-publish":
        sys.exit(api_publish.main([
            "--n", str(args.n), "--connections", str(args.connections),
            "--processes", args.processes, "--pg", args.pg, "--client", args.client,
            *(["--against", args.against] if args.against else []),
            *(["--sqlite"] if args.sqlite else []), *(["--json"] if args.json else [])]))
    if args.benchmark == "pacing":
        if args.store is not None and args.store.startswith("sqlite:"):
            fresh_file(path_of(args.store))
        report = pacing.run(store=args.store, processes=args.processes, quota=args.quota,
                            seconds=args.seconds, keep=args.keep)
        emit(report, as_json=args.json, summary=pacing.summary)
        return
    if args.benchmark == "capacity":
        if is_pg(args.store):
            fresh_pg(args.store)
        elif args.store is not None:
            fresh_file(path_of(args.store))
        with bench_dir(None if is_pg(args.store) else args.store, keep=args.keep) as folder:
            url = args.store or sqlite_url(folder / "capacity.db")
            report = capacity_check.run(n=args.n, calibrate=args.calibrate,
                                        workers=args.workers, url=url, quota=args.quota)
            if not is_pg(url):
                report["store_bytes"] = store_bytes(path_of(url))
            emit(report, as_json=args.json, summary=capacity_check.summary)
        return
    pg = is_pg(args.store)
    if pg:
        fresh_pg(args.store)  # the floors go in sibling databases db_floor_1, ...
    elif args.store is not None:
        fresh_file(path_of(args.store))
    with bench_dir(None if pg else args.store, keep=args.keep) as folder:
        if args.benchmark == "admission":
            report = admission.run(
                n=args.n, folder=folder, store=args.store, profile_n=args.profile_n,
                profile_top=args.top, all_rows_floor=not args.no_all_rows_floor,
                transport=args.transport)
            emit(report, as_json=args.json, summary=admission.summary)
        else:
            os.environ[delivery.TRANSPORT_ENV] = args.transport  # spawned workers read it
            report = delivery.run(n=args.n, processes=args.processes, folder=folder,
                                  store=args.store, profile_top=args.top if args.profile else 0)
            emit(report, as_json=args.json, summary=delivery.summary)
        if args.keep:
            print(f"database files kept in {folder}", file=sys.stderr)


if __name__ == "__main__":
    main()
