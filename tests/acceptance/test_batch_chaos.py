"""Batch sends under kills: 0 lost, 0 twice, judged by the sandbox's own counts.

Two ``tidings worker`` processes send one email channel through Postmark's batch
endpoint (the sandbox speaking Postmark's dialect, deduplication off, so a message sent
twice under one key is counted twice), on SQLite and on PostgreSQL. A worker is
SIGKILLed every 2 s and started again (four times), and some answers are lost (each message of a
request decides alone; one lost makes the whole request's answer lost). Every intent
must end accepted, each with the receipt the sandbox issued for its key, and the sandbox
must have accepted every key exactly once: a killed worker's claims, a request cut off
mid-way and every message of a lost answer are settled on their own keys (lookup), none
sent again blindly.
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
from tidings.sandbox import LatencySpec, SandboxConfig, serve
from tidings.sandbox.dialects import STATE_KEY, DialectSettings

pytestmark = pytest.mark.slow

N = 2400
WORKERS = 2
QUOTA = 400  # messages a second: the drain takes about 6 s, long enough for the kills
BATCH = 50
KILL_EVERY_S = 2.0
MIN_KILLS = 3
MAX_KILLS = 4  # then the survivors finish: the test is about what the kills leave
GUARD_S = 180.0


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tidings.db'}"
    return str(request.getfixturevalue("pg_url"))


def write_settings(tmp_path: Path, store_url: str, sandbox_url: str) -> Path:
    folder = tmp_path / "templates" / "notice" / "v1"
    folder.mkdir(parents=True)
    (folder / "subject.txt").write_text("Notice {{ n }}")
    (folder / "body.txt").write_text("Notice number {{ n }}.")
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
kind = "email"
templates = "{tmp_path / 'templates'}"
quota = "{QUOTA}/s"
max_in_flight = 200
lookup_settle_s = 0.0
batch = {{ max_messages = {BATCH}, linger_s = 0.02 }}

[channels.email.provider]
kind = "postmark"
from_address = "notices@tidings.test"
base_url = "{sandbox_url}"
timeout_s = 2.0
''')
    return config


async def start(config: Path, log: Path) -> asyncio.subprocess.Process:
    with log.open("ab") as sink:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tidings", "worker", "--channel", "email",
            "--config", str(config), stdout=asyncio.subprocess.DEVNULL, stderr=sink,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "POSTMARK_SERVER_TOKEN": "pm-1"})


async def test_batches_under_kills_lose_nothing_and_send_nothing_twice(
        tmp_path: Path, store_url: str) -> None:
    sandbox = await serve(SandboxConfig(
        dedupe=False, lost_response=0.002, timeout=0.0005, hang_s=2.5,
        quotas={"email": 100_000},
        latency={"email": LatencySpec(median_ms=20, p99_ms=80)}),
        dialects=DialectSettings(dialects=("postmark",)))
    config = write_settings(tmp_path, store_url, sandbox.url)
    runtime = await build_runtime(Settings.load(config))
    logs = [tmp_path / f"worker-{i}.log" for i in range(WORKERS)]
    workers: list[asyncio.subprocess.Process] = []
    kills = 0
    try:
        for first in range(0, N, 400):
            await runtime.notify_many([NotifyRequest(
                key=f"notice-{n}", recipient={"id": f"c{n}", "email": f"c{n}@example.com"},
                channels=["email"], template="notice/v1", data={"n": n})
                for n in range(first, first + 400)])
        workers = [await start(config, log) for log in logs]
        next_kill = time.monotonic() + KILL_EVERY_S
        deadline = time.monotonic() + GUARD_S
        while True:
            if time.monotonic() >= next_kill and kills < MAX_KILLS:
                index = kills % WORKERS
                workers[index].send_signal(signal.SIGKILL)
                await workers[index].wait()
                workers[index] = await start(config, logs[index])
                kills += 1
                next_kill = time.monotonic() + KILL_EVERY_S
            states = (await runtime.store.intent_counts()).get("email", {})
            if states == {State.ACCEPTED.value: N} and kills >= MIN_KILLS:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"not settled within {GUARD_S:g} s after {kills} "
                                     f"kills: {states}")
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)  # a late duplicate would have landed by now
        receipts = {i.key: i.receipt for i in await runtime.store.intent_find(
            states=[State.ACCEPTED], limit=N + 1)}
        stats = sandbox.core.stats()["channels"]["email"]
        batches = list(sandbox.runner.app[STATE_KEY].batches)
    finally:
        for process in workers:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                await asyncio.wait_for(process.wait(), 30)
        await runtime.close()
        await sandbox.close()

    figures = (f"{kills} kills, {len(batches)} requests for {sum(batches)} messages "
               f"(largest {max(batches)}), {stats['lost_responses']} messages in lost "
               f"answers, {stats['timeouts']} in hung requests")
    print(figures)
    # the faults happened, and the messages went in batches (a paced channel starts its
    # sends apart, so a request carries those that start within its linger)
    assert stats["lost_responses"] > 0 and stats["timeouts"] > 0, figures
    assert sum(batches) / len(batches) >= 3 and max(batches) <= BATCH, figures
    # 0 lost: every intent accepted, with the receipt the sandbox gave its key
    assert len(receipts) == N
    assert all(sandbox.core.lookup(key, "email") == ("email", receipt)
               for key, receipt in receipts.items())
    # 0 twice, by the sandbox's own count
    assert stats["accepted_keys"] == N
    assert stats["keys_accepted_twice"] == 0, stats["keys_accepted_twice_sample"]
