"""A worker killed after its request left, before the reply, on each real adapter
against the sandbox speaking that provider's dialect with dedupe off: the survivors
settle every send by the provider's lookup, and the sandbox's own counts show every key
accepted exactly once.

As ``test_crash_points.py``, with the Postmark, SendGrid and Twilio adapters instead of
the sandbox's own API: ``crash_worker.py`` dies with ``os._exit(137)`` at ``after_send``
(the sandbox answers after 300 ms, the worker dies after 50) or ``after_reply``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tidings.config.settings import Settings
from tidings.core.states import DONE, State
from tidings.runtime import Runtime, build_runtime
from tidings.sandbox import LatencySpec, SandboxConfig, SandboxServer, serve
from tidings.sandbox.dialects import DialectSettings

pytestmark = pytest.mark.slow

CRASH_WORKER = Path(__file__).with_name("crash_worker.py")
INTENTS = 30
LEASE_S = 1.0
VISIBILITY_S = 1.5
SEND_LATENCY_MS = 300.0
EXIT_AFTER_MS = 50.0
RECOVERY_DEADLINE_S = 30.0
ENV = {"POSTMARK_SERVER_TOKEN": "pm-1", "SENDGRID_API_KEY": "SG.2", "TWILIO_AUTH_TOKEN": "tw-3"}


def channel_settings(dialect: str, url: str, templates: Path) -> dict[str, Any]:
    provider: dict[str, Any] = {
        "postmark": {"kind": "postmark", "from_address": "news@example.com", "base_url": url},
        "sendgrid": {"kind": "sendgrid", "from_address": "news@example.com", "base_url": url},
        "twilio": {"kind": "twilio", "account_sid": "AC1", "from_number": "+15550001111",
                   "base_url": url},
    }[dialect]
    kind = "sms" if dialect == "twilio" else "email"
    return {"kind": kind, "templates": str(templates), "lookup_settle_s": 0.0,
            "provider": {**provider, "timeout_s": 5.0}}


async def serve_dialect(dialect: str, latency_ms: float) -> SandboxServer:
    config = SandboxConfig(dedupe=False, quotas={"email": 100_000, "sms": 100_000},
                           latency={c: LatencySpec(median_ms=latency_ms, p99_ms=latency_ms)
                                    for c in ("email", "sms")})
    return await serve(config, "127.0.0.1", 0, dialects=DialectSettings(dialects=(dialect,)))


@pytest.mark.parametrize("point", ["after_send", "after_reply"])
@pytest.mark.parametrize("dialect", ["postmark", "sendgrid", "twilio"])
async def test_a_worker_killed_mid_send_on_a_real_adapter_repeats_nothing(
        tmp_path: Path, dialect: str, point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox = await serve_dialect(dialect, SEND_LATENCY_MS if point == "after_send" else 0.0)
    channel = "sms" if dialect == "twilio" else "email"
    templates = tmp_path / "templates"
    folder = templates / "receipt" / "v1"
    folder.mkdir(parents=True)
    for name, text in (("subject.txt", "Receipt"), ("body.txt", "Thank you."),
                       ("sms.txt", "Thank you.")):
        (folder / name).write_text(text)
    spec = channel_settings(dialect, sandbox.url, templates)
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    db = tmp_path / "crash.db"
    rt = await build_runtime(Settings.parse({
        "store": f"sqlite:///{db}", "channels": {channel: spec},
        "worker": {"lease_s": LEASE_S, "visibility_s": VISIBILITY_S},
        "reconciler": {"uncertain_after_s": 0.1, "lost_after_s": 2.0}}))
    try:
        # given thirty intents, one recipient each (Twilio finds a send by recipient)
        keys = [(await rt.notify(key=f"order-{i:03d}", recipient={
            "id": f"c{i:03d}", "email": f"c{i:03d}@example.com", "phone": f"+1555{i:07d}"},
            channels=[channel], template="receipt/v1"))[0] for i in range(INTENTS)]

        # when a worker process dies after its request left (or after the reply came)
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(CRASH_WORKER), "--db", str(db), "--url", sandbox.url,
            "--crash-at", point, "--lease-s", str(LEASE_S), "--visibility-s",
            str(VISIBILITY_S), "--exit-after-ms", str(EXIT_AFTER_MS), "--channel", channel,
            "--channel-json", json.dumps(spec), env={**os.environ, **ENV},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(process.communicate(), timeout=30)
        assert process.returncode == 137, err.decode(errors="replace")
        at_crash = sandbox.core.stats()["channels"][channel]
        assert at_crash["accepted_keys"] >= 1  # the provider took sends nobody recorded

        # and a healthy worker and the reconciler take over
        await recover(rt, channel)

        # then the provider accepted every key exactly once
        stats = sandbox.core.stats()["channels"][channel]
        assert stats["keys_accepted_twice"] == 0, stats["keys_accepted_twice_sample"]
        assert stats["accepted_keys"] == stats["accepted"] == INTENTS
        assert await rt.store.intent_counts() == {channel: {"accepted": INTENTS}}
        for key in keys:
            intent = await rt.store.intent_get(key)
            found = sandbox.core.lookup(key, channel)
            assert intent is not None and found is not None and intent.receipt == found[1]
    finally:
        await rt.close()
        await sandbox.close()


async def recover(rt: Runtime, channel: str) -> None:
    worker = rt.worker(channel, "recovery-worker")
    reconciler = rt.reconciler()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RECOVERY_DEADLINE_S
    while loop.time() < deadline:
        await worker.run_once()
        await reconciler.run_pass(now=rt.clock.now())
        intents = await rt.store.intent_find(states=list(State), limit=10 * INTENTS)
        depth = await rt.transport.depth(channel, now=rt.clock.now())
        if (all(i.state in DONE for i in intents)
                and depth.ready + depth.delayed + depth.in_flight == 0):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not settled after {RECOVERY_DEADLINE_S} s: "
                         f"{await rt.store.intent_counts()}")
