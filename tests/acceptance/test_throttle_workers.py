"""Per-recipient throttles across three real worker processes, judged by the sandbox.

Three ``tidings worker`` processes serve one SMS channel whose throttle allows 2 sends
per recipient per window, on PostgreSQL and on SQLite. Many intents go to few
recipients at once. The witness is the sandbox HTTP server in a process of its own,
noting when it accepted each recipient's sends (``tests/support/recipients_sandbox.py``):

- mode ``drop`` (a window of an hour): no recipient gets more than 2 in any window;
  every other intent ends ``throttled``, naming the rule, and the sandbox never saw it;
- mode ``defer`` (a window of 4 s): still never more than 2 in any window, and every
  intent is delivered in the windows after.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tidings.admission.intake import NotifyRequest
from tidings.config.settings import Settings
from tidings.core.states import State
from tidings.runtime import Runtime, build_runtime

SUPPORT = Path(__file__).parent.parent / "support"
LIMIT = 2
RECIPIENTS = 4
PER_RECIPIENT = 6
WORKERS = 3
GUARD_S = 90.0


def phone(n: int) -> str:
    return f"+1555000{n:04d}"


async def until(check: Callable[[], Any], what: str, guard_s: float = GUARD_S) -> None:
    deadline = time.monotonic() + guard_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {guard_s:g} s")
        await asyncio.sleep(0.2)


async def _states(runtime: Runtime) -> dict[str, int]:
    return (await runtime.store.intent_counts()).get("sms", {})


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tidings.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.mark.parametrize(("mode", "window_s"), [("drop", 3600.0), ("defer", 4.0)])
async def test_three_workers_never_send_a_recipient_more_than_the_limit_per_window(
        tmp_path: Path, store_url: str, mode: str, window_s: float) -> None:
    received_file = tmp_path / "received.json"
    sandbox = await asyncio.create_subprocess_exec(
        sys.executable, str(SUPPORT / "recipients_sandbox.py"), "127.0.0.1", "sms",
        str(received_file), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    assert sandbox.stdout is not None
    port = int((await asyncio.wait_for(sandbox.stdout.readline(), timeout=30)).strip())
    settings_file = tmp_path / "tidings.toml"
    settings_file.write_text(
        f'store = "{store_url}"\n'
        "[channels.sms]\n"
        f'provider = {{ kind = "sandbox", url = "http://127.0.0.1:{port}" }}\n'
        f'throttle = {{ limit = {LIMIT}, window_s = {window_s}, mode = "{mode}" }}\n')
    runtime = await build_runtime(Settings.load(settings_file))
    workers: list[asyncio.subprocess.Process] = []
    try:
        for n in range(WORKERS):
            with (tmp_path / f"w{n}.log").open("wb") as sink:
                workers.append(await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "tidings", "worker", "--channel", "sms",
                    "--config", str(settings_file),
                    stdout=asyncio.subprocess.DEVNULL, stderr=sink,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"}))
        registry = runtime.registry()
        assert registry is not None

        async def all_running() -> bool:
            return len(await registry.running()) >= WORKERS

        await until(all_running, "every worker registered", guard_s=60)
        if mode == "defer":
            # Start just after a window opens, so the first sends land in it.
            await asyncio.sleep(window_s - time.time() % window_s + 0.05)
        await runtime.notify_many([
            NotifyRequest(key=f"update-{r}-{i}", recipient={"id": f"cust-{r}",
                                                             "phone": phone(r)},
                          channels=["sms"], template="t")
            for r in range(RECIPIENTS) for i in range(PER_RECIPIENT)])
        total = RECIPIENTS * PER_RECIPIENT

        async def all_settled() -> bool:
            states = await _states(runtime)
            return states.get("accepted", 0) + states.get("throttled", 0) == total

        await until(all_settled, "every intent accepted or throttled")
    finally:
        for process in workers:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for process in workers:
            await asyncio.wait_for(process.wait(), timeout=30)
        sandbox.send_signal(signal.SIGTERM)
        await asyncio.wait_for(sandbox.wait(), timeout=30)
        states = await _states(runtime)
        throttled = await runtime.store.intent_throttled_counts()
        intent = await runtime.store.intent_get("update-0-5:sms")
        await runtime.close()

    received: dict[str, list[float]] = json.loads(received_file.read_text())
    # judged by the sandbox's own times: never more than LIMIT in one window
    per_window = {(to, math.floor(at / window_s)): 0 for to, ats in received.items()
                  for at in ats}
    for to, ats in received.items():
        for at in ats:
            per_window[(to, math.floor(at / window_s))] += 1
    over = sorted({to for (to, _), count in per_window.items() if count > LIMIT})
    assert over == [], per_window
    assert set(received) == {phone(r) for r in range(RECIPIENTS)}
    sent = sum(len(ats) for ats in received.values())
    assert sent == states.get("accepted", 0)
    if mode == "drop":
        # one window (or two, when the run straddles an hour): LIMIT each, the rest dropped
        assert all(len(ats) in (LIMIT, 2 * LIMIT) for ats in received.values()), received
        rule = f"channel:sms ({LIMIT} per {window_s:g} s)"
        assert throttled == {("sms", rule): total - sent}
        assert intent is not None and intent.state in (State.ACCEPTED, State.THROTTLED)
    else:
        # every intent delivered, LIMIT per window, in the windows after the first
        assert sent == total and throttled == {}
        assert all(len(ats) == PER_RECIPIENT for ats in received.values()), received
        windows = {to: sorted({math.floor(at / window_s) for at in ats})
                   for to, ats in received.items()}
        assert all(len(w) >= PER_RECIPIENT // LIMIT for w in windows.values()), windows
