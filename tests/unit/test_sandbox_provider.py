"""The sandbox adapters' mapping: HTTP over httpx.MockTransport, and the in-process twin."""

from __future__ import annotations

import json
from collections.abc import Callable
from email.utils import formatdate
from pathlib import Path

import httpx
import pytest

from tidings.core.clock import FakeClock
from tidings.core.model import SendRequest
from tidings.core.outcomes import Accepted, Lookup, Permanent, RateLimited, Transient, Uncertain
from tidings.providers.base import Provider
from tidings.providers.sandbox import (
    SandboxHttpProvider,
    SandboxLookupError,
    SandboxTwinProvider,
)
from tidings.sandbox import SandboxConfig, SandboxCore

BASE = "http://sandbox.test"
KEY = "weekly-digest/2026-08-14/cust_1042/email/v3"


def request(key: str = KEY, to: str = "ada@example.com") -> SendRequest:
    return SendRequest(key=key, channel="email", to=to, template="digest",
                       data={"items": [1, 2]}, recipient_id="cust_1042")


def mock_provider(handler: Callable[[httpx.Request], httpx.Response],
                  clock: FakeClock | None = None) -> tuple[SandboxHttpProvider, httpx.AsyncClient]:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return SandboxHttpProvider(BASE, "email", client=client, clock=clock or FakeClock()), client


def answer(status: int, body: object = None, **headers: str) -> Callable[[httpx.Request],
                                                                        httpx.Response]:
    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json=body, headers=headers)

    return handler


def failing(exc_type: type[httpx.RequestError]) -> Callable[[httpx.Request], httpx.Response]:
    def handler(req: httpx.Request) -> httpx.Response:
        raise exc_type("boom", request=req)

    return handler


# ---------------------------------------------------------------- HTTP adapter


async def test_send_posts_the_message_with_the_key_as_idempotency_key() -> None:
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(202, json={"id": "sbx_1", "status": "accepted"},
                              headers={"X-Request-Id": "req_1"})

    provider, client = mock_provider(handler)
    async with client:
        outcome = await provider.send(request())

    assert outcome == Accepted(receipt="sbx_1", request_id="req_1")
    (sent,) = seen
    assert sent.method == "POST"
    assert str(sent.url) == f"{BASE}/v1/email/messages"
    assert sent.headers["Idempotency-Key"] == KEY
    assert json.loads(sent.content) == {"to": "ada@example.com", "template": "digest",
                                        "recipient_id": "cust_1042", "data": {"items": [1, 2]}}


async def test_a_key_that_is_not_plain_ascii_is_percent_encoded() -> None:
    seen: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req.headers["Idempotency-Key"])
        return httpx.Response(202, json={"id": "sbx_1"})

    provider, client = mock_provider(handler)
    async with client:
        await provider.send(request(key="café:100%:sms"))
    assert seen == ["caf%C3%A9:100%25:sms"]


@pytest.mark.parametrize(
    ("handler", "expected"),
    [
        (answer(200, {"id": "sbx_9", "status": "accepted"}), Accepted(receipt="sbx_9")),
        (answer(429, {"error": "rate limited"}, **{"Retry-After": "2"}),
         RateLimited(retry_after_s=2.0, reason="rate limited")),
        (answer(429, {"error": "rate limited"}), RateLimited(retry_after_s=None)),
        (answer(503, {"error": "service unavailable"}),
         Transient(reason="HTTP 503: service unavailable")),
        (answer(500), Transient(reason="HTTP 500")),
        (answer(422, {"error": "address rejected"}),
         Permanent(reason="HTTP 422: address rejected")),
        (answer(400, {"error": "to: required"}), Permanent(reason="HTTP 400: to: required")),
        (answer(404, {"error": "unknown channel"}),
         Permanent(reason="HTTP 404: unknown channel")),
        (answer(202, {"status": "accepted"}), Uncertain(reason="HTTP 202 without a receipt")),
        (answer(302), Transient(reason="HTTP 302")),
    ],
)
async def test_statuses_map_to_outcomes(handler: Callable[[httpx.Request], httpx.Response],
                                        expected: object) -> None:
    provider, client = mock_provider(handler)
    async with client:
        assert await provider.send(request()) == expected


async def test_retry_after_as_http_date_is_relative_to_the_clock() -> None:
    clock = FakeClock(start=1_780_000_000.0)
    date = formatdate(1_780_000_005, usegmt=True)
    provider, client = mock_provider(answer(429, {"error": "slow down"},
                                            **{"Retry-After": date}), clock)
    async with client:
        outcome = await provider.send(request())
    assert outcome == RateLimited(retry_after_s=5.0, reason="slow down")


async def test_non_json_error_bodies_still_give_a_reason() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="<html>Bad Gateway</html>")

    provider, client = mock_provider(handler)
    async with client:
        assert await provider.send(request()) == Transient(
            reason="HTTP 502: <html>Bad Gateway</html>")


@pytest.mark.parametrize(
    ("exc_type", "outcome_type"),
    [
        (httpx.ConnectError, Transient),
        (httpx.ConnectTimeout, Transient),
        (httpx.PoolTimeout, Transient),
        (httpx.ReadTimeout, Uncertain),
        (httpx.ReadError, Uncertain),
        (httpx.RemoteProtocolError, Uncertain),
        (httpx.WriteError, Uncertain),
        (httpx.WriteTimeout, Uncertain),
    ],
)
async def test_transport_errors_split_on_whether_the_request_left(
        exc_type: type[httpx.RequestError], outcome_type: type) -> None:
    provider, client = mock_provider(failing(exc_type))
    async with client:
        outcome = await provider.send(request())
    assert type(outcome) is outcome_type
    assert isinstance(outcome, Transient | Uncertain)
    assert exc_type.__name__ in outcome.reason


async def test_lookup_asks_by_key_on_the_channel() -> None:
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        if req.url.raw_path.startswith(b"/v1/messages/weekly-digest%2F"):
            return httpx.Response(200, json={"id": "sbx_7", "status": "accepted"})
        return httpx.Response(404, json={"error": "not found"})

    provider, client = mock_provider(handler)
    async with client:
        assert await provider.lookup(KEY) == Lookup(found=True, receipt="sbx_7")
        assert await provider.lookup("other") == Lookup(found=False)
    assert seen[0].url.params["channel"] == "email"
    assert seen[0].method == "GET"


@pytest.mark.parametrize("handler", [answer(500, {"error": "x"}), failing(httpx.ReadTimeout)])
async def test_lookup_that_cannot_answer_raises(
        handler: Callable[[httpx.Request], httpx.Response]) -> None:
    provider, client = mock_provider(handler)
    async with client:
        with pytest.raises(SandboxLookupError):
            await provider.lookup(KEY)


async def test_an_injected_client_is_left_open() -> None:
    provider, client = mock_provider(answer(202, {"id": "sbx_1"}))
    async with client:
        await provider.close()
        assert not client.is_closed
        assert await provider.send(request()) == Accepted(receipt="sbx_1")


async def test_both_adapters_are_providers() -> None:
    clock = FakeClock()
    providers: list[Provider] = [
        SandboxHttpProvider(BASE, "email", clock=clock),
        SandboxTwinProvider(SandboxCore(now=clock.now), "email", clock),
    ]
    assert all(p.supports_lookup for p in providers)
    assert [p.name for p in providers] == ["sandbox", "sandbox-twin"]
    for provider in providers:
        await provider.close()


# ---------------------------------------------------------------- in-process twin


def twin(clock: FakeClock, **config: object) -> tuple[SandboxTwinProvider, SandboxCore]:
    core = SandboxCore(SandboxConfig.from_dict(config), now=clock.now, seed=3)
    return SandboxTwinProvider(core, "email", clock, timeout_s=10.0), core


async def test_twin_accepts_after_waiting_the_latency_on_the_clock() -> None:
    clock = FakeClock(auto_advance=True)
    provider, core = twin(clock, latency={"email": 25})
    outcome = await provider.send(request())
    assert isinstance(outcome, Accepted)
    assert clock.slept == [0.025]
    assert await provider.lookup(KEY) == Lookup(found=True, receipt=outcome.receipt)
    again = await provider.send(request())
    assert isinstance(again, Accepted)
    assert again.receipt == outcome.receipt  # deduplicated
    assert core.stats()["channels"]["email"]["deduplicated"] == 1


async def test_twin_quota_refusal_says_when_the_next_window_opens() -> None:
    clock = FakeClock(start=1_780_000_000.5, auto_advance=True)
    provider, _ = twin(clock, quotas={"email": 1})
    await provider.send(request(key="a"))
    outcome = await provider.send(request(key="b"))
    assert isinstance(outcome, RateLimited)
    assert outcome.retry_after_s == 1.0
    assert outcome.request_id is not None


async def test_twin_parses_an_http_date_retry_after() -> None:
    clock = FakeClock(start=1_780_000_000.0, auto_advance=True)
    provider, _ = twin(clock, rate_limit=1.0, retry_after_s=2, retry_after_date_share=1.0)
    outcome = await provider.send(request())
    assert outcome == RateLimited(retry_after_s=2.0, request_id=outcome.request_id)


async def test_twin_timeout_waits_the_client_timeout_and_is_uncertain() -> None:
    clock = FakeClock(auto_advance=True)
    provider, core = twin(clock, timeout=1.0)
    outcome = await provider.send(request())
    assert isinstance(outcome, Uncertain)
    assert clock.slept == [10.0]
    assert await provider.lookup(KEY) == Lookup(found=False)
    assert core.stats()["channels"]["email"]["timeouts"] == 1


async def test_twin_latency_beyond_the_timeout_is_uncertain() -> None:
    clock = FakeClock(auto_advance=True)
    provider, _ = twin(clock, latency={"email": 20_000})
    outcome = await provider.send(request())
    assert isinstance(outcome, Uncertain)
    assert clock.slept == [10.0]
    # The sandbox accepted it even though the client stopped waiting.
    assert (await provider.lookup(KEY)).found


async def test_twin_lost_response_is_uncertain_but_accepted() -> None:
    clock = FakeClock(auto_advance=True)
    provider, core = twin(clock, lost_response=1.0)
    outcome = await provider.send(request())
    assert isinstance(outcome, Uncertain)
    assert (await provider.lookup(KEY)).found
    email = core.stats()["channels"]["email"]
    assert (email["accepted"], email["lost_responses"]) == (1, 1)


@pytest.mark.parametrize(
    ("config", "to", "outcome_type"),
    [
        ({"server_error": 1.0}, "ada@example.com", Transient),
        ({"reject_addresses": ["@invalid.example"]}, "x@invalid.example", Permanent),
        ({}, "not-an-address", Permanent),
        ({"fail_addresses": ["ada@example.com"]}, "ada@example.com", Transient),
    ],
)
async def test_twin_maps_errors_like_http(config: dict[str, object], to: str,
                                          outcome_type: type) -> None:
    provider, _ = twin(FakeClock(auto_advance=True), **config)
    outcome = await provider.send(request(to=to))
    assert type(outcome) is outcome_type


async def test_twin_quota_in_settings_sizes_the_in_process_sandbox(tmp_path: Path) -> None:
    from tidings.config.settings import Settings
    from tidings.core.clock import FakeClock
    from tidings.core.model import SendRequest
    from tidings.core.outcomes import Accepted
    from tidings.runtime import build_runtime

    settings = Settings.parse({
        "store": f"sqlite:///{tmp_path / 't.db'}",
        "channels": {"email": {"provider": {"kind": "sandbox-twin", "twin_quota": 5000}}}})
    async with await build_runtime(settings, clock=FakeClock(1_000_000.0)) as runtime:
        provider = runtime.provider("email")
        outcomes = [await provider.send(SendRequest(
            key=f"k{i}", channel="email", to=f"c{i}@example.com", template="t/v1", data={},
            recipient_id=f"c{i}")) for i in range(1500)]  # one second: over the default 1,000
    assert all(isinstance(o, Accepted) for o in outcomes)
