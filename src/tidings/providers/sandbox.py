"""Provider adapters for the sandbox: over HTTP, and an in-process twin.

Both map answers the same way (``outcome_for``): 2xx → Accepted, 429 → RateLimited
with Retry-After parsed against the clock, 5xx → Transient, other 4xx → Permanent.
Over HTTP, a failure before the request left (connect, pool) is Transient and a
failure after it may have arrived (read timeout, dropped connection) is Uncertain.
"""

from __future__ import annotations

import json
from urllib.parse import quote

from tidings.core.clock import Clock
from tidings.core.errors import TidingsError
from tidings.core.model import SendRequest
from tidings.core.outcomes import (
    Accepted,
    Lookup,
    Outcome,
    Permanent,
    RateLimited,
    Transient,
    Uncertain,
)
from tidings.core.policy import parse_retry_after
from tidings.providers.aiohttp_transport import HttpDispatch
from tidings.providers.http_outcomes import NOT_SENT, describe, header_value
from tidings.providers.httpx_lean import httpx
from tidings.sandbox.core import AnswerKind, SandboxCore


class SandboxLookupError(TidingsError):
    """The sandbox could not be asked whether a key was accepted; ask again later."""


def outcome_for(status: int, *, receipt: str | None, retry_after: str | None,
                reason: str | None, request_id: str | None, now: float) -> Outcome:
    """Map one sandbox answer (HTTP status and fields) to an Outcome."""
    if 200 <= status < 300:
        if not receipt:
            return Uncertain(reason=f"HTTP {status} without a receipt", request_id=request_id)
        return Accepted(receipt=receipt, request_id=request_id)
    if status == 429:
        return RateLimited(retry_after_s=parse_retry_after(retry_after, now),
                           request_id=request_id, reason=reason or "rate limited")
    text = f"HTTP {status}: {reason}" if reason else f"HTTP {status}"
    if 400 <= status < 500:
        return Permanent(reason=text, request_id=request_id)
    # 5xx, and statuses a provider should never send (1xx, 3xx): worth a bounded retry.
    return Transient(reason=text, request_id=request_id)


class SandboxHttpProvider:
    """The sandbox over HTTP, speaking httpx types; pass ``client`` to inject a transport.

    Without ``client`` the requests go straight to an owned ``AiohttpTransport`` with
    ``max_connections`` keep-alive connections: no ``AsyncClient`` layer (cookie jar,
    header merging, auth and redirect hooks), about a quarter of the cost of a send. With
    ``client`` (e.g. over ``httpx.MockTransport``) they go through ``client.send``,
    and the client stays the caller's to close. Both paths raise the same httpx
    errors, so the mapping is one.
    """

    supports_lookup = True

    def __init__(self, base_url: str, channel: str, client: httpx.AsyncClient | None = None,
                 *, clock: Clock, timeout_s: float = 10.0,
                 max_connections: int = 200, name: str = "sandbox") -> None:
        self.name = name
        self.channel = channel
        self._clock = clock
        base = base_url.rstrip("/")
        # Parsed once: httpx re-parses a str URL on every request.
        self._send_url = httpx.URL(f"{base}/v1/{quote(channel, safe='')}/messages")
        self._lookup_url = f"{base}/v1/messages/"
        self._http = HttpDispatch(client, timeout_s=timeout_s, max_connections=max_connections)

    async def send(self, request: SendRequest) -> Outcome:
        """Send one message with its delivery key as ``Idempotency-Key``; never raises."""
        body = b'{"to":%s,"template":%s,"recipient_id":%s,"data":%s}' % (
            json.dumps(request.to).encode(),
            json.dumps(request.template).encode(),
            json.dumps(request.recipient_id).encode(),
            # Already JSON text (model.encode_data): embedded as is, not re-encoded.
            request.data_json.encode(),
        )
        headers = {
            "Idempotency-Key": header_value(request.key),
            "Content-Type": "application/json",
        }
        try:
            response = await self._http.send(httpx.Request(
                "POST", self._send_url, headers=headers, content=body,
                extensions=self._http.extensions))
        except NOT_SENT as exc:
            return Transient(reason=f"request not sent: {describe(exc)}")
        except httpx.RequestError as exc:
            # Read timeouts, resets and disconnects after the request went out.
            return Uncertain(reason=f"no answer: {describe(exc)}")
        reason, receipt = _error_and_receipt(response)
        return outcome_for(response.status_code, receipt=receipt,
                           retry_after=response.headers.get("Retry-After"), reason=reason,
                           request_id=response.headers.get("X-Request-Id"),
                           now=self._clock.now())

    async def lookup(self, key: str) -> Lookup:
        """Ask the sandbox for ``key`` on this channel; raises SandboxLookupError if it cannot."""
        try:
            response = await self._http.send(httpx.Request(
                "GET", self._lookup_url + quote(key, safe=""), params={"channel": self.channel},
                extensions=self._http.extensions))
        except httpx.RequestError as exc:
            raise SandboxLookupError(f"lookup of {key!r} failed: {describe(exc)}") from exc
        if response.status_code == 404:
            return Lookup(found=False)
        _, receipt = _error_and_receipt(response)
        if response.status_code != 200 or receipt is None:
            raise SandboxLookupError(f"lookup of {key!r} answered HTTP {response.status_code}")
        return Lookup(found=True, receipt=receipt)

    async def close(self) -> None:
        await self._http.aclose()


def _error_and_receipt(response: httpx.Response) -> tuple[str | None, str | None]:
    try:
        # Straight from bytes: Response.json() first sniffs the charset, at a cost.
        body = json.loads(response.content)
    except ValueError:
        return (response.text[:200] or None), None
    if not isinstance(body, dict):
        return None, None
    error, receipt = body.get("error"), body.get("id")
    return (str(error) if error is not None else None,
            receipt if isinstance(receipt, str) else None)


class SandboxTwinProvider:
    """The sandbox in-process: the same core and mapping, no sockets.

    Latency is waited with ``clock.sleep`` (instant on a FakeClock). A timeout waits
    ``timeout_s`` as a client would and is Uncertain; a lost response is accepted by
    the core first and is Uncertain too.
    """

    supports_lookup = True

    def __init__(self, core: SandboxCore, channel: str, clock: Clock, *,
                 timeout_s: float = 10.0, name: str = "sandbox-twin") -> None:
        self.name = name
        self.channel = channel
        self._core = core
        self._clock = clock
        self._timeout_s = timeout_s

    async def send(self, request: SendRequest) -> Outcome:
        """Send one message to the core; never raises."""
        answer = self._core.handle(self.channel, request.key, request.to)
        if answer.kind is AnswerKind.TIMEOUT:
            await self._clock.sleep(self._timeout_s)
            return Uncertain(reason="no answer: timed out")
        if answer.latency_s > 0:
            await self._clock.sleep(min(answer.latency_s, self._timeout_s))
            if answer.latency_s > self._timeout_s:
                return Uncertain(reason="no answer: timed out")
        if answer.status is None:
            return Uncertain(reason="no answer: connection dropped")
        return outcome_for(answer.status, receipt=answer.receipt,
                           retry_after=answer.retry_after, reason=answer.error,
                           request_id=answer.request_id, now=self._clock.now())

    async def lookup(self, key: str) -> Lookup:
        found = self._core.lookup(key, self.channel)
        return Lookup(found=True, receipt=found[1]) if found else Lookup(found=False)

    async def close(self) -> None:
        return None
