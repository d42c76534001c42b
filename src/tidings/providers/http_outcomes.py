"""What every HTTP provider adapter shares: one exchange, one answer-to-outcome mapping.

==============================  =========================================================
answer                          outcome
==============================  =========================================================
2xx                             Accepted (receipt: the provider's message id)
429                             RateLimited, Retry-After parsed (seconds or HTTP-date)
401                             Transient: the channel's credentials were refused, not
                                the message; the retry budget runs out into the
                                dead-letter queue, from which a redrive recovers once
                                the credentials are fixed
408, 409, 425                   Transient: "try again" answers (timeout, a concurrent
                                request under the same idempotency key, too early)
other 4xx                       Permanent
5xx (and 1xx/3xx)               Transient
connect failure, pool timeout   Transient: the request never left
read timeout, dropped conn.     Uncertain: the provider may have accepted it
==============================  =========================================================

Every reason goes through ``redaction.redact``, so no recipient address, phone
number or credential reaches the ledger or the logs.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import quote

from pydantic import SecretStr

from tidings.core.clock import Clock
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
from tidings.core.outcomes import describe as describe  # where the adapters find it
from tidings.core.policy import parse_retry_after
from tidings.core.redaction import redact
from tidings.providers.aiohttp_transport import HttpDispatch
from tidings.providers.httpx_lean import httpx

NO_CONTENT = "no rendered content"
"""The reason for a send that needs rendered content and came without it."""
NO_MESSAGE_ID = "(accepted without a message id)"
"""The receipt of a 2xx answer that named no message id: accepted all the same."""

# Requests that certainly never reached the provider.
NOT_SENT: tuple[type[httpx.RequestError], ...] = (
    httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol,
    httpx.ProxyError, httpx.LocalProtocolError,
)
_TRY_AGAIN = frozenset({408, 409, 425})
# Printable ASCII passes through as is; '%' and anything else is percent-encoded so
# any delivery key fits a latin-1 header value.
_HEADER_SAFE = "".join(c for c in string.punctuation if c != "%")


def header_value(key: str) -> str:
    """A delivery key as a header value: printable ASCII as is, the rest percent-encoded."""
    return quote(key, safe=_HEADER_SAFE)


def outcome_for_status(status: int, *, receipt: str | None, retry_after: str | None,
                       reason: str | None, request_id: str | None, now: float) -> Outcome:
    """Map one HTTP answer to an Outcome (see the table above); ``reason`` already redacted."""
    if 200 <= status < 300:
        return Accepted(receipt=receipt or request_id or NO_MESSAGE_ID, request_id=request_id)
    text = f"HTTP {status}: {reason}" if reason else f"HTTP {status}"
    if status == 429:
        return RateLimited(retry_after_s=parse_retry_after(retry_after, now),
                           request_id=request_id, reason=text)
    if status == 401:
        return Transient(reason=f"{text} (credentials refused)", request_id=request_id)
    if 400 <= status < 500 and status not in _TRY_AGAIN:
        return Permanent(reason=text, request_id=request_id)
    return Transient(reason=text, request_id=request_id)


def json_of(response: httpx.Response) -> Any:
    """The response body as JSON, or None when it is empty or not JSON."""
    if not response.content:
        return None
    try:
        # Straight from bytes: Response.json() first sniffs the charset, at a cost.
        return json.loads(response.content)
    except ValueError:
        return None


def dotted(value: Any, path: str) -> Any:
    """``value`` at a dotted path (``data.id``, ``messages.0.id``), or None."""
    for part in path.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def error_text(response: httpx.Response, body: Any) -> str | None:
    """The provider's own words about a refusal, from the common JSON error shapes."""
    if isinstance(body, dict):
        for name in ("message", "Message", "error", "detail", "error_description"):
            value = body.get(name)
            if isinstance(value, str) and value:
                return value
            if isinstance(value, dict) and isinstance(value.get("message"), str):
                return str(value["message"])
        errors = body.get("errors")
        if isinstance(errors, list):
            texts = [str(e.get("message")) if isinstance(e, dict) else str(e) for e in errors]
            return "; ".join(t for t in texts if t) or None
        return None
    if body is None and response.content:
        return response.text[:200] or None
    return None


class HttpAdapter:
    """The shell every HTTP provider adapter is built on.

    Without ``client`` requests go straight to an owned ``AiohttpTransport`` (no
    ``AsyncClient`` layer); with ``client`` (e.g. over ``httpx.MockTransport``) they go
    through ``client.send`` and the client stays the caller's to close. Both raise
    the same httpx errors, so ``exchange`` maps them once. Subclasses build the
    request and read the answer; they set ``name`` and ``deduplicates`` (whether the
    provider honours the idempotency key, which makes a retry of an uncertain send
    safe).
    """

    supports_lookup = False
    deduplicates = False
    dedupe_window_s: float | None = None
    lookup_settle_s = 0.0
    lookup_needs_hint = False

    def __init__(self, *, name: str, channel: str, client: httpx.AsyncClient | None,
                 clock: Clock, timeout_s: float, max_connections: int,
                 secrets: Iterable[SecretStr] = ()) -> None:
        self.name = name
        self.channel = channel
        self._clock = clock
        self._secrets = tuple(secrets)
        self._http = HttpDispatch(client, timeout_s=timeout_s, max_connections=max_connections)
        # Its own pool holds a send beyond max_connections back: the worker starts no
        # more at once (``providers.base.concurrent_sends``). A client of the caller's
        # has pool limits of its own, not known here.
        if client is None:
            self.max_concurrent_sends = max_connections

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r} channel={self.channel!r}>"

    def _request(self, method: str, url: httpx.URL, *, headers: dict[str, str],
                 content: bytes) -> httpx.Request:
        return httpx.Request(method, url, headers=headers, content=content,
                             extensions=self._http.extensions)

    async def _exchange_json(self, method: str, url: httpx.URL, *, headers: dict[str, str],
                             body: Any, send: SendRequest
                             ) -> httpx.Response | Transient | Uncertain:
        """``_exchange`` of ``body`` as compact JSON, asking for JSON back; ``headers``
        come after (and may replace) the two content headers."""
        return await self._exchange(self._request(
            method, url,
            headers={"Content-Type": "application/json", "Accept": "application/json",
                     **headers},
            content=json.dumps(body, separators=(",", ":")).encode()), send)

    async def _exchange(self, request: httpx.Request, send: SendRequest
                        ) -> httpx.Response | Transient | Uncertain:
        """Send ``request``; a transport failure comes back as Transient or Uncertain."""
        try:
            return await self._http.send(request)
        except NOT_SENT as exc:
            return Transient(reason=f"request not sent: {self._redact(describe(exc), send)}")
        except httpx.RequestError as exc:
            # Read timeouts, resets and disconnects after the request went out.
            return Uncertain(reason=f"no answer: {self._redact(describe(exc), send)}")

    async def _send_in_one_request(
            self, requests: Sequence[SendRequest], url: httpx.URL, *, headers: dict[str, str],
            message: Callable[[SendRequest], dict[str, Any] | None],
            outcomes: Callable[[httpx.Response, Sequence[SendRequest]], list[Outcome]]
    ) -> list[Outcome]:
        """A batch endpoint's ``send_batch``: the ``message`` of each request with rendered
        content goes in one JSON array to ``url``; one without is Permanent on its own and
        never sent. ``outcomes`` maps the provider's answer to the requests it carried, in
        order; a request not sent, or sent and not answered, is that same Transient or
        Uncertain for each of them."""
        done: dict[int, Outcome] = {}
        sent: list[int] = []
        bodies: list[dict[str, Any]] = []
        for i, request in enumerate(requests):
            body = message(request)
            if body is None:
                done[i] = Permanent(reason=NO_CONTENT)
            else:
                sent.append(i)
                bodies.append(body)
        if bodies:
            answer = await self._exchange_json("POST", url, headers=headers, body=bodies,
                                               send=requests[sent[0]])
            carried = [requests[i] for i in sent]
            each = (outcomes(answer, carried) if isinstance(answer, httpx.Response)
                    else [answer] * len(carried))
            done.update(zip(sent, each, strict=True))
        return [done[i] for i in range(len(requests))]

    def _redact(self, text: str, send: SendRequest) -> str:
        return redact(text, address=send.to,
                      secrets=[s.get_secret_value() for s in self._secrets])

    def _outcome(self, response: httpx.Response, send: SendRequest, *, receipt: str | None,
                 request_id: str | None, reason: str | None) -> Outcome:
        return outcome_for_status(
            response.status_code, receipt=receipt,
            retry_after=response.headers.get("Retry-After"),
            reason=self._redact(reason, send) if reason else None,
            request_id=request_id, now=self._clock.now())

    async def lookup(self, key: str) -> Lookup:
        """Not offered: ``supports_lookup`` is False, so the reconciler never asks."""
        raise NotImplementedError(f"{self.name} has no lookup by idempotency key")

    async def _read(self, url: httpx.URL, *, headers: dict[str, str],
                    address: str | None = None, not_found: bool = False
                    ) -> httpx.Response | Lookup:
        """GET one of the provider's read APIs. A transport failure, a 429, a 5xx or any
        other refusal is ``unknown`` (ask again later: never read as not found); a 404
        is not found only where ``not_found`` says the API means it so."""
        try:
            response = await self._http.send(httpx.Request(
                "GET", url, headers={"Accept": "application/json", **headers},
                extensions=self._http.extensions))
        except httpx.RequestError as exc:
            return Lookup.of_unknown(f"lookup failed: {self._redact_text(describe(exc), address)}")
        if response.status_code == 404 and not_found:
            return Lookup.of_not_found()
        if not response.is_success:
            reason = error_text(response, json_of(response))
            text = f"lookup answered HTTP {response.status_code}"
            return Lookup.of_unknown(
                f"{text}: {self._redact_text(reason, address)}" if reason else text)
        return response

    def _redact_text(self, text: str, address: str | None) -> str:
        return redact(text, address=address,
                      secrets=[s.get_secret_value() for s in self._secrets])

    async def close(self) -> None:
        """Close the owned transport (an injected client is left open); safe to repeat."""
        await self._http.aclose()

