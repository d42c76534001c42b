"""The growth benchmark's smoke form runs on both stores, so the benchmark cannot rot.

``bench/growth.py --smoke`` fills a ledger of 100,000 intents (and an empty one),
checks every table's row count against its plan, runs every measurement on each and
exits 2 when a check fails or a figure is missing. No time is judged here. Its
databases (PostgreSQL) carry this session's prefix and are dropped by the benchmark.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def smoke(store: str, prefix: str, out: Path) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, str(BENCH / "growth.py"), "--smoke", "--store", store,
         "--prefix", prefix, "--out", str(out)],
        capture_output=True, text=True, timeout=300, check=False, cwd=BENCH)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    verdict: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return verdict


def test_the_growth_smoke_fills_and_measures_a_sqlite_ledger(tmp_path: Path) -> None:
    verdict = smoke(f"sqlite:///{tmp_path}/", "growth_smoke", tmp_path / "report.json")

    assert verdict == {"smoke": "ok", "missing": []}
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report["sizes"]) == {"0", "100k"}
    assert report["sizes"]["100k"]["intents"] >= 100_000
    assert not list(tmp_path.glob("growth_smoke_*.db"))  # dropped


def test_the_growth_smoke_fills_and_measures_a_postgresql_ledger(pg_admin_url: str,
                                                                 tmp_path: Path) -> None:
    prefix = f"tidings_test_growth_{uuid.uuid4().hex[:8]}"
    verdict = smoke(pg_admin_url, prefix, tmp_path / "report.json")

    assert verdict == {"smoke": "ok", "missing": []}
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["sizes"]["100k"]["retention"]["pruned"]["intents"] > 0
    assert report["sizes"]["100k"]["figures"]["prune_lock_s"] is not None
