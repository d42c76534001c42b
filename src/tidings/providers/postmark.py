"""Email through Postmark's ``/email`` API.

``POST {base}/email`` with the ``X-Postmark-Server-Token`` header and JSON ``From``,
``To``, ``Subject``, ``TextBody``, ``HtmlBody``, ``MessageStream``. The delivery
key travels in ``Metadata`` (searchable in Postmark and echoed by its webhooks) and
as an ``X-Tidings-Key`` message header. Postmark has no idempotency header, so
``deduplicates`` is False. The receipt is ``MessageID``.

Lookup by key: Postmark's Messages API, outbound message search
(https://postmarkapp.com/developer/api/messages-api#outbound-message-search),
``GET {base}/messages/outbound?count=…&offset=0&metadata_tidings_key=<key>`` (a
``metadata_<name>`` parameter filters on that Metadata value; the official
postmark.js ``OutboundMessagesFilteringParameters`` passes them through), with the
server token. It answers ``{"TotalCount", "Messages": [{"MessageID", "Status",
"Metadata", …}]}``: a message whose Metadata carries our key is found accepted
(Postmark's statuses are Queued, Sent and Processed; a bounce comes later, by
webhook), none is not found, and any failure of the search is unknown. Search results
lag the send by seconds, so "not found" is believed only after ``lookup_settle_s``.

Postmark refuses with HTTP 422 and an ``ErrorCode``; the code decides:

==================================  =============================================
ErrorCode                           outcome
==================================  =============================================
429 (rate limit exceeded)           RateLimited
10 bad token, 100 maintenance,      Transient: about the account or its settings,
400/401 sender signature missing    not this message; the retry budget ends in the
or unconfirmed, 405 not allowed     dead-letter queue, from which a redrive
to send, 412 account pending,       recovers once the account is fixed
413 account may not send
406 inactive recipient, 300         Permanent
invalid request, any other
==================================  =============================================
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from email.utils import formataddr
from typing import Any

from pydantic import SecretStr

from tidings.config.endpoints import POSTMARK_BASE_URL as DEFAULT_BASE_URL
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
from tidings.core.policy import parse_retry_after
from tidings.providers.http_outcomes import NO_CONTENT, HttpAdapter, error_text, json_of
from tidings.providers.httpx_lean import httpx

TOKEN_HEADER = "X-Postmark-Server-Token"
KEY_HEADER = "X-Tidings-Key"
# Postmark caps a metadata value at 80 characters; longer keys go in by their digest.
METADATA_VALUE_LIMIT = 80
RATE_LIMITED_CODES = frozenset({429})
ACCOUNT_CODES = frozenset({10, 100, 400, 401, 405, 412, 413})


def metadata_for(key: str) -> dict[str, str]:
    """The Metadata a message carries: the key itself, or its SHA-256 when too long."""
    if len(key) <= METADATA_VALUE_LIMIT:
        return {"tidings_key": key}
    return {"tidings_key_sha256": hashlib.sha256(key.encode()).hexdigest()}


class PostmarkProvider(HttpAdapter):
    """Send one email per message; never raises for an answer. Looks a key up by its
    Metadata in the outbound message search."""

    supports_lookup = True
    lookup_settle_s = 60.0
    #: ``POST /email/batch`` takes up to 500 messages (and 50 MB) in one request.
    batch_max_messages = 500
    SEARCH_COUNT = 50

    def __init__(self, *, server_token: str | SecretStr, from_address: str, channel: str,
                 from_name: str | None = None, reply_to: str | None = None,
                 message_stream: str = "outbound", base_url: str = DEFAULT_BASE_URL,
                 client: httpx.AsyncClient | None = None, clock: Clock,
                 timeout_s: float = 10.0, max_connections: int = 100,
                 name: str = "postmark") -> None:
        token = server_token if isinstance(server_token, SecretStr) else SecretStr(server_token)
        super().__init__(name=name, channel=channel, client=client, clock=clock,
                         timeout_s=timeout_s, max_connections=max_connections,
                         secrets=[token])
        self._url = httpx.URL(f"{base_url.rstrip('/')}/email")
        self._batch_url = httpx.URL(f"{base_url.rstrip('/')}/email/batch")
        self._search_url = httpx.URL(f"{base_url.rstrip('/')}/messages/outbound")
        self._token = token
        self._from = formataddr((from_name, from_address)) if from_name else from_address
        self._reply_to = reply_to
        self._stream = message_stream

    async def send(self, request: SendRequest) -> Outcome:
        """Send one email carrying the delivery key; never raises."""
        message = self._message(request)
        if message is None:
            return Permanent(reason=NO_CONTENT)
        answer = await self._exchange_json(
            "POST", self._url, headers={TOKEN_HEADER: self._token.get_secret_value()},
            body=message, send=request)
        if not isinstance(answer, httpx.Response):
            return answer
        body = json_of(answer)
        code, words = _postmark_error(body)
        if code:
            return self._refused(answer, code, words, request)
        message_id = body.get("MessageID") if isinstance(body, dict) else None
        return self._outcome(answer, request,
                             receipt=message_id if isinstance(message_id, str) else None,
                             request_id=None, reason=words or error_text(answer, body))

    async def send_batch(self, requests: Sequence[SendRequest]) -> list[Outcome]:
        """Send up to ``batch_max_messages`` emails in one ``POST /email/batch``; one
        Outcome per request, in order, from its own item of the answer; never raises.

        Postmark answers 200 even when items fail, with an array in request order of
        ``{ErrorCode, Message, MessageID, SubmittedAt, To}`` (ErrorCode 0: accepted);
        each item is mapped as a single send's answer is. Anything else is about the
        whole request and is each message's outcome: a lost answer (Uncertain), a 429,
        a refused token, a 5xx. An answer that cannot be matched to the messages item
        by item is Uncertain for each: the provider may have accepted any of them."""
        return await self._send_in_one_request(
            requests, self._batch_url, headers={TOKEN_HEADER: self._token.get_secret_value()},
            message=self._message, outcomes=self._batch_outcomes)

    def _batch_outcomes(self, answer: httpx.Response,
                        requests: Sequence[SendRequest]) -> list[Outcome]:
        """Each message's outcome from the provider's answer to their batch request."""
        body = json_of(answer)
        if answer.status_code != 200 or not isinstance(body, list):
            if 200 <= answer.status_code < 300:
                # A success that names no item: the messages may have been accepted.
                return [Uncertain(reason=f"HTTP {answer.status_code} with no per-message "
                                  "results")] * len(requests)
            code, words = _postmark_error(body)
            return [self._refused(answer, code, words, request) if code
                    else self._outcome(answer, request, receipt=None, request_id=None,
                                       reason=words or error_text(answer, body))
                    for request in requests]
        if len(body) != len(requests):
            return [Uncertain(reason=f"HTTP 200 with {len(body)} results for "
                              f"{len(requests)} messages")] * len(requests)
        outcomes: list[Outcome] = []
        for item, request in zip(body, requests, strict=True):
            code, words = _postmark_error(item)
            coded = isinstance(item, dict) and "ErrorCode" in item
            raw_code = item.get("ErrorCode") if isinstance(item, dict) else None
            message_id = item.get("MessageID") if isinstance(item, dict) else None
            if code:
                outcomes.append(self._refused(answer, code, words, request))
            elif coded and type(raw_code) is not int:
                # Neither success (0) nor a refusal Postmark documents: it may have sent.
                outcomes.append(Uncertain(reason="HTTP 200, this message's result has an "
                                          f"ErrorCode that is no number: {raw_code!r:.40}"))
            elif isinstance(message_id, str) and message_id:
                outcomes.append(Accepted(receipt=message_id))
            else:
                outcomes.append(Uncertain(reason="HTTP 200, this message's result named no "
                                          "MessageID"))
        receipts = [o.receipt for o in outcomes if isinstance(o, Accepted)]
        if len(set(receipts)) != len(receipts):
            # A MessageID names one message: an answer naming one for two cannot be matched.
            return [Uncertain(reason=f"HTTP 200 naming {len(set(receipts))} distinct "
                              f"MessageIDs for {len(receipts)} messages")] * len(requests)
        return outcomes

    def _refused(self, answer: httpx.Response, code: int, words: str | None,
                 request: SendRequest) -> Outcome:
        """The outcome of a Postmark ErrorCode (the table in the module's docstring)."""
        reason = f"HTTP {answer.status_code}: Postmark ErrorCode {code}"
        if words:
            reason += f": {self._redact(words, request)}"
        if code in RATE_LIMITED_CODES or answer.status_code == 429:
            return RateLimited(
                retry_after_s=parse_retry_after(answer.headers.get("Retry-After"),
                                                self._clock.now()),
                reason=reason)
        if code in ACCOUNT_CODES or answer.status_code >= 500:
            return Transient(reason=reason)
        return Permanent(reason=reason)

    def _message(self, request: SendRequest) -> dict[str, Any] | None:
        """The Postmark message of one send; None without rendered content."""
        content = request.content
        if content is None:
            return None
        message: dict[str, Any] = {
            "From": self._from,
            "To": request.to,
            "TextBody": content.text,
            "MessageStream": self._stream,
            "Metadata": metadata_for(request.key),
            "Headers": [*({"Name": name, "Value": value}
                          for name, value in content.headers.items()),
                        {"Name": KEY_HEADER, "Value": request.key}],
        }
        if content.subject is not None:
            message["Subject"] = content.subject
        if content.html is not None:
            message["HtmlBody"] = content.html
        if self._reply_to:
            message["ReplyTo"] = self._reply_to
        return message


    async def lookup(self, key: str) -> Lookup:
        """Search the outbound messages by our Metadata; never raises."""
        wanted = metadata_for(key)
        params = {"count": str(self.SEARCH_COUNT), "offset": "0", "messagestream": self._stream,
                  **{f"metadata_{name}": value for name, value in wanted.items()}}
        answer = await self._read(self._search_url.copy_merge_params(params),
                                  headers={TOKEN_HEADER: self._token.get_secret_value()})
        if isinstance(answer, Lookup):
            return answer
        body = json_of(answer)
        messages = body.get("Messages") if isinstance(body, dict) else None
        if not isinstance(messages, list):
            return Lookup.of_unknown("the message search answered without a Messages list")
        for message in messages:
            metadata = message.get("Metadata") if isinstance(message, dict) else None
            # Checked here too: a search that ignored the filter must not match others.
            if isinstance(metadata, dict) and all(metadata.get(k) == v
                                                  for k, v in wanted.items()):
                receipt = message.get("MessageID")
                return Lookup.of_accepted(receipt if isinstance(receipt, str) else None,
                                          detail=f"Postmark status {message.get('Status')}")
        return Lookup.of_not_found()


def _postmark_error(body: Any) -> tuple[int, str | None]:
    """``(ErrorCode, Message)``; ErrorCode 0 means success (or no Postmark body)."""
    if not isinstance(body, dict):
        return 0, None
    code = body.get("ErrorCode")
    message = body.get("Message")
    # (JSON's true is an int to Python, and no ErrorCode)
    return (code if type(code) is int else 0), (str(message) if message else None)
