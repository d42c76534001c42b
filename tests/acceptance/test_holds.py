"""A delivery hold as an operator meets it: a real worker process, the sandbox HTTP
server with deduplication off (a second send of a key would show), the CLI.

The operator holds the digest campaign; its intents and some one-off ones are queued;
the worker sends the one-off ones and parks the digest, and the sandbox's counts stay
flat while the hold stands. A few digest intents go stale while held: the worker's
holds sweep expires them and ``tidings status`` reports them. The release delivers
every other digest intent exactly once, and never the stale ones.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.crm import QUERY
from tidings.config.settings import Settings
from tidings.core.model import IntentDraft
from tidings.runtime import Runtime, build_runtime
from tidings.sandbox import SandboxConfig, SandboxServer, serve

pytestmark = pytest.mark.slow

HELD = 120
STALE = 3
ONE_OFF = 10
STALE_AFTER_S = 6.0
GUARD_S = 120.0  # only against a hang


@dataclass
class Rig:
    settings_file: Path
    runtime: Runtime
    server: SandboxServer
    processes: list[asyncio.subprocess.Process]
    logs: Path

    async def start(self, *args: str) -> None:
        log = (self.logs / f"{args[0]}.log").open("ab")
        self.processes.append(await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tidings", *args, "--config", str(self.settings_file),
            stdout=log, stderr=log, env={**os.environ, "PYTHONUNBUFFERED": "1"}))
        log.close()

    def alive(self) -> None:
        for p in self.processes:
            assert p.returncode is None, "\n".join(
                f.read_text(errors="replace")[-2000:] for f in self.logs.glob("*.log"))

    async def until(self, check: Callable[[], Any], what: str) -> None:
        for _ in range(int(GUARD_S / 0.1)):
            result = check()
            if asyncio.iscoroutine(result):
                result = await result
            if result:
                return
            self.alive()
            await asyncio.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}")

    def cli(self, *args: str) -> Any:
        done = subprocess.run([sys.executable, "-m", "tidings", *args, "--config",
                               str(self.settings_file), "--json"], capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def sandbox(self) -> dict[str, int]:
        channels: dict[str, dict[str, int]] = self.server.core.stats()["channels"]
        return channels.get("email", {"requests": 0, "accepted_keys": 0,
                                      "keys_accepted_twice": 0})

    async def states(self) -> dict[str, int]:
        return (await self.runtime.store.intent_counts()).get("email", {})


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    with sqlite3.connect(tmp_path / "crm.db") as conn:
        conn.execute("CREATE TABLE customers (id TEXT PRIMARY KEY, email TEXT)")
    server = await serve(SandboxConfig(dedupe=False, quotas={"email": 100_000}),
                         "127.0.0.1", 0)
    settings_file = tmp_path / "tidings.toml"
    settings_file.write_text(f'''
store = "sqlite:///{tmp_path / 't.db'}"
[worker]
reconcile_every_s = 0.25
[channels.email]
max_in_flight = 16
provider = {{ kind = "sandbox", url = "{server.url}" }}
[campaigns.digest]
cron = "0 0 1 1 *"
channels = ["email"]
template = "digest"
audience = {{ sql = {{ url = "sqlite:///{tmp_path / 'crm.db'}", query = "{QUERY}" }} }}
''')
    runtime = await build_runtime(Settings.load(settings_file))
    one = Rig(settings_file=settings_file, runtime=runtime, server=server, processes=[],
              logs=tmp_path)
    try:
        yield one
    finally:
        for p in one.processes:
            if p.returncode is None:
                p.terminate()
        for p in one.processes:
            try:
                await asyncio.wait_for(p.wait(), 20)
            except TimeoutError:
                p.kill()
                await p.wait()
        await runtime.close()
        await server.close()


def drafts(prefix: str, n: int, *, campaign: str | None, now: float,
           expires_in_s: float) -> list[IntentDraft]:
    return [IntentDraft(key=f"{prefix}/{i:04d}/email", channel="email",
                        recipient_id=f"{prefix}-{i}", address=f"{prefix}-{i}@example.com",
                        template="digest", due_at=now, expires_at=now + expires_in_s,
                        campaign=campaign, occurrence=None if campaign is None
                        else f"{campaign}/2026-12-01") for i in range(n)]


async def test_a_held_campaign_waits_unsent_and_its_release_delivers_it_once(rig: Rig) -> None:
    # given the digest held by an operator, and work queued for it and beside it
    held = rig.cli("hold", "--campaign", "digest", "--reason", "template review",
                   "--by", "ops:ada")
    assert (held["held"], held["by"]) == (True, "ops:ada")
    store, now = rig.runtime.store, rig.runtime.clock.now()
    await store.intent_admit(
        drafts("digest", HELD, campaign="digest", now=now, expires_in_s=86_400.0)
        + drafts("stale", STALE, campaign="digest", now=now, expires_in_s=STALE_AFTER_S)
        + drafts("one-off", ONE_OFF, campaign=None, now=now, expires_in_s=86_400.0),
        now=now, enqueue=rig.runtime.enqueue_in_store)

    # when a worker process serves the channel
    await rig.start("worker", "--channel", "email")

    async def parked_and_sent() -> bool:
        states = await rig.states()
        return (states.get("parked", 0) + states.get("expired", 0) == HELD + STALE
                and states.get("accepted", 0) == ONE_OFF)

    await rig.until(parked_and_sent, "the digest parked and the one-off intents sent")

    # then nothing of the digest reaches the sandbox while held: its counts stay flat
    assert rig.sandbox()["requests"] == ONE_OFF

    async def stale_expired() -> bool:
        return (await rig.states()).get("expired", 0) == STALE

    await rig.until(stale_expired, "the stale intents expired while held")
    await asyncio.sleep(1.0)  # a few reconciler and worker rounds with the hold in place
    assert rig.sandbox()["requests"] == ONE_OFF
    assert await rig.states() == {"parked": HELD, "expired": STALE, "accepted": ONE_OFF}
    status = rig.cli("status")
    assert status["holds"]["expired_while_held"] == STALE
    [hold] = status["holds"]["active"]
    assert (hold["name"], hold["by"], hold["parked"]) == ("digest", "ops:ada", HELD)

    # when the operator releases it
    released = rig.cli("release", "--campaign", "digest", "--by", "ops:grace")
    assert (released["was_held"], released["republished"], released["expired"]) == (
        True, HELD, 0)

    # then every held intent is delivered exactly once, and the stale ones never
    async def delivered() -> bool:
        return (await rig.states()).get("accepted", 0) == HELD + ONE_OFF

    await rig.until(delivered, "the released digest delivered")
    sandbox = rig.sandbox()
    assert (sandbox["requests"], sandbox["accepted_keys"], sandbox["keys_accepted_twice"]) == (
        HELD + ONE_OFF, HELD + ONE_OFF, 0)
    assert all(rig.server.core.lookup(f"stale/{i:04d}/email", "email") is None
               for i in range(STALE))
    trail = await store.events_for("hold/campaign/digest")
    assert [(e.type, e.worker) for e in trail] == [("hold", "ops:ada"),
                                                    ("hold_released", "ops:grace")]
