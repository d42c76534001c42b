"""The sandbox server on a real socket, driven by the real SandboxHttpProvider.

Each fault must produce the right Outcome on the client and the right counts on the
server. The server's core reads a FakeClock, so quota windows and HTTP-dates are
deterministic; only latency and hangs take (a little) real time.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from support.crm import free_port
from tidings.core.clock import FakeClock
from tidings.core.model import SendRequest
from tidings.core.outcomes import Accepted, Lookup, Permanent, RateLimited, Transient, Uncertain
from tidings.providers.sandbox import SandboxHttpProvider
from tidings.sandbox import SandboxConfig, SandboxCore, SandboxServer, serve

T0 = 1_780_000_000.0
KEY = "weekly-digest/2026-08-14/cust_1042/email/v3"


class Sandbox:
    """A running server, its clock, and a plain client for the operator endpoints."""

    def __init__(self, server: SandboxServer, clock: FakeClock, admin: httpx.AsyncClient) -> None:
        self.server = server
        self.clock = clock
        self.admin = admin
        self.url = server.url

    async def configure(self, **config: Any) -> None:
        response = await self.admin.post("/v1/config", json=config)
        assert response.status_code == 200, response.text

    async def stats(self, channel: str = "email") -> dict[str, Any]:
        response = await self.admin.get("/v1/stats")
        assert response.status_code == 200
        body: dict[str, Any] = response.json()
        return body["channels"][channel] if channel else body


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    clock = FakeClock(start=T0)
    server = await serve(host="127.0.0.1", port=0, core=SandboxCore(now=clock.now, seed=5))
    async with server, httpx.AsyncClient(base_url=server.url) as admin:
        yield Sandbox(server, clock, admin)


# The default provider sends through aiohttp; a stock httpx client must map the same.
@pytest.fixture(params=["aiohttp", "httpx"])
async def provider(request: pytest.FixtureRequest,
                   sandbox: Sandbox) -> AsyncIterator[SandboxHttpProvider]:
    client = httpx.AsyncClient() if request.param == "httpx" else None
    provider = SandboxHttpProvider(sandbox.url, "email", client=client, clock=sandbox.clock,
                                   timeout_s=0.5)
    yield provider
    await provider.close()
    if client is not None:
        await client.aclose()


def message(key: str = KEY, to: str = "ada@example.com") -> SendRequest:
    return SendRequest(key=key, channel="email", to=to, template="digest", data={},
                       recipient_id="cust_1042")


# ---------------------------------------------------------------- acceptance and dedupe


async def test_accepted_message_is_counted_and_found(sandbox: Sandbox,
                                                     provider: SandboxHttpProvider) -> None:
    outcome = await provider.send(message())
    assert isinstance(outcome, Accepted)
    assert outcome.receipt.startswith("sbx_")
    assert outcome.request_id is not None
    assert await provider.lookup(KEY) == Lookup(found=True, receipt=outcome.receipt)
    assert await provider.lookup("never-sent") == Lookup(found=False)
    email = await sandbox.stats()
    assert (email["requests"], email["accepted"], email["accepted_keys"]) == (1, 1, 1)
    assert email["accepted_per_window"] == {str(int(T0)): 1}


async def test_dedupe_on_returns_the_same_receipt(sandbox: Sandbox,
                                                  provider: SandboxHttpProvider) -> None:
    first = await provider.send(message())
    again = await provider.send(message())
    assert isinstance(first, Accepted) and isinstance(again, Accepted)
    assert again.receipt == first.receipt
    email = await sandbox.stats()
    assert (email["accepted"], email["deduplicated"], email["accepted_twice"]) == (1, 1, 0)


async def test_dedupe_off_accepts_twice_and_says_so(sandbox: Sandbox,
                                                    provider: SandboxHttpProvider) -> None:
    await sandbox.configure(dedupe=False)
    first = await provider.send(message())
    again = await provider.send(message())
    assert isinstance(first, Accepted) and isinstance(again, Accepted)
    assert again.receipt != first.receipt
    email = await sandbox.stats()
    assert (email["accepted"], email["accepted_keys"], email["accepted_twice"]) == (2, 1, 1)
    assert email["keys_accepted_twice_sample"] == [KEY]


async def test_a_key_that_is_not_plain_ascii_round_trips(sandbox: Sandbox,
                                                         provider: SandboxHttpProvider) -> None:
    key = "café/100%/ünïcode:email"
    outcome = await provider.send(message(key=key))
    assert isinstance(outcome, Accepted)
    assert sandbox.server.core.lookup(key) == ("email", outcome.receipt)
    assert await provider.lookup(key) == Lookup(found=True, receipt=outcome.receipt)


# ---------------------------------------------------------------- quota and 429s


async def test_quota_is_enforced_per_one_second_window(sandbox: Sandbox,
                                                       provider: SandboxHttpProvider) -> None:
    await sandbox.configure(quotas={"email": 3})
    outcomes = await asyncio.gather(*(provider.send(message(key=f"k{i}")) for i in range(5)))
    accepted = [o for o in outcomes if isinstance(o, Accepted)]
    limited = [o for o in outcomes if isinstance(o, RateLimited)]
    assert (len(accepted), len(limited)) == (3, 2)
    assert {o.retry_after_s for o in limited} == {1.0}

    sandbox.clock.advance(1.0)
    assert isinstance(await provider.send(message(key="k9")), Accepted)

    email = await sandbox.stats()
    assert email["requests_per_window"] == {str(int(T0)): 5, str(int(T0) + 1): 1}
    assert (email["refused_quota"], email["quota_violations"], email["max_rate_1s"]) == (2, 1, 5)


@pytest.mark.parametrize(
    ("shares", "expected"),
    [
        ({}, 2.0),
        ({"retry_after_date_share": 1.0}, 2.0),
        ({"retry_after_missing_share": 1.0}, None),
    ],
    ids=["delta-seconds", "http-date", "absent"],
)
async def test_injected_429_retry_after_formats(sandbox: Sandbox, provider: SandboxHttpProvider,
                                                shares: dict[str, float],
                                                expected: float | None) -> None:
    await sandbox.configure(rate_limit=1.0, retry_after_s=2, **shares)
    outcome = await provider.send(message())
    assert isinstance(outcome, RateLimited)
    assert outcome.retry_after_s == expected
    email = await sandbox.stats()
    assert (email["refused_injected"], email["accepted"]) == (1, 0)


# ---------------------------------------------------------------- errors


async def test_server_error_is_transient(sandbox: Sandbox, provider: SandboxHttpProvider) -> None:
    await sandbox.configure(server_error=1.0)
    outcome = await provider.send(message())
    assert isinstance(outcome, Transient)
    assert "503" in outcome.reason
    email = await sandbox.stats()
    assert (email["server_errors"], email["accepted"]) == (1, 0)


async def test_rejected_addresses_are_permanent(sandbox: Sandbox,
                                                provider: SandboxHttpProvider) -> None:
    await sandbox.configure(reject_addresses=["@invalid.example"])
    listed = await provider.send(message(key="a", to="bob@invalid.example"))
    malformed = await provider.send(message(key="b", to="no-at-sign"))
    assert isinstance(listed, Permanent) and "rejected" in listed.reason
    assert isinstance(malformed, Permanent) and "malformed" in malformed.reason
    assert (await sandbox.stats())["rejected"] == 2


async def test_fail_addresses_fail_on_every_try(sandbox: Sandbox,
                                                provider: SandboxHttpProvider) -> None:
    await sandbox.configure(fail_addresses=["flaky@example.com"])
    outcomes = [await provider.send(message(to="flaky@example.com")) for _ in range(3)]
    assert all(isinstance(o, Transient) for o in outcomes)
    assert await provider.lookup(KEY) == Lookup(found=False)
    assert (await sandbox.stats())["server_errors"] == 3


async def test_timeout_is_uncertain_and_not_accepted(sandbox: Sandbox,
                                                     provider: SandboxHttpProvider) -> None:
    await sandbox.configure(timeout=1.0, hang_s=30)
    web_server = sandbox.server.runner.server
    assert web_server is not None
    before = len(web_server.connections)  # the admin client's keep-alive connection
    started = time.monotonic()
    outcome = await provider.send(message())
    assert isinstance(outcome, Uncertain)
    assert time.monotonic() - started < 5  # the client's 0.5 s, not the server's 30 s
    # The server lets go of the hung request as soon as the client has given up.
    for _ in range(100):
        if len(web_server.connections) == before:
            break
        await asyncio.sleep(0.01)
    assert len(web_server.connections) == before
    email = await sandbox.stats()
    assert (email["timeouts"], email["accepted"]) == (1, 0)
    await sandbox.configure()
    assert await provider.lookup(KEY) == Lookup(found=False)


async def test_a_hang_is_bounded_by_hang_s(sandbox: Sandbox) -> None:
    await sandbox.configure(timeout=1.0, hang_s=0.1)
    provider = SandboxHttpProvider(sandbox.url, "email", clock=sandbox.clock, timeout_s=10)
    started = time.monotonic()
    outcome = await provider.send(message())
    await provider.close()
    assert isinstance(outcome, Uncertain)
    assert time.monotonic() - started < 5


async def test_lost_response_is_uncertain_but_accepted(sandbox: Sandbox,
                                                       provider: SandboxHttpProvider) -> None:
    await sandbox.configure(lost_response=1.0)
    outcome = await provider.send(message())
    assert isinstance(outcome, Uncertain)

    email = await sandbox.stats()
    assert (email["accepted"], email["lost_responses"]) == (1, 1)
    found = await provider.lookup(KEY)
    assert found.found and found.receipt

    # Retrying under the same key is safe: the sandbox answers with the first receipt.
    await sandbox.configure()
    retried = await provider.send(message())
    assert retried == Accepted(receipt=found.receipt, request_id=retried.request_id)
    assert (await sandbox.stats())["accepted_keys"] == 1


async def test_latency_is_waited_by_the_server(sandbox: Sandbox,
                                               provider: SandboxHttpProvider) -> None:
    await sandbox.configure(latency={"email": 50})
    started = time.monotonic()
    assert isinstance(await provider.send(message()), Accepted)
    assert time.monotonic() - started >= 0.05


@pytest.mark.parametrize("kind", ["aiohttp", "httpx"])
async def test_nothing_listening_is_transient(kind: str) -> None:
    port = free_port()
    client = httpx.AsyncClient() if kind == "httpx" else None
    provider = SandboxHttpProvider(f"http://127.0.0.1:{port}", "email", client=client,
                                   clock=FakeClock(), timeout_s=1)
    outcome = await provider.send(message())
    await provider.close()
    if client is not None:
        await client.aclose()
    assert isinstance(outcome, Transient)
    assert "not sent" in outcome.reason


# ---------------------------------------------------------------- the HTTP surface


async def test_every_send_answer_carries_a_request_id(sandbox: Sandbox) -> None:
    admin = sandbox.admin
    ok = await admin.post("/v1/email/messages", json={"to": "ada@example.com"},
                          headers={"Idempotency-Key": "k1"})
    assert ok.status_code == 202
    assert ok.json() == {"id": ok.json()["id"], "status": "accepted"}
    again = await admin.post("/v1/email/messages", json={"to": "ada@example.com"},
                             headers={"Idempotency-Key": "k1"})
    assert (again.status_code, again.json()["id"]) == (200, ok.json()["id"])
    no_key = await admin.post("/v1/email/messages", json={"to": "ada@example.com"})
    assert no_key.status_code == 400
    assert "Idempotency-Key" in no_key.json()["error"]
    bad_body = await admin.post("/v1/email/messages", content=b"[1,2",
                                headers={"Idempotency-Key": "k2"})
    assert (bad_body.status_code, bad_body.json()["error"]) == (400, "body: must be a JSON object")
    bad_data = await admin.post("/v1/email/messages", json={"to": "a@b.co", "data": [1]},
                                headers={"Idempotency-Key": "k3"})
    assert (bad_data.status_code, bad_data.json()["error"]) == (400, "data: must be an object")
    unknown = await admin.post("/v1/fax/messages", json={"to": "1"},
                               headers={"Idempotency-Key": "k4"})
    assert unknown.status_code == 404
    ids = [r.headers["X-Request-Id"] for r in (ok, again, no_key, bad_body, bad_data, unknown)]
    assert len(set(ids)) == 6
    assert (await sandbox.stats())["bad_requests"] == 3


async def test_config_endpoint_validates_and_names_the_field(sandbox: Sandbox) -> None:
    bad = await sandbox.admin.post("/v1/config", json={"quotas": {"email": -1}})
    assert bad.status_code == 422
    assert bad.json()["field"] == "quotas.email"
    unknown = await sandbox.admin.post("/v1/config", json={"rate_limt": 0.5})
    assert (unknown.status_code, unknown.json()["field"]) == (422, "rate_limt")
    not_json = await sandbox.admin.post("/v1/config", content=b"{")
    assert not_json.status_code == 422
    assert sandbox.server.core.config == SandboxConfig()  # unchanged by bad input

    good = await sandbox.admin.post("/v1/config", json={"quotas": {"email": 5}, "timeout": 0.1})
    assert good.status_code == 200
    assert good.json()["quotas"] == {"email": 5}
    assert sandbox.server.core.config.timeout == 0.1


async def test_reset_health_and_stats_shape(sandbox: Sandbox,
                                            provider: SandboxHttpProvider) -> None:
    assert (await sandbox.admin.get("/healthz")).json() == {"status": "ok"}
    await provider.send(message())
    stats = await sandbox.stats(channel="")
    assert set(stats) == {"now", "config", "channels", "total"}
    assert stats["total"]["accepted"] == 1
    assert (await sandbox.admin.post("/v1/reset")).status_code == 200
    assert (await sandbox.stats())["requests"] == 0
    assert await provider.lookup(KEY) == Lookup(found=False)


# ---------------------------------------------------------------- the CLI entry point


@pytest.mark.slow
def test_main_sandbox_announces_its_port_and_stops_on_sigterm(tmp_path: Any) -> None:
    config = tmp_path / "sandbox.json"
    config.write_text(json.dumps({"quotas": {"email": 7}}))
    code = ("from tidings.sandbox import main_sandbox; "
            f"main_sandbox('127.0.0.1', 0, {str(config)!r}, 3)")
    # No PYTHONUNBUFFERED: the announcement must be flushed by main_sandbox itself.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                          env=env) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            assert line.startswith("sandbox listening on http://127.0.0.1:")
            url = line.rsplit(" ", 1)[1]
            assert not url.endswith(":0")
            stats = httpx.get(f"{url}/v1/stats", timeout=5).json()
            assert stats["config"]["quotas"] == {"email": 7}
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
