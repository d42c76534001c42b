"""The SQLite benchmarks need only the base install: psycopg (the ``postgres`` extra) is
imported when a PostgreSQL store is asked for, and its absence is then a clear exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"

WITHOUT_PSYCOPG = f"""
import sys
sys.modules["psycopg"] = None  # any import of it now raises ImportError, as if not installed
sys.modules["psycopg_pool"] = None
sys.path.insert(0, {str(BENCH)!r})
import run, admission, delivery, pacing, pglib
args = run.parser().parse_args(["admission", "--n", "10"])
assert args.store is None and not pglib.is_pg(args.store)
try:
    pglib.fresh_pg("postgresql://bench@127.0.0.1:5432/bench")
except SystemExit as exc:
    print(exc)
"""


def test_the_benchmarks_load_without_psycopg_and_say_what_postgresql_needs() -> None:
    result = subprocess.run([sys.executable, "-c", WITHOUT_PSYCOPG], capture_output=True,
                            text=True, timeout=120, check=False, cwd=BENCH)
    assert result.returncode == 0, result.stderr
    assert "pip install -e '.[postgres]'" in result.stdout
