"""tidings benchmarks: measurements against a floor taken in the same run, never tests.

    python bench/run.py admission [--n 1000000] [--store sqlite:///path.db] [--json]
    python bench/run.py delivery  [--n 50000] [--processes 1|2] [--json]

Each prints one JSON object with ``--json`` (a readable summary otherwise). See
bench/README.md for how to read the figures.
"""

from __future__ import annotations

import argparse
import sys

# Run as a script, bench/ is sys.path[0]: the sibling modules import by name (and so do
# the spawned children, which inherit the parent's sys.path).
import admission
import delivery
from benchlib import bench_dir, emit, fresh_file, path_of

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
    sub = main.add_subparsers(dest="benchmark", required=True, metavar="{admission,delivery}")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true", help="print one JSON object")
        p.add_argument("--keep", action="store_true",
                       help="keep the temporary folder with the database files")

    adm = sub.add_parser("admission", help="campaign admission vs raw inserts",
                         description=admission.__doc__,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    adm.add_argument("--n", type=_positive, default=1_000_000,
                     help="audience size (default 1,000,000)")
    adm.add_argument("--store", metavar="sqlite:///PATH",
                     help="database file for the measured run (must not exist; the floors "
                          "go beside it); default: a temporary folder")
    adm.add_argument("--profile-n", type=_non_negative, default=0, metavar="N",
                     help="also profile a separate run of N recipients (cProfile on the "
                          "event loop and the SQLite thread); 0 = no profile")
    adm.add_argument("--top", type=_positive, default=15,
                     help="functions per thread in the profile (default 15)")
    adm.add_argument("--no-all-rows-floor", action="store_true",
                     help="skip the informative second floor (every row admission writes)")
    common(adm)

    dlv = sub.add_parser("delivery", help="worker processes vs a queue-only floor",
                         description=delivery.__doc__,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    dlv.add_argument("--n", type=_positive, default=50_000,
                     help="intents to deliver (default 50,000)")
    dlv.add_argument("--processes", type=_positive, default=1,
                     help="worker processes, each with its own runtime (default 1; this "
                          "machine has 2 cores)")
    dlv.add_argument("--store", metavar="sqlite:///PATH",
                     help="database file for the measured run (must not exist; the floor "
                          "goes beside it); default: a temporary folder")
    dlv.add_argument("--profile", action="store_true",
                     help="also profile a separate single-process run (cProfile on the "
                          "event loop and the SQLite thread of the worker)")
    dlv.add_argument("--top", type=_positive, default=15,
                     help="functions per thread in the profile (default 15)")
    common(dlv)
    return main


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.store is not None:
        fresh_file(path_of(args.store))
    with bench_dir(args.store, keep=args.keep) as folder:
        if args.benchmark == "admission":
            report = admission.run(
                n=args.n, folder=folder, store=args.store, profile_n=args.profile_n,
                profile_top=args.top, all_rows_floor=not args.no_all_rows_floor)
            emit(report, as_json=args.json, summary=admission.summary)
        else:
            report = delivery.run(n=args.n, processes=args.processes, folder=folder,
                                  store=args.store, profile_top=args.top if args.profile else 0)
            emit(report, as_json=args.json, summary=delivery.summary)
        if args.keep:
            print(f"database files kept in {folder}", file=sys.stderr)


if __name__ == "__main__":
    main()
