"""The soak's short form: ``bench/soak.py`` for 30 seconds on SQLite, a SIGKILL every 7 s.

Every process is real (the sandbox HTTP server, a scheduler running a campaign every
minute, whose occurrence of the minute it starts in is admitted at once, two workers, a
producer calling ``notify`` and adding to digest windows one call at a time); one
worker is killed and started again four times. The witness is the sandbox's own
counts: every intent of the ledger accepted, each key once, never over the quota. The
slopes and the first-against-last figures are the long form's (30 minutes on both
stores, ``bench/RESULTS.md``); here they are only checked to be read at all, on one
store so that the suite stays short (the fault tests cover PostgreSQL's side).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_a_short_soak_loses_nothing_and_sends_nothing_twice() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH / "soak.py"), "--minutes", "0.5",
         "--kill-every-s", "7", "--campaign-size", "300", "--notify-rate", "15",
         "--digest-rate", "10", "--sample-every-s", "2", "--warm-up-s", "10",
         "--guard-s", "240", "--json"],
        capture_output=True, text=True, timeout=330, check=False, cwd=BENCH,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report = json.loads(result.stdout)
    sandbox, states = report["sandbox"], report["states"]
    print(f"\n[soak, short, sqlite] {report['intents']} intents, {report['kills']} kills, "
          f"states {states}, sandbox {sandbox}, notify p99 "
          f"{report['notify']['p99_first_ms']} -> {report['notify']['p99_last_ms']} ms")
    assert report["kills"] >= 4
    assert states == {"accepted": report["intents"]}  # every intent accepted
    assert sandbox["accepted_keys"] == report["intents"]  # by the witness: lost 0
    assert sandbox["keys_accepted_twice"] == 0
    assert sandbox["quota_violations"] == 0 and sandbox["refused_quota"] == 0
    # Each kind of traffic ran: calls timed, a campaign drained, processes sampled.
    assert report["notify"]["calls"] > 0 and report["digest_add"]["calls"] > 0
    assert report["drain"]["occurrences"] >= 1
    assert len(report["samples"]) >= 10
    assert all(report["samples"][-1][name]["rss_mb"] > 0
               for name in ("scheduler", "worker", "churn", "sandbox"))
