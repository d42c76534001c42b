"""A crash costs only what was in flight: the kill loop of bench/blast_radius.py, judged.

Real processes, a real socket, SQLite: three ``tidings worker`` processes serve 3,000
intents on a channel paced at 200/s (``lease_s`` 5, ``visibility_s`` 5), the sandbox
HTTP server in this process is the witness (dedupe off: a second send of a key
counts twice; 2 % of its replies lost after it accepted), and every 2 s one worker is
SIGKILLed and started again. When every intent is terminal and the queue empty:

- every intent was accepted once by the sandbox (or held by the uncertain-send
  policy), none twice;
- nothing was dead-lettered by a receive count: kills drive receive counts up, and
  they are the weather, not the message;
- no kill expired more leases than one worker could start in one lease period at its
  share of the pacer, nor more than its share of a second's sending (the claim depth
  of a worker that has heard of at least one peer): a worker claims no further ahead
  than the channel can send.

``python bench/blast_radius.py`` runs the same loop against main's code and this one's,
and prints both figures.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tidings.pacing import PaceLimits
from tidings.worker import WorkerConfig

pytestmark = pytest.mark.slow

_PATH = Path(__file__).resolve().parents[2] / "bench" / "blast_radius.py"
INTENTS = 3000
WORKERS = 3
QUOTA = 200
LEASE_S = 5.0


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("blast_radius", _PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


blast = _load()


async def test_kills_every_two_seconds_expire_only_what_was_about_to_be_sent(
        tmp_path: Path) -> None:
    # given / when: the kill loop, to the end
    report = await blast.kill_loop(tmp_path, intents=INTENTS, workers=WORKERS, quota=QUOTA,
                                   lease_s=LEASE_S, visibility_s=5.0, kill_every_s=2.0,
                                   drop=0.02, guard_s=240.0)
    context = {k: v for k, v in report.items() if k != "poison_sample"}

    # then workers really died, with work in hand, while replies were being lost
    assert report["kills"] >= 5, context
    assert report["lease_expired"] > 0, context
    assert report["lost_responses"] > 0, context

    # and every intent was accepted once, or is held by the uncertain-send policy
    states = report["states"]
    assert set(states) <= {"accepted", "held"}, context
    assert report["accepted_keys"] == states.get("accepted", 0), context
    assert report["accepted_keys"] + states.get("held", 0) == INTENTS, context
    assert report["keys_accepted_twice"] == 0, context

    # and nothing was dead-lettered by a receive count (nor at all)
    assert report["dead_by_receive_count"] == 0, report["poison_sample"]
    assert (report["poison"], report["dead_letters"], report["dead_intents"]) == (0, 0, 0)

    # and no kill cost more than one worker's share of the pacer starts in one lease,
    # nor more than the claim depth of a worker that knows of one peer at least
    paced = PaceLimits(quota_per_s=QUOTA).paced_per_s
    assert paced is not None
    one_lease = math.ceil(paced / WORKERS * LEASE_S)
    depth = math.ceil(paced / 2 * WorkerConfig().claim_ahead_s)
    assert report["one_worker_one_lease"] == one_lease
    assert report["expired_per_kill_max"] <= min(one_lease, depth), context
