"""Guardrails as an operator meets them: real scheduler and worker processes, the
sandbox HTTP server rejecting a fifth of one campaign's recipients.

Two campaigns share the email channel. The sandbox rejects every address at
``@reject.example``; a fifth of alpha's audience has one, none of beta's. Admission
runs in small pages so it is still going when sends come back: alpha's admission is
paused by its rejection-rate guardrail within one window of its first rejection,
beta is admitted to the end, every admitted intent is delivered or rejected (the
sandbox's own counts agree), and only an operator's resume lets alpha go on, with the
reason shown first. PostgreSQL needs a server (skips without one, fails under CI).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.crm import QUERY
from tidings.config.settings import Settings
from tidings.core.states import State
from tidings.runtime import Runtime, build_runtime
from tidings.sandbox import SandboxConfig, SandboxServer, serve

pytestmark = pytest.mark.slow

MEMBERS = 2_500  # beta's audience
ALPHA_MEMBERS = 10_000  # large enough that its admission outlasts a slow worker's start
WINDOW_S = 5.0
GUARD_S = 120.0  # only against a hang


def write_audience(path: Path, *, members: int, rejected_every: int | None) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id TEXT PRIMARY KEY, email TEXT)")
        conn.executemany("INSERT INTO customers VALUES (?, ?)", [
            (f"c{i:05d}", f"c{i}@reject.example" if rejected_every and i % rejected_every == 0
             else f"c{i}@example.com") for i in range(members)])


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

    async def occurrence(self, campaign: str) -> Any:
        [one] = await self.runtime.store.occurrence_list(campaign)
        return one

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tidings", *args, "--config",
                               str(self.settings_file)], capture_output=True, text=True,
                              timeout=60, check=False)


@pytest.fixture(params=["sqlite", "postgres"])
async def rig(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Rig]:
    url = (f"sqlite:///{tmp_path / 't.db'}" if request.param == "sqlite"
           else request.getfixturevalue("pg_url"))
    write_audience(tmp_path / "alpha.db", members=ALPHA_MEMBERS, rejected_every=5)
    write_audience(tmp_path / "beta.db", members=MEMBERS, rejected_every=None)
    server = await serve(SandboxConfig(dedupe=False, quotas={"email": 100_000},
                                       reject_addresses=("@reject.example",)), "127.0.0.1", 0)
    campaigns = "".join(f'''
[campaigns.{name}]
cron = "0 0 * * *"
channels = ["email"]
template = "digest"
grace_s = 86400
expires_after_s = 172800
audience = {{ sql = {{ url = "sqlite:///{tmp_path / f'{name}.db'}", query = "{QUERY}" }} }}
''' for name in ("alpha", "beta"))
    settings_file = tmp_path / "tidings.toml"
    settings_file.write_text(f'''
store = "{url}"
[scheduler]
page_size = 25
max_pages = 1
interval_s = 0.2
[worker]
reconcile_every_s = 0.25
[guardrails]
window_s = {WINDOW_S}
min_sends = 20
rejection_rate = 0.1
[guardrails.channels.email]
rejection_rate = 0.5  # the channel as a whole is judged more loosely
[channels.email]
max_in_flight = 16
provider = {{ kind = "sandbox", url = "{server.url}" }}
{campaigns}''')
    runtime = await build_runtime(Settings.load(settings_file))
    await runtime.store.migrate(now=runtime.clock.now())
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


async def test_rejections_pause_that_campaign_and_only_an_operator_resumes_it(rig: Rig) -> None:
    await rig.start("worker", "--channel", "email")
    # Admission starts once the worker is up, so sends come back while it runs.
    await rig.until(lambda: "starting" in (rig.logs / "worker.log").read_text(
        errors="replace"), "the worker's start")
    await rig.start("scheduler")
    store = rig.runtime.store

    first_rejection: list[float] = []

    async def alpha_tripped() -> bool:
        if not first_rejection and rig.server.core.stats()["channels"].get(
                "email", {}).get("rejected", 0):
            first_rejection.append(time.time())  # only alpha has rejected addresses
        return any(e.type == "guardrail_tripped"
                   for e in await store.events_for("admission/campaign/alpha"))

    await rig.until(alpha_tripped, "alpha's guardrail")
    [trip] = await store.events_for("admission/campaign/alpha")
    assert "rejection_rate" in (trip.detail or "")
    # Paused within one window of the first rejection the sandbox answered.
    assert first_rejection and trip.at - first_rejection[0] <= WINDOW_S, \
        (trip.at, first_rejection)
    status = json.loads(rig.cli("status", "--json").stdout)
    assert status["campaigns"]["alpha"]["paused"] is True
    assert status["campaigns"]["alpha"]["paused_reason"].startswith("guardrail: ")
    assert [t["name"] for t in status["guardrails_tripped"]] == ["alpha"]

    # Beta goes on to the end; alpha stops short of its audience.
    async def beta_done() -> bool:
        return (await rig.occurrence("beta")).status == "done"

    await rig.until(beta_done, "beta fully admitted")
    alpha = await rig.occurrence("alpha")
    assert alpha.status == "admitting" and alpha.admitted < ALPHA_MEMBERS, alpha

    # Every admitted intent is delivered or rejected; the sandbox agrees.
    async def settled() -> bool:
        counts = await store.intent_counts()
        email = counts.get("email", {})
        return set(email) <= {State.ACCEPTED.value, State.REJECTED.value}

    await rig.until(settled, "every admitted intent settled")
    sandbox = rig.server.core.stats()["channels"]["email"]
    ledger = (await store.intent_counts())["email"]
    assert sandbox["accepted_keys"] == ledger[State.ACCEPTED.value]
    assert sandbox["keys_accepted_twice"] == 0
    alpha_now = await rig.occurrence("alpha")
    assert alpha_now.admitted == alpha.admitted  # no admission while paused
    assert ledger[State.ACCEPTED.value] + ledger[State.REJECTED.value] == \
        MEMBERS + alpha.admitted

    # An operator resumes: the reason is shown first, and alpha admits again.
    resumed = rig.cli("admission", "resume", "--campaign", "alpha", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert "guardrail: rejection_rate" in resumed.stderr
    assert json.loads(resumed.stdout)["was"]["reason"].startswith("guardrail: ")

    async def alpha_admits() -> bool:
        return (await rig.occurrence("alpha")).admitted > alpha.admitted

    await rig.until(alpha_admits, "alpha admitting again after the resume")
