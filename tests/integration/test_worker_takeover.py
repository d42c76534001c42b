"""A SIGKILLed worker's work is taken over in seconds, not after its leases expire.

Two real ``tidings worker`` processes serve one paced channel through the sandbox HTTP
server (dedupe off: a key sent twice is accepted twice); one is SIGKILLed while it
holds leases. Its marker is seen gone at once (``tidings.core.liveness``), the reconciler of
the survivor ends its leases (to uncertain, settled by the sandbox's lookup) and makes
its messages visible again, so its keys are settled long before ``lease_s`` (30 s
here). The witness is the sandbox's own count: every key accepted, none twice.

Runs on SQLite and on PostgreSQL (``pg_url``: skips without a server, fails under CI).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from support import waits
from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.liveness import LivenessConfig, gone
from tidings.core.states import State
from tidings.runtime import Runtime, build_runtime
from tidings.sandbox import LatencySpec, SandboxConfig, serve

#: A channel on the in-process sandbox, named as such: no channel has a provider by default.
TWIN = {"provider": {"kind": "sandbox-twin"}}

pytestmark = pytest.mark.slow

INTENTS = 1200
LEASE_S = 30.0
GUARD_S = 120.0  # only against a hang


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'takeover.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


async def until(predicate: Callable[[], Any], what: str, guard_s: float = GUARD_S) -> None:
    await waits.until(predicate, what, guard_s)


async def claimed_by(runtime: Runtime, pid: int) -> set[str]:
    """Keys whose lease is held by the worker of process ``pid`` (ids are host:pid:…)."""
    claimed = await runtime.store.intent_find(states=[State.CLAIMED], limit=100_000)
    return {i.key for i in claimed if (i.lease_owner or "").split(":")[1:2] == [str(pid)]}


async def test_a_killed_workers_leases_move_in_seconds(store_url: str, tmp_path: Path) -> None:
    server = await serve(SandboxConfig(dedupe=False, quotas={"email": 100_000},
                                       latency={"email": LatencySpec(median_ms=20, p99_ms=40)}),
                         "127.0.0.1", 0)
    settings_file = tmp_path / "tidings.toml"
    settings_file.write_text(
        f'store = "{store_url}"\n'
        f'[worker]\nlease_s = {LEASE_S}\nvisibility_s = {2 * LEASE_S}\n'
        'reconcile_every_s = 1.0\nheartbeat_s = 0.5\ngone_after_s = 3.0\n'
        '[reconciler]\nuncertain_after_s = 0.5\n'
        f'[channels.email]\nquota = "150/s"\n'
        f'provider = {{ kind = "sandbox", url = "{server.url}" }}\n')
    runtime = await build_runtime(Settings.load(settings_file))
    email = lambda: server.core.stats()["channels"].get("email", {})  # noqa: E731
    logs = [tmp_path / f"worker-{n}.log" for n in range(2)]
    workers = []
    try:
        for log_path in logs:
            with log_path.open("wb") as sink:
                workers.append(await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "tidings", "--log-format", "json", "worker",
                    "--channel", "email", "--config", str(settings_file),
                    stdout=asyncio.subprocess.DEVNULL, stderr=sink,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"}))
        await runtime.notify_many([
            NotifyRequest(key=f"order-{i}", recipient={"id": f"c{i}",
                          "email": f"c{i}@example.com"}, channels=["email"], template="t/v1")
            for i in range(INTENTS)])
        victim, survivor = workers
        await until(lambda: email().get("accepted", 0) >= INTENTS // 5, "a fifth sent")
        await until(lambda: claimed_by(runtime, victim.pid), "the victim holding leases")
        held = await claimed_by(runtime, victim.pid)
        victim.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        await victim.wait()

        await until(lambda: _none_left(runtime, victim.pid), "the victim's leases ended")
        ended_s = time.monotonic() - killed_at
        await until(lambda: _all_decided(runtime, held), "the victim's sends looked up")
        decided_s = time.monotonic() - killed_at
        await until(lambda: _all_accepted(runtime, held), "the victim's keys settled")
        settled_s = time.monotonic() - killed_at
        await until(lambda: email().get("accepted_keys", 0) >= INTENTS, "every key accepted")
        drained_s = time.monotonic() - killed_at
        print(f"\n[{store_url.split(':')[0]}] SIGKILL with {len(held)} leases held: ended "
              f"after {ended_s:.2f} s, looked up (accepted or sent again) after "
              f"{decided_s:.2f} s, all accepted after {settled_s:.2f} s (in queue order "
              f"behind the backlog; all {INTENTS} after {drained_s:.2f} s); lease_s = "
              f"{LEASE_S:g} s: taken over in {decided_s / LEASE_S:.1%} of it")

        survivor.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(survivor.wait(), timeout=GUARD_S) == 0
        stats = email()
        assert stats["accepted_keys"] == INTENTS
        assert stats["keys_accepted_twice"] == 0, stats["keys_accepted_twice_sample"]
        assert await runtime.store.intent_counts() == {"email": {State.ACCEPTED.value: INTENTS}}
        # Taken over by the liveness path, not by the leases running out.
        types = {e.type for k in held for e in await runtime.store.events_for(k)}
        assert "lease_ended" in types and "lease_expired" not in types
        assert decided_s < LEASE_S
        assert "worker gone" in logs[1].read_text()
    finally:
        for process in workers:
            if process.returncode is None:
                process.kill()
                await process.wait()
        await runtime.close()
        await server.close()


async def _none_left(runtime: Runtime, pid: int) -> bool:
    return not await claimed_by(runtime, pid)


async def _all_decided(runtime: Runtime, keys: set[str]) -> bool:
    """No key claimed or uncertain any more: each found accepted or sent again."""
    for key in keys:
        intent = await runtime.store.intent_get(key)
        if intent is None or intent.state in (State.CLAIMED, State.UNCERTAIN):
            return False
    return True


async def _all_accepted(runtime: Runtime, keys: set[str]) -> bool:
    for key in keys:
        intent = await runtime.store.intent_get(key)
        if intent is None or intent.state != State.ACCEPTED:
            return False
    return True


async def test_a_postgres_marker_goes_with_its_session(pg_url: str, tmp_path: Path) -> None:
    """The advisory lock is the marker: a session that ends (a process killed on another
    host, a backend terminated) shows it gone; the worker is gone once it has also been
    silent for ``fence_s`` (it may live on, but by then it starts no send)."""
    import psycopg

    settings = Settings.parse({"store": pg_url, "channels": {"email": TWIN}})
    runtime = await build_runtime(settings)
    try:
        registry = runtime.registry()
        assert registry is not None
        now = runtime.clock.now()
        assert await registry.register("w-elsewhere", host="another-host", pid=1, now=now)
        [seen] = await registry.running()
        assert seen.marker_held is True
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(backend_pid) FROM workers "
                          "WHERE worker_id = 'w-elsewhere'")
        for _ in range(100):
            [seen] = await registry.running()
            if seen.marker_held is False:
                break
            await asyncio.sleep(0.05)
        assert seen.marker_held is False
        config = LivenessConfig(beat_s=1.0, stale_after_s=6.0)
        assert gone(seen, now=now + config.fence_s - 0.1, host="here", config=config) is None
        assert gone(seen, now=now + config.fence_s, host="here", config=config) is not None
        # A beat takes the lock again on a new session while it was not declared gone.
        assert await registry.beat("w-elsewhere", now=now + 1)
        [seen] = await registry.running()
        assert seen.marker_held is True
        await registry.remove("w-elsewhere")
        assert await registry.running() == []
    finally:
        await runtime.close()
