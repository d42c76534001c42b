"""SMS through Twilio's Messages API.

``POST {base}/2010-04-01/Accounts/{AccountSid}/Messages.json``, form-encoded ``To``,
``From`` and/or ``MessagingServiceSid``, ``Body`` (the rendered text), with HTTP
basic auth (AccountSid, or an API key SID, and its secret). The delivery key goes in
``I-Twilio-Idempotency-Token``. Twilio documents that header for the requests it
makes to webhooks, not as a deduplication promise of the Messages API, so this
adapter does not claim ``deduplicates``. The receipt is the message ``sid``; the
request id is the ``Twilio-Request-Id`` header.

Answers map as in ``http_outcomes``, plus one Twilio error code: 21611 (the sender's
queue is full) is a 400 that means "slow down", so it is RateLimited.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote, urlencode

import httpx
from pydantic import SecretStr

from tidings.clock import Clock
from tidings.errors import ConfigurationError
from tidings.model import Outcome, Permanent, RateLimited, SendRequest
from tidings.providers.config import TWILIO_BASE_URL
from tidings.providers.http_outcomes import NO_CONTENT, HttpAdapter, header_value, json_of

DEFAULT_BASE_URL = TWILIO_BASE_URL
IDEMPOTENCY_HEADER = "I-Twilio-Idempotency-Token"
REQUEST_ID_HEADER = "Twilio-Request-Id"
_QUEUE_OVERFLOW = 21611


class TwilioProvider(HttpAdapter):
    """Send an SMS per message; never raises for an answer."""

    def __init__(self, *, account_sid: str, auth_token: str | SecretStr, channel: str,
                 from_number: str | None = None, messaging_service_sid: str | None = None,
                 api_key_sid: str | None = None, status_callback: str | None = None,
                 base_url: str = DEFAULT_BASE_URL, client: httpx.AsyncClient | None = None,
                 clock: Clock | None = None, timeout_s: float = 10.0,
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
            form.append(("StatusCallback", self._status_callback))
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
        sid = body.get("sid") if isinstance(body, dict) else None
        return self._outcome(answer, request, receipt=sid if isinstance(sid, str) else None,
                             request_id=request_id, reason=reason)


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
