"""The speed guard: short benchmarks beside their floors, failing on a ratio far off.

    python bench/guard.py                       # SQLite and PostgreSQL, prints a table
    python bench/guard.py --stores sqlite       # SQLite only (no server needed)
    python bench/guard.py --json                # one JSON object

Each check runs a benchmark of ``bench/run.py`` small enough for CI (admission of
50,000 recipients, delivery of 20,000 intents) on a fresh store, with its floor
measured in the same run (the floor runs before and after the measured run, as in
``bench/run.py``), and compares the ratio floor / tidings with a limit. The limits sit
well above the ratios measured on main (see ``LIMITS``): a shared machine moves a
ratio by tens of percent, a lost index or a statement that scans per row moves it
several times over (the admission regression this guard was made for: ratio 2.4 → 35).

A check over its limit is measured once more before it fails, and fails only when
both runs are over: one noisy run does not fail CI, a real regression fails it twice.
The exit status is 1 when a check failed, 2 when a check could not run (a server
down, a wrong correctness check in the benchmark itself), 0 otherwise.

PostgreSQL runs in throw-away databases ``tidings_guard_<random>`` (and their floor
siblings) on ``--pg`` (default: the local server), dropped afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import admission
import delivery
import pglib
from benchlib import Report
from pglib import fresh_pg

PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/postgres"


@dataclass(frozen=True)
class Check:
    """One benchmark beside its floor, and the ratio it must stay under."""

    name: str
    store: str  # "sqlite" | "postgresql"
    benchmark: str  # "admission" | "delivery"
    n: int
    processes: int
    limit: float
    why: str


# The ratios measured on main when these limits were set (2 cores, shared), and why
# each limit is where it is: far enough above to stay green on a loaded machine, far
# enough below a regression's ratio to fail on it.
LIMITS: tuple[Check, ...] = (
    Check("admission-sqlite", "sqlite", "admission", 50_000, 1, 6.0,
          "2.1-3.8 measured (floor: raw executemany); the per-row suppression scan "
          "made it 35"),
    Check("admission-postgresql", "postgresql", "admission", 50_000, 1, 8.0,
          "2.6-4.5 measured (floor: COPY, which a loaded disk moves more)"),
    Check("delivery-sqlite", "sqlite", "delivery", 20_000, 1, 40.0,
          "16-19 measured, 1 worker process (floor: receive+ack on the bare queue, "
          "with no ledger at all: the claim, outcome and events are what it measures)"),
    Check("delivery-postgresql", "postgresql", "delivery", 20_000, 2, 40.0,
          "11-21 measured, 2 worker processes (floor: receive+ack on the bare queue)"),
)


def _pg_database(admin: str) -> str:
    """A new database's URL on ``admin``'s server (created by ``fresh_pg``)."""
    return pglib._with_db(admin, f"tidings_guard_{uuid.uuid4().hex[:10]}")


def _drop_pg(url: str) -> None:
    """Drop the guard's database and its floor siblings."""
    from psycopg import sql as pgsql

    name = pglib._dbname(url)
    with pglib._admin(url) as admin:
        for suffix in ("", "_floor_1", "_floor_2", "_floor_all"):
            admin.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                pgsql.Identifier(name + suffix)))


def measure(check: Check, pg_admin: str) -> Report:
    """Run ``check``'s benchmark once on a fresh store; its report."""
    with tempfile.TemporaryDirectory(prefix="tidings-guard-") as tmp:
        folder = Path(tmp)
        store: str | None = None
        if check.store == "postgresql":
            store = fresh_pg(_pg_database(pg_admin))
        try:
            if check.benchmark == "admission":
                return admission.run(n=check.n, folder=folder, store=store, profile_n=0,
                                     profile_top=0, all_rows_floor=False)
            os.environ[delivery.TRANSPORT_ENV] = "sql"
            return delivery.run(n=check.n, processes=check.processes, folder=folder,
                                store=store, profile_top=0)
        finally:
            if store is not None:
                _drop_pg(store)


def _correct(report: Report) -> bool:
    check = report.get("check")
    return isinstance(check, dict) and check.get("ok", True) is not False


def run_check(check: Check, pg_admin: str,
              say: Callable[[str], None]) -> dict[str, Any]:
    """Measure ``check``; once more when over its limit. Its verdict and figures."""
    runs: list[dict[str, Any]] = []
    for attempt in (1, 2):
        started = time.monotonic()
        report = measure(check, pg_admin)
        run = {"rate_per_s": report["rate_per_s"], "floor_rate_per_s":
               report["floor_rate_per_s"], "ratio": report["ratio"],
               "wall_s": round(time.monotonic() - started, 1), "correct": _correct(report)}
        runs.append(run)
        say(f"  {check.name:<22} run {attempt}: {run['rate_per_s']:>9,}/s  floor "
            f"{run['floor_rate_per_s']:>9,}/s  ratio {run['ratio']:>6.2f}  (limit "
            f"{check.limit:g})  {run['wall_s']} s")
        if not run["correct"]:
            return {"check": check.name, "verdict": "broken", "limit": check.limit,
                    "runs": runs, "why": check.why,
                    "detail": f"the benchmark's own check failed: {report.get('check')}"}
        if run["ratio"] <= check.limit:
            return {"check": check.name, "verdict": "ok", "limit": check.limit,
                    "runs": runs, "why": check.why}
    return {"check": check.name, "verdict": "slow", "limit": check.limit, "runs": runs,
            "why": check.why}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] + " Exit 1 when a ratio stays over its limit "
        "in two runs, 2 when a check cannot run.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="limits:\n" + "\n".join(
            f"  {c.name:<22} ratio <= {c.limit:g}: {c.why}" for c in LIMITS))
    parser.add_argument("--stores", default="sqlite,postgresql",
                        help="which stores to check (comma-separated: sqlite,postgresql)")
    parser.add_argument("--only", default=None, metavar="NAME[,NAME]",
                        help="only these checks (names as in the limits below)")
    parser.add_argument("--pg", default=PG_DEFAULT, metavar="URL",
                        help="a PostgreSQL server's admin URL (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    stores = {s.strip() for s in args.stores.split(",") if s.strip()}
    unknown = stores - {"sqlite", "postgresql"}
    if unknown:
        parser.error(f"--stores: unknown store(s) {', '.join(sorted(unknown))}")
    only = None if args.only is None else {s.strip() for s in args.only.split(",")}
    names = {c.name for c in LIMITS}
    if only is not None and only - names:
        parser.error(f"--only: unknown check(s) {', '.join(sorted(only - names))}; "
                     f"known: {', '.join(sorted(names))}")
    checks = [c for c in LIMITS if c.store in stores and (only is None or c.name in only)]

    def say(line: str) -> None:
        if not args.json:
            print(line, flush=True)

    say("speed guard: each ratio = floor rate / tidings rate in the same run")
    results = []
    for check in checks:
        try:
            results.append(run_check(check, args.pg, say))
        except Exception as exc:  # a server down, a broken benchmark: said, exit 2
            results.append({"check": check.name, "verdict": "broken", "limit": check.limit,
                            "runs": [], "why": check.why,
                            "detail": f"{type(exc).__name__}: {exc}"})
            say(f"  {check.name:<22} could not run: {type(exc).__name__}: {exc}")
    slow = [r for r in results if r["verdict"] == "slow"]
    broken = [r for r in results if r["verdict"] == "broken"]
    if args.json:
        print(json.dumps({"results": results, "slow": len(slow), "broken": len(broken)},
                         indent=2))
    for r in slow:
        ratios = " and ".join(f"{run['ratio']:.2f}" for run in r["runs"])
        print(f"SLOW: {r['check']}: ratio {ratios} in two runs, over its limit "
              f"{r['limit']:g} ({r['why']})", file=sys.stderr)
    for r in broken:
        print(f"BROKEN: {r['check']}: {r.get('detail')}", file=sys.stderr)
    if broken:
        return 2
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
