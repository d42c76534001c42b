"""Failover's short form: ``bench/failover.py`` with the primary down for 6 s under
kills, on both stores; nothing lost, no key accepted by both providers, judged by the
two sandboxes' own counts.

Two sandbox servers are the channel's providers: the primary drops 5 % of its answers
after accepting the message; the fallback allows 150/s, half the channel's quota, and
the channel says so (``failover.quotas``); both with deduplication off, so a key sent
twice is counted twice. Two ``tidings worker`` processes drain 3,000 intents at 300/s;
a worker is SIGKILLed every 2 s and started again (four times). A quarter of the way
in the primary stops (its port refuses connections) for 6 s, then starts again on the
same port with the same ledger. Every intent must end accepted with the receipt the
sandbox holding its key issued; each key is accepted by exactly one sandbox; the
fallback is never over its quota; it takes over within 2 s of the primary stopping, and
the traffic returns to the primary within its circuit's ``open_s`` (plus a second) of
its return. The lost answers and the sends cut off when the primary stopped are
uncertain: they are settled by a lookup on every provider (the primary's answers only
once it is back), never sent on the fallback first.
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
N = 3000
OPEN_S = 4.0


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest) -> str:
    if request.param == "sqlite":
        return "sqlite"
    return str(request.getfixturevalue("pg_url"))  # a schema of this test alone


def test_the_primary_down_and_back_under_kills_loses_nothing_and_sends_nothing_twice(
        store: str) -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH / "failover.py"), "--store", store, "--n", str(N),
         "--quota", "300", "--fallback-quota", "150", "--down-at", "0.25",
         "--down-s", "6", "--open-s", str(OPEN_S), "--lost", "0.05",
         "--kill-every-s", "2", "--max-kills", "4", "--guard-s", "240", "--store-as-is",
         "--json"],
        capture_output=True, text=True, timeout=330, check=False, cwd=BENCH,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report = json.loads(result.stdout)
    primary, fallback = report["primary"], report["fallback"]
    print(f"\n[failover, {report['store']}] {report['kills']} kills; primary accepted "
          f"{primary['accepted_keys']} ({primary['lost_responses']} answers lost), "
          f"fallback {fallback['accepted_keys']}; took over {report['took_over_s']} s "
          f"after the primary stopped, back {report['back_s']} s after it returned")
    assert report["kills"] >= 3 and primary["lost_responses"] > 0
    # 0 lost: every intent accepted, its receipt the one the sandbox holding it issued
    assert report["not_accepted"] == 0 and report["states"] == {"accepted": N}
    assert report["keys_on_neither"] == 0 and report["receipts_mismatched"] == 0
    # 0 twice, by the sandboxes' own counts, and the fallback never over its own quota
    assert report["keys_on_both"] == 0
    assert primary["accepted_keys"] + fallback["accepted_keys"] == N
    assert primary["keys_accepted_twice"] == 0 and fallback["keys_accepted_twice"] == 0
    assert fallback["quota_violations"] == 0
    # the fallback took over at once, and the traffic came back within the circuit's bound
    assert report["took_over_s"] is not None and report["took_over_s"] < 2.0
    assert report["back_s"] is not None and report["back_s"] < OPEN_S + 1.0
