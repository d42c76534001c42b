"""Email through Resend's API, one request per message or up to 100 in a batch.

``POST {base}/emails`` with a bearer API key and Resend's JSON (``from``, ``to``,
``subject``, ``text``, ``html``, ``headers``, ``tags``, ``reply_to``), as its official
SDKs send it (resend-python's ``Emails.send``). The delivery key travels three ways:
as the ``Idempotency-Key`` header, which Resend honours for 24 hours (a second request
with the key answers the first one's result and sends nothing: ``deduplicates``, with
``dedupe_window_s`` a day); as an ``X-Tidings-Key`` message header; and, for Resend's
webhooks, as a ``tidings_key_sha256`` tag (tag values allow letters, digits, ``_`` and
``-`` only, so the key goes in by its digest). Resend answers 200 ``{"id": …}``; the
receipt is that id. A key longer than the 256 characters an idempotency key may have
goes in by its digest there too.

``send_batch``: ``POST {base}/emails/batch``, an array of up to 100 such emails, with
``x-batch-validation: permissive`` so that an invalid email does not refuse the others:
Resend answers 200 ``{"data": [{"id"}…], "errors": [{"index", "message"}…]}``, the ids
of the valid emails in request order and the index of each refused one
(resend-python's ``Batch.send``). The batch carries no idempotency key: a batch that is
sent again is never the same batch (its messages are claimed again one by one), and a
key reused with another payload is refused. So an answer lost for a batch leaves each
of its messages uncertain with nothing to look them up by (Resend has no search by
tag or header): the channel's ``uncertain`` policy decides, and a retry of one of them
alone goes out with its own idempotency key, which the batch did not carry.

Errors are ``{"statusCode", "name", "message"}``:

=====================================  ==========================================
status, name                           outcome
=====================================  ==========================================
429 rate_limit_exceeded, daily_quota_  RateLimited (Retry-After as sent)
exceeded, monthly_quota_exceeded
409 concurrent_idempotent_requests     Transient: the first request with the key
                                       is still being processed; asked again, the
                                       key answers its result
409 invalid_idempotent_request         Uncertain: the key was used within a day
                                       with another payload, so a message with it
                                       may have been accepted
401 missing_api_key, 403 (a refused    Transient: about the account, not this
key, an unverified domain), 5xx        message
400, 422 (validation_error, missing_   Permanent
required_field), any other 4xx
=====================================  ==========================================
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from email.utils import formataddr
from typing import Any

from pydantic import SecretStr

from tidings.config.endpoints import RESEND_BASE_URL as DEFAULT_BASE_URL
from tidings.core.clock import Clock
from tidings.core.model import SendRequest
from tidings.core.outcomes import Accepted, Outcome, Permanent, Transient, Uncertain
from tidings.providers.http_outcomes import (
    NO_CONTENT,
    HttpAdapter,
    error_text,
    header_value,
    json_of,
)
from tidings.providers.httpx_lean import httpx

KEY_HEADER = "X-Tidings-Key"
KEY_TAG = "tidings_key_sha256"
IDEMPOTENCY_HEADER = "Idempotency-Key"
BATCH_VALIDATION_HEADER = "x-batch-validation"
#: Resend keeps an idempotency key's result for a day, and takes keys of up to 256
#: characters.
DEDUPE_WINDOW_S = 24 * 3600.0
IDEMPOTENCY_KEY_LIMIT = 256
OTHER_PAYLOAD = "invalid_idempotent_request"


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def idempotency_key_for(key: str) -> str:
    """The ``Idempotency-Key`` of one message: the key as a header value, or its digest
    where that is longer than Resend takes."""
    value = header_value(key)
    return value if len(value) <= IDEMPOTENCY_KEY_LIMIT else key_digest(key)


class ResendProvider(HttpAdapter):
    """Send email one request per message (deduplicated on its key for a day) or in
    batches of up to 100; never raises for an answer. No lookup: Resend cannot be
    searched by anything tidings sets."""

    deduplicates = True
    dedupe_window_s = DEDUPE_WINDOW_S
    #: A batch request carries no idempotency key per message (the runtime refuses
    #: ``uncertain = "resend"`` beside a batch table for this reason).
    batch_deduplicates = False
    #: ``POST /emails/batch`` takes up to 100 emails in one request.
    batch_max_messages = 100

    def __init__(self, *, api_key: str | SecretStr, from_address: str, channel: str,
                 from_name: str | None = None, reply_to: str | None = None,
                 base_url: str = DEFAULT_BASE_URL, client: httpx.AsyncClient | None = None,
                 clock: Clock, timeout_s: float = 10.0, max_connections: int = 100,
                 name: str = "resend") -> None:
        key = api_key if isinstance(api_key, SecretStr) else SecretStr(api_key)
        super().__init__(name=name, channel=channel, client=client, clock=clock,
                         timeout_s=timeout_s, max_connections=max_connections,
                         secrets=[key])
        self._url = httpx.URL(f"{base_url.rstrip('/')}/emails")
        self._batch_url = httpx.URL(f"{base_url.rstrip('/')}/emails/batch")
        self._api_key = key
        self._from = formataddr((from_name, from_address)) if from_name else from_address
        self._reply_to = reply_to

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key.get_secret_value()}"}

    async def send(self, request: SendRequest) -> Outcome:
        """Send one email under its idempotency key; never raises."""
        message = self._message(request)
        if message is None:
            return Permanent(reason=NO_CONTENT)
        answer = await self._exchange_json(
            "POST", self._url,
            headers={**self._auth(), IDEMPOTENCY_HEADER: idempotency_key_for(request.key)},
            body=message, send=request)
        if not isinstance(answer, httpx.Response):
            return answer
        body = json_of(answer)
        if answer.status_code == 200:
            receipt = body.get("id") if isinstance(body, dict) else None
            if isinstance(receipt, str) and receipt:
                return Accepted(receipt=receipt)
            return Uncertain(reason="HTTP 200 with no email id")
        return self._refused(answer, body, request)

    async def send_batch(self, requests: Sequence[SendRequest]) -> list[Outcome]:
        """Send up to ``batch_max_messages`` emails in one ``POST /emails/batch``; one
        Outcome per request, in order, from its own part of the answer; never raises.

        A refused email's outcome is Permanent, naming Resend's words for it; the
        others take the ids of ``data`` in order. Anything about the whole request (a
        lost answer, a 429, a refused key, a 5xx) is each message's outcome, and an
        answer whose ids cannot be matched to the emails one by one is Uncertain for
        each: Resend may have accepted any of them."""
        return await self._send_in_one_request(
            requests, self._batch_url,
            headers={**self._auth(), BATCH_VALIDATION_HEADER: "permissive"},
            message=self._message, outcomes=self._batch_outcomes)

    def _batch_outcomes(self, answer: httpx.Response,
                        requests: Sequence[SendRequest]) -> list[Outcome]:
        """Each message's outcome from the provider's answer to their batch request."""
        body = json_of(answer)
        if 200 < answer.status_code < 300:
            # A success other than Resend's 200 names no email: any may have been accepted.
            return [Uncertain(reason=f"HTTP {answer.status_code} with no per-email "
                              "results")] * len(requests)
        if answer.status_code != 200:
            return [self._refused(answer, body, request) for request in requests]
        data = body.get("data") if isinstance(body, dict) else None
        errors = body.get("errors") if isinstance(body, dict) else None
        refused: dict[int, str] = {}
        for error in errors if isinstance(errors, list) else ():
            index = error.get("index") if isinstance(error, dict) else None
            # (JSON's true is an int to Python, and no index)
            if type(index) is int and 0 <= index < len(requests):
                refused[index] = str(error.get("message") or "refused")
        valid = [i for i in range(len(requests)) if i not in refused]
        ids = [item.get("id") if isinstance(item, dict) else None
               for item in (data if isinstance(data, list) else ())]
        if len(ids) != len(valid) or not all(isinstance(i, str) and i for i in ids):
            return [Uncertain(reason=f"HTTP 200 with {len(ids)} ids for {len(valid)} "
                              "emails it did not refuse")] * len(requests)
        if len(set(ids)) != len(ids):
            # An id names one email: an answer naming one for two cannot be matched.
            return [Uncertain(reason=f"HTTP 200 naming {len(set(ids))} distinct ids for "
                              f"{len(ids)} emails")] * len(requests)
        outcomes: list[Outcome] = [Uncertain(reason="unmatched")] * len(requests)
        for i, words in refused.items():
            outcomes[i] = Permanent(
                reason=f"HTTP 200: refused in the batch: {self._redact(words, requests[i])}")
        for i, receipt in zip(valid, ids, strict=True):
            outcomes[i] = Accepted(receipt=str(receipt))
        return outcomes

    def _refused(self, answer: httpx.Response, body: Any, request: SendRequest) -> Outcome:
        """A non-200 answer's outcome (the table in the module's docstring)."""
        name = body.get("name") if isinstance(body, dict) else None
        words = error_text(answer, body)
        if answer.status_code == 409 and name == OTHER_PAYLOAD:
            text = f"HTTP 409: {self._redact(words, request)}" if words else "HTTP 409"
            return Uncertain(reason=f"{text} (the key was used with another payload: a "
                             "message with it may have been accepted)")
        if answer.status_code == 403:
            text = f"HTTP 403: {self._redact(words, request)}" if words else "HTTP 403"
            return Transient(reason=f"{text} (the account or its domain was refused)")
        reason = f"{name}: {words}" if isinstance(name, str) and words else words
        return self._outcome(answer, request, receipt=None, request_id=None, reason=reason)

    def _message(self, request: SendRequest) -> dict[str, Any] | None:
        """The Resend email of one send; None without rendered content."""
        content = request.content
        if content is None:
            return None
        message: dict[str, Any] = {
            "from": self._from,
            "to": [request.to],
            "text": content.text,
            "headers": {**content.headers, KEY_HEADER: header_value(request.key)},
            "tags": [{"name": KEY_TAG, "value": key_digest(request.key)}],
        }
        if content.subject is not None:
            message["subject"] = content.subject
        if content.html is not None:
            message["html"] = content.html
        if self._reply_to:
            message["reply_to"] = self._reply_to
        return message
