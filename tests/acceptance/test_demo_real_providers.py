"""``tidings demo --real-providers``: email through the Postmark adapter and SMS through
the Twilio adapter against the sandbox speaking their dialects, lost responses on and
dedupe off; judged by the sandbox's own counts. With ``--batch`` email goes through
Postmark's batch endpoint (a lost answer makes a whole request's messages uncertain,
each settled on its own key)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TERMINAL = ("accepted", "rejected", "dead", "cancelled", "expired")


@pytest.mark.slow
@pytest.mark.parametrize(("flags", "recipients"), [(["--real-providers"], 5000),
                                                   (["--batch"], 2000)],
                         ids=["one-request-each", "batch"])
def test_the_real_providers_demo_settles_every_uncertain_send(
        tmp_path: Path, flags: list[str], recipients: int) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tidings", "demo", *flags, "--recipients", str(recipients),
         "--json", "--db", str(tmp_path / "demo.db")],
        capture_output=True, text=True, timeout=600, check=False)

    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["invariants"] == {"lost": 0, "duplicate_sends": 0, "quota_violations": 0}
    for name, channel in report["channels"].items():
        assert sum(channel[k] for k in TERMINAL) == channel["eligible"], name
        assert channel["provider_accepted"] == channel["accepted"], name
        assert channel["provider_duplicate_accepts"] == 0, name
        uncertain = channel["uncertain"]
        # every lost answer was settled by evidence: none is left held, and the report
        # says how (the provider's read API, or its webhook naming the key)
        assert uncertain["held"] == 0, name
        assert uncertain["resolved_by_lookup"] + uncertain["resolved_by_webhook"] >= 1, name
    stats = json.loads((tmp_path / "sandbox-stats.json").read_text())
    assert stats["total"]["lost_responses"] > 0
    assert stats["total"]["keys_accepted_twice"] == 0
    if "--batch" in flags:  # the email went in shared requests, by the sandbox's count
        batches = report["batch_requests"]
        assert batches == stats["batch_requests"]
        assert batches["largest"] > 1 and batches["messages"] >= 2 * batches["requests"]
    else:
        assert "batch_requests" not in report
