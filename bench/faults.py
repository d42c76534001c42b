"""The fault tests' long form: each fault of a fleet's second month, larger and again.

    python bench/faults.py [--rounds 3] [--only NAME[,NAME...]] [--json]

The suite runs each fault as a short test (``bash .ci/run``); this runs the same tests
with ``TIDINGS_LONG_FORM=1`` (``tests/support/long_form.py``), which makes each larger,
``--rounds`` times over, and prints what each round showed:

- ``disk_full_sqlite``, ``disk_full_pg``: admission until a 16 MiB disk (SQLite's file)
  or a 64 MiB tablespace (PostgreSQL) is full instead of 1 and 8 MiB; nothing
  half-written, workers wait, everything delivered once space returns;
- ``no_free_connection``: 4,000 intents instead of 200, every slot held for 30 s
  instead of 3;
- ``restart_mid_prune``: a ledger of 14 days of 600 intents pruned while the server is
  taken down as a crash does at least 15 times (instead of 6 days of 60, 3 times), and
  a migration cut by a restart at its first, a middle and its last version;
- ``prune_cut``: the prune's sessions cut at every step, on 12 days of 400;
- ``skewed_clock``: 12,000 intents instead of 1,200 with workers an hour ahead and ten
  minutes behind, on both stores.

The soak is ``bench/soak.py``. Needs what the tests need (root for the mounts and host
names, PostgreSQL, libfaketime); a test that skips here says why.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from benchlib import Report, emit, rounded, source_revision

ROOT = Path(__file__).resolve().parents[1]
FAULTS = {
    "disk_full_sqlite": "tests/integration/test_sqlite_disk_full.py",
    "disk_full_pg": "tests/integration/test_pg_disk_full.py",
    "no_free_connection": "tests/integration/test_pg_no_free_connection.py",
    "restart_mid_prune": "tests/integration/test_pg_restart.py",
    "prune_cut": "tests/integration/test_pg_prune_interrupted.py",
    "skewed_clock": "tests/acceptance/test_skewed_clock.py",
}
COUNTS = re.compile(r"(\d+) (passed|failed|skipped|error)")


def run_once(path: str) -> Report:
    began = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-rs", path],
        cwd=ROOT, capture_output=True, text=True, check=False,
        env={**os.environ, "TIDINGS_LONG_FORM": "1"})
    tail = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    counts = {kind: int(n) for n, kind in COUNTS.findall(tail)}
    figures = [line.strip() for line in result.stdout.splitlines() if line.startswith("[")]
    skipped = [line.strip() for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    report: Report = {"ok": result.returncode == 0, "seconds": rounded(time.monotonic() - began, 1),
                      **counts, "figures": figures, "skipped_why": skipped}
    if result.returncode != 0:
        report["output_tail"] = (result.stdout + result.stderr)[-3000:]
    return report


def summary(r: Report) -> str:
    lines = [f"faults, long form: {r['rounds']} round(s), {r['failed_rounds']} failed"]
    for name, rounds in r["faults"].items():
        for n, one in enumerate(rounds, 1):
            state = "ok" if one["ok"] else "FAILED"
            lines.append(f"  {name} round {n}: {state} in {one['seconds']} s "
                         f"({one.get('passed', 0)} passed, {one.get('skipped', 0)} skipped)")
            lines += [f"    {figure}" for figure in one["figures"]]
            lines += [f"    {why}" for why in one["skipped_why"]]
            if not one["ok"]:
                lines.append("    " + one["output_tail"].replace("\n", "\n    "))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", help=f"a comma-separated choice of {', '.join(FAULTS)}")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    chosen = args.only.split(",") if args.only else list(FAULTS)
    unknown = [name for name in chosen if name not in FAULTS]
    if unknown:
        parser.error(f"--only: unknown {unknown}; choose from {', '.join(FAULTS)}")
    faults: dict[str, list[Report]] = {name: [] for name in chosen}
    for n in range(args.rounds):
        for name in chosen:
            print(f"round {n + 1}: {name} …", file=sys.stderr, flush=True)
            faults[name].append(run_once(FAULTS[name]))
    failed = sum(1 for rounds in faults.values() for one in rounds if not one["ok"])
    report = {"rounds": args.rounds, "failed_rounds": failed, "faults": faults,
              **source_revision()}
    emit(report, as_json=args.json, summary=summary)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
