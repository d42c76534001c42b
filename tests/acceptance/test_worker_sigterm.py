"""SIGTERM to a worker process: work in hand is finished or released, never stranded.

The sandbox answers slowly, so the signal lands while sends are in flight and more
intents wait for the pacer. The worker must exit by itself, leave no intent claimed,
and the ledger must agree with the sandbox's own count of what it accepted.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from tidings.config.settings import Settings
from tidings.core.states import ACCEPTED_FAMILY, State
from tidings.runtime import build_runtime
from tidings.sandbox import LatencySpec, SandboxConfig, serve

pytestmark = pytest.mark.slow

INTENTS = 40


async def test_sigterm_finishes_or_releases_in_flight_work(tmp_path: Path) -> None:
    # Given a sandbox that takes 400 ms per send and a channel with 4 sends in flight
    config = SandboxConfig(dedupe=False, quotas={"email": 100_000},
                           latency={"email": LatencySpec(median_ms=400, p99_ms=400)})
    server = await serve(config, "127.0.0.1", 0)
    settings_file = tmp_path / "tidings.toml"
    settings_file.write_text(
        f'store = "sqlite:///{tmp_path / "t.db"}"\n'
        f'[channels.email]\nmax_in_flight = 4\n'
        f'provider = {{ kind = "sandbox", url = "{server.url}" }}\n')
    runtime = await build_runtime(Settings.load(settings_file))
    try:
        for i in range(INTENTS):
            await runtime.notify(key=f"order-{i}", recipient={"id": f"c{i}",
                                 "email": f"c{i}@example.com"},
                                 channels=["email"], template="t")
        worker = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tidings", "worker", "--channel", "email",
            "--config", str(settings_file), "--no-reconcile",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        # When sends are in flight, the worker gets SIGTERM
        for _ in range(200):
            if server.core.stats()["channels"].get("email", {}).get("requests", 0) >= 2:
                break
            await asyncio.sleep(0.05)
        worker.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(worker.communicate(), timeout=20)

        # Then it exits cleanly, with nothing left claimed
        assert worker.returncode == 0, stderr.decode()[-2000:]
        intents = [await runtime.store.intent_get(f"order-{i}:email") for i in range(INTENTS)]
        states = [i.state for i in intents if i is not None]
        assert len(states) == INTENTS
        assert State.CLAIMED not in states
        accepted = {i.key for i in intents if i is not None and i.state in ACCEPTED_FAMILY}
        assert 0 < len(accepted) < INTENTS  # some finished, the rest were released
        # and the ledger agrees with the sandbox, key by key
        stats = server.core.stats()["channels"]["email"]
        assert stats["accepted_keys"] == len(accepted)
        assert all(server.core.lookup(key) is not None for key in accepted)
        released = [i for i in intents if i is not None and i.state == State.RETRYABLE]
        for intent in released:
            assert "released" in [e.type for e in await runtime.store.events_for(intent.key)]
    finally:
        await runtime.close()
        await server.close()
