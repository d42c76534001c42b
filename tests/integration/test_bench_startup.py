"""The worker start-up benchmark runs, so it cannot rot: ``bench/startup.py`` wraps the
functions a worker reaches for by their module and name (it broke once when
``build_runtime`` moved), and a start that misses one of them, or never sends, fails
here. No time is judged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_one_start_is_timed_from_exec_to_its_first_send() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH / "startup.py"), "--runs", "1", "--intents", "50",
         "--json"], capture_output=True, text=True, timeout=300, check=False, cwd=BENCH)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report = json.loads(result.stdout)
    marks = report["trees"]["this"]["ms_after_exec"]
    steps = ("import_cli", "settings.end", "build_runtime.end", "open_store.end",
             "first_claim.end", "first_send.end")
    assert all(step in marks for step in steps), sorted(marks)
    assert marks["import_cli"] < marks["build_runtime.end"] < marks["first_send.end"]
