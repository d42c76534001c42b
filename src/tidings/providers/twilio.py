"""SMS through Twilio's Messages API.

``POST {base}/2010-04-01/Accounts/{AccountSid}/Messages.json``, form-encoded ``To``,
``From`` and/or ``MessagingServiceSid``, ``Body`` (the rendered text), with HTTP
basic auth (AccountSid, or an API key SID, and its secret). The delivery key goes in
``I-Twilio-Idempotency-Token``. Twilio documents that header for the requests it
makes to webhooks, not as a deduplication promise of the Messages API, so this
adapter does not claim ``deduplicates``. The receipt is the message ``sid``; the
request id is the ``Twilio-Request-Id`` header.

The key is carried where Twilio echoes it: with ``status_callback`` set, every send's
``StatusCallback`` is that URL plus ``tidings_key=<key>`` in its query
(https://www.twilio.com/docs/messaging/api/message-resource#create-a-message-resource,
"StatusCallback"); Twilio calls it, signed, on every status change, and the webhook
route reads the key back from the URL (``tidings.webhooks.parse``).

Lookup: a Message resource keeps no metadata, so it is found by recipient and time,
with the Messages list (https://www.twilio.com/docs/messaging/api/message-resource#read-multiple-message-resources):
``GET …/Messages.json?To=<to>&From=<from>&PageSize=50``, newest first, each with
``sid``, ``status``, ``date_created`` (RFC 2822) and ``error_code``. The reconciler
gives the window the request left in (``lookup_needs_hint``). Exactly one message in
the window is ours: ``failed`` or ``canceled`` is found failed, any other status found
accepted; none is not found (unless a full page ends inside the window: unknown);
two or more cannot be told apart: unknown, and the send is held for the status
callback or an operator. ``DateSent`` filters are not used: a queued message has no
send date yet.

Answers map as in ``http_outcomes``, plus two Twilio error codes: 21611 (the sender's
queue is full) is a 400 that means "slow down", so it is RateLimited; 21610 (the
recipient replied STOP) is Permanent with ``code`` ``RECIPIENT_STOPPED``, which the
worker turns into a suppression of the number (``tidings.core.suppression``).
"""

from __future__ import annotations

import base64
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from pydantic import SecretStr

from tidings.config.endpoints import TWILIO_BASE_URL as DEFAULT_BASE_URL
from tidings.core.clock import Clock
from tidings.core.errors import ConfigurationError
from tidings.core.model import SendRequest
from tidings.core.outcomes import (
    RECIPIENT_STOPPED,
    Lookup,
    LookupHint,
    Outcome,
    Permanent,
    RateLimited,
)
from tidings.providers.http_outcomes import NO_CONTENT, HttpAdapter, header_value, json_of
from tidings.providers.httpx_lean import httpx

IDEMPOTENCY_HEADER = "I-Twilio-Idempotency-Token"
REQUEST_ID_HEADER = "Twilio-Request-Id"
_QUEUE_OVERFLOW = 21611
#: "Attempt to send to unsubscribed recipient": the number replied STOP.
_UNSUBSCRIBED = 21610
KEY_PARAM = "tidings_key"
PAGE_SIZE = 50
FAILED_STATUSES = frozenset({"failed", "canceled"})


def callback_for(base: str, key: str) -> str:
    """The status callback URL of one send: ``base`` with ``tidings_key=<key>`` added."""
    parts = urlsplit(base)
    query = urlencode([(KEY_PARAM, key)])
    return urlunsplit(parts._replace(query=f"{parts.query}&{query}" if parts.query else query))


class TwilioProvider(HttpAdapter):
    """Send an SMS per message; never raises for an answer. Looks a send up by recipient
    and time window in the Messages list."""

    supports_lookup = True
    lookup_needs_hint = True
    lookup_settle_s = 10.0

    def __init__(self, *, account_sid: str, auth_token: str | SecretStr, channel: str,
                 from_number: str | None = None, messaging_service_sid: str | None = None,
                 api_key_sid: str | None = None, status_callback: str | None = None,
                 base_url: str = DEFAULT_BASE_URL, client: httpx.AsyncClient | None = None,
                 clock: Clock, timeout_s: float = 10.0,
                 max_connections: int = 100, name: str = "twilio") -> None:
        token = auth_token if isinstance(auth_token, SecretStr) else SecretStr(auth_token)
        super().__init__(name=name, channel=channel, client=client, clock=clock,
                         timeout_s=timeout_s, max_connections=max_connections,
                         secrets=[token])
        if not from_number and not messaging_service_sid:
            raise ConfigurationError("from_number",
                                     "set from_number, messaging_service_sid, or both")
        self._url = httpx.URL(f"{base_url.rstrip('/')}/2010-04-01/Accounts/"
                              f"{quote(account_sid, safe='')}/Messages.json")
        self._username = api_key_sid or account_sid
        self._token = token
        self._from_number = from_number
        self._sender = [("From", from_number)] if from_number else []
        if messaging_service_sid:
            self._sender.append(("MessagingServiceSid", messaging_service_sid))
        self._status_callback = status_callback

    def _authorization(self) -> str:
        pair = f"{self._username}:{self._token.get_secret_value()}".encode()
        return "Basic " + base64.b64encode(pair).decode("ascii")

    async def send(self, request: SendRequest) -> Outcome:
        """Send one SMS with the delivery key as the idempotency token; never raises."""
        if request.content is None:
            return Permanent(reason=NO_CONTENT)
        form = [("To", request.to), *self._sender, ("Body", request.content.text)]
        if self._status_callback:
            form.append(("StatusCallback", callback_for(self._status_callback, request.key)))
        headers = {
            "Authorization": self._authorization(),
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json",
            IDEMPOTENCY_HEADER: header_value(request.key),
        }
        answer = await self._exchange(
            self._request("POST", self._url, headers=headers, content=urlencode(form).encode()),
            request)
        if not isinstance(answer, httpx.Response):
            return answer
        body = json_of(answer)
        request_id = answer.headers.get(REQUEST_ID_HEADER)
        code, reason = _twilio_error(body, answer)
        if code == _QUEUE_OVERFLOW:
            return RateLimited(request_id=request_id,
                               reason=f"HTTP {answer.status_code}: "
                                      f"{self._redact(reason or 'queue full', request)}")
        if code == _UNSUBSCRIBED:
            return Permanent(request_id=request_id, code=RECIPIENT_STOPPED,
                             reason=f"HTTP {answer.status_code}: "
                                    f"{self._redact(reason or 'recipient unsubscribed', request)}")
        sid = body.get("sid") if isinstance(body, dict) else None
        return self._outcome(answer, request, receipt=sid if isinstance(sid, str) else None,
                             request_id=request_id, reason=reason)


    async def lookup(self, key: str, hint: LookupHint | None = None) -> Lookup:
        """Find the send of ``key`` among the messages to ``hint.to`` in its window;
        never raises."""
        if hint is None:
            return Lookup.of_unknown("a Twilio lookup needs the recipient and the send time")
        params = {"To": hint.to, "PageSize": str(PAGE_SIZE)}
        if self._from_number:
            params["From"] = self._from_number
        answer = await self._read(self._url.copy_merge_params(params),
                                  headers={"Authorization": self._authorization()},
                                  address=hint.to)
        if isinstance(answer, Lookup):
            return answer
        body = json_of(answer)
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list):
            return Lookup.of_unknown("the Messages list answered without a messages list")
        created = [(m, _created_at(m)) for m in messages if isinstance(m, dict)]
        ours = [m for m, at in created
                if at is not None and hint.sent_after <= at <= hint.sent_before]
        if len(ours) > 1:
            return Lookup.of_unknown(f"{len(ours)} messages to the recipient in the send's "
                                     "window: cannot tell which is ours")
        if not ours:
            oldest = min((at for _, at in created if at is not None), default=None)
            if len(messages) >= PAGE_SIZE and (oldest is None or oldest > hint.sent_after):
                return Lookup.of_unknown("a full page of newer messages to the recipient")
            return Lookup.of_not_found()
        message = ours[0]
        sid = message.get("sid") if isinstance(message.get("sid"), str) else None
        status = str(message.get("status") or "")
        detail = f"Twilio status {status}"
        if message.get("error_code"):
            detail += f", error {message['error_code']}"
        if status in FAILED_STATUSES:
            return Lookup.of_failed(sid, detail=detail)
        return Lookup.of_accepted(sid, detail=detail)


def _created_at(message: dict[str, Any]) -> float | None:
    """A message's ``date_created`` (RFC 2822) as Unix seconds, or None."""
    value = message.get("date_created")
    if not isinstance(value, str):
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None


def _twilio_error(body: Any, response: httpx.Response) -> tuple[int | None, str | None]:
    """Twilio's error ``code`` and a reason naming it, from ``{code, message, ...}``."""
    if response.is_success:
        return None, None
    if not isinstance(body, dict):
        return None, (response.text[:200] or None) if response.content else None
    code = body.get("code") if isinstance(body.get("code"), int) else None
    message = body.get("message")
    text = str(message) if message else None
    if code is not None:
        text = f"Twilio error {code}: {text}" if text else f"Twilio error {code}"
    return code, text
