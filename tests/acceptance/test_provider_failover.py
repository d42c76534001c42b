"""Failover under faults: the primary goes down mid-campaign and comes back; nothing is
lost, and no key is accepted by both providers, judged by the two sandboxes' own counts.

Two sandbox servers are the channel's providers: ``primary`` (drops 5 % of its answers
after accepting the message) and ``fallback``, both with deduplication off (so a key
sent twice is counted twice); the fallback allows 150/s, half the channel's quota, and
the channel says so (``failover.quotas``). Two ``tidings worker`` processes drain 3,000
intents at 300/s; a worker is SIGKILLed every 2 s and started again (four times). A quarter of
the way in the primary stops (its port refuses connections) for 6 s, then starts again
on the same port with the same ledger. Every intent must end accepted; each key is
accepted by exactly one sandbox; the fallback takes over within 2 s of the primary
stopping, and the traffic returns to the primary within its circuit's ``open_s`` (plus
a second) of its return. The lost answers and the sends cut off when the primary stopped
are uncertain: they are settled by a lookup on every provider (the primary's answers
only once it is back), never sent on the fallback first.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.states import State
from tidings.runtime import build_runtime
from tidings.sandbox import SandboxConfig, SandboxServer, serve

pytestmark = pytest.mark.slow

N = 3000
WORKERS = 2
QUOTA = 300
FALLBACK_QUOTA = 150  # the fallback allows less than the channel's first provider
OPEN_S = 4.0
DOWN_S = 6.0
KILL_EVERY_S = 2.0
MAX_KILLS = 4
GUARD_S = 240.0


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tidings.db'}"
    return str(request.getfixturevalue("pg_url"))


def write_settings(tmp_path: Path, store_url: str, primary: str, fallback: str) -> Path:
    config = tmp_path / "tidings.toml"
    config.write_text(f'''
store = "{store_url}"
[worker]
reconcile_every_s = 0.5
heartbeat_s = 0.5
gone_after_s = 2.0
[reconciler]
uncertain_after_s = 0.0
[channels.email]
quota = "{QUOTA}/s"
max_in_flight = 100
lookup_settle_s = 0.0
provider = {{ kind = "sandbox", url = "{primary}", timeout_s = 2.0 }}
fallbacks = [{{ kind = "sandbox", url = "{fallback}", timeout_s = 2.0 }}]
[channels.email.failover]
failures_to_open = 3
window_s = 10.0
open_s = {OPEN_S}
quotas = {{ sandbox-2 = "{FALLBACK_QUOTA}/s" }}
''')
    return config


async def start(config: Path, log: Path) -> asyncio.subprocess.Process:
    with log.open("ab") as sink:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tidings", "worker", "--channel", "email",
            "--config", str(config), stdout=asyncio.subprocess.DEVNULL, stderr=sink,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def accepted(sandbox: SandboxServer) -> int:
    return int(sandbox.core.stats()["channels"].get("email", {}).get("accepted_keys", 0))


async def test_the_primary_down_and_back_under_kills_loses_nothing_and_sends_nothing_twice(
        tmp_path: Path, store_url: str) -> None:
    primary = await serve(SandboxConfig(dedupe=False, lost_response=0.05,
                                        quotas={"email": 100_000}))
    fallback = await serve(SandboxConfig(dedupe=False, quotas={"email": FALLBACK_QUOTA}),
                           seed=1)
    config = write_settings(tmp_path, store_url, primary.url, fallback.url)
    runtime = await build_runtime(Settings.load(config))
    logs = [tmp_path / f"worker-{i}.log" for i in range(WORKERS)]
    workers: list[asyncio.subprocess.Process] = []
    kills = 0
    down_at = up_at = took_over_at = back_at = None
    try:
        for first in range(0, N, 500):
            await runtime.notify_many([NotifyRequest(
                key=f"notice-{n}", recipient={"id": f"c{n}", "email": f"c{n}@example.com"},
                channels=["email"], template="notice/v1", data={"n": n})
                for n in range(first, first + 500)])
        workers = [await start(config, log) for log in logs]
        next_kill = time.monotonic() + KILL_EVERY_S
        deadline = time.monotonic() + GUARD_S
        on_fallback = on_primary = 0
        while True:
            now = time.monotonic()
            if now >= next_kill and kills < MAX_KILLS:
                index = kills % WORKERS
                workers[index].send_signal(signal.SIGKILL)
                await workers[index].wait()
                workers[index] = await start(config, logs[index])
                kills += 1
                next_kill = time.monotonic() + KILL_EVERY_S
            if down_at is None and accepted(primary) >= N // 4:
                await primary.close()  # its port refuses connections from now
                down_at = time.monotonic()
                on_fallback = accepted(fallback)
            elif down_at is not None and took_over_at is None and \
                    accepted(fallback) > on_fallback:
                took_over_at = now
            if up_at is None and down_at is not None and now >= down_at + DOWN_S:
                primary = await serve(core=primary.core, port=primary.port)
                up_at = time.monotonic()
                on_primary = accepted(primary)
            elif up_at is not None and back_at is None and accepted(primary) > on_primary:
                back_at = now
            states = (await runtime.store.intent_counts()).get("email", {})
            if states == {State.ACCEPTED.value: N} and up_at is not None:
                break
            if now > deadline:
                raise AssertionError(f"not settled within {GUARD_S:g} s after {kills} "
                                     f"kills: {states}")
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # a late duplicate would have landed by now
        intents = await runtime.store.intent_find(states=[State.ACCEPTED], limit=N + 1)
        stats = {name: s.core.stats()["channels"]["email"]
                 for name, s in (("primary", primary), ("fallback", fallback))}
        where = {i.key: (primary.core.lookup(i.key, "email"),
                         fallback.core.lookup(i.key, "email")) for i in intents}
    finally:
        for process in workers:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                await asyncio.wait_for(process.wait(), 30)
        await runtime.close()
        await primary.close()
        await fallback.close()

    assert down_at is not None and up_at is not None
    figures = (f"{kills} kills; primary accepted {stats['primary']['accepted_keys']}, "
               f"lost {stats['primary']['lost_responses']} answers; fallback accepted "
               f"{stats['fallback']['accepted_keys']}; fallback took over "
               f"{None if took_over_at is None else round(took_over_at - down_at, 3)} s "
               f"after the primary stopped; traffic back on the primary "
               f"{None if back_at is None else round(back_at - up_at, 3)} s after it "
               f"returned")
    print(figures)
    assert kills >= 3 and stats["primary"]["lost_responses"] > 0, figures
    # 0 lost: every intent accepted, its receipt the one the sandbox that has it issued
    assert len(intents) == N, figures
    for intent in intents:
        on_a, on_b = where[intent.key]
        assert (on_a is None) != (on_b is None), f"{intent.key}: {on_a}, {on_b}"
        assert (on_a or on_b) == ("email", intent.receipt)
    # 0 twice, by the sandboxes' own counts, and the fallback never over its own quota
    assert stats["primary"]["accepted_keys"] + stats["fallback"]["accepted_keys"] == N
    assert stats["fallback"]["quota_violations"] == 0, stats["fallback"]
    assert stats["primary"]["keys_accepted_twice"] == 0
    assert stats["fallback"]["keys_accepted_twice"] == 0
    # the fallback took over at once, and the traffic came back within the circuit's bound
    assert took_over_at is not None and took_over_at - down_at < 2.0, figures
    assert back_at is not None and back_at - up_at < OPEN_S + 1.0, figures
