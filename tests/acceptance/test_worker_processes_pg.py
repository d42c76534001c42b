"""``tidings worker --processes N`` on PostgreSQL (needs a server: see tests/conftest.py;
skips without one, fails under CI).

One supervised command runs the channel's worker processes against the sandbox HTTP
server; one child is SIGKILLed mid-run and started again by the supervisor; SIGTERM to
the command stops them all. The witness is the sandbox's own count: every key
accepted exactly once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.states import State
from tidings.runtime import build_runtime
from tidings.sandbox import LatencySpec, SandboxConfig, serve

pytestmark = pytest.mark.slow

INTENTS = 600
GUARD_S = 120.0  # only against a hang


def children_of(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.update(int(p) for p in text)
    return found


def worker_children(pid: int) -> set[int]:
    """The supervisor's worker processes (not multiprocessing's resource tracker)."""
    return {c for c in children_of(pid)
            if b"resource_tracker" not in Path(f"/proc/{c}/cmdline").read_bytes()}


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped)."""
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


async def until(predicate: object, what: str) -> None:
    assert callable(predicate)
    for _ in range(int(GUARD_S / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_supervised_workers_on_postgres_deliver_each_key_once(
        pg_url: str, tmp_path: Path) -> None:
    config = SandboxConfig(dedupe=False, quotas={"email": 100_000},
                           latency={"email": LatencySpec(median_ms=20, p99_ms=40)})
    server = await serve(config, "127.0.0.1", 0)
    settings_file = tmp_path / "tidings.toml"
    settings_file.write_text(
        f'store = "{pg_url}"\n'
        f'[worker]\nlease_s = 2.0\nreconcile_every_s = 0.5\n'
        f'[reconciler]\nlost_after_s = 2.0\n'
        f'[channels.email]\nmax_in_flight = 8\n'
        f'provider = {{ kind = "sandbox", url = "{server.url}" }}\n')
    runtime = await build_runtime(Settings.load(settings_file))
    email = lambda: server.core.stats()["channels"].get("email", {})  # noqa: E731
    command = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tidings", "worker", "--channel", "email", "--processes", "3",
        "--config", str(settings_file),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        await until(lambda: len(worker_children(command.pid)) == 3, "three workers")
        await runtime.notify_many([
            NotifyRequest(key=f"order-{i}", recipient={"id": f"c{i}",
                          "email": f"c{i}@example.com"}, channels=["email"], template="t/v1")
            for i in range(INTENTS)])
        # A worker is killed while sends are in flight ...
        await until(lambda: email().get("accepted", 0) >= INTENTS // 4, "a quarter sent")
        victim = min(worker_children(command.pid))
        os.kill(victim, signal.SIGKILL)
        # ... and the supervisor starts another in its place.
        await until(lambda: len(worker_children(command.pid) - {victim}) == 3, "a restart")
        await until(lambda: email().get("accepted_keys", 0) >= INTENTS, "every key accepted")

        command.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(command.communicate(), timeout=GUARD_S)
        assert command.returncode == 0, stderr.decode()[-3000:]
        assert "exited with -9" in stderr.decode()

        stats = email()
        assert stats["accepted_keys"] == INTENTS
        assert stats["keys_accepted_twice"] == 0, stats["keys_accepted_twice_sample"]
        counts = await runtime.store.intent_counts()
        assert counts == {"email": {State.ACCEPTED.value: INTENTS}}
    finally:
        if command.returncode is None:
            command.kill()
            await command.wait()
        await runtime.close()
        await server.close()


async def test_workers_stop_when_their_supervisor_is_killed(tmp_path: Path) -> None:
    # SQLite is enough here: what is tested is the processes, not the store.
    settings_file = tmp_path / "tidings.toml"
    settings_file.write_text(f'store = "sqlite:///{tmp_path / "t.db"}"\n[channels.email]\n'
                             'provider = { kind = "sandbox-twin" }\n')
    command = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tidings", "worker", "--channel", "email", "--processes", "2",
        "--config", str(settings_file),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        await until(lambda: len(worker_children(command.pid)) == 2, "two workers")
        workers = worker_children(command.pid)
        command.kill()
        await command.wait()
        # Each worker was told to stop when its parent died, and does.
        await until(lambda: not any(alive(pid) for pid in workers),
                    "the orphaned workers to exit")
    finally:
        if command.returncode is None:
            command.kill()
            await command.wait()
