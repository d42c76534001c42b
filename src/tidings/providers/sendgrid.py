"""Email through SendGrid's v3 Mail Send API.

``POST {base}/v3/mail/send`` with a bearer API key and the v3 JSON shape
(personalizations, from, subject, content as text/plain then text/html). SendGrid
has no idempotency header: the delivery key travels in ``custom_args`` (so it shows
up in SendGrid's event webhooks) and as an ``X-Tidings-Key`` message header, but a
retry of an uncertain send can deliver twice, so ``deduplicates`` is False. SendGrid
answers 202 with an empty body; the receipt is the ``X-Message-Id`` header.
"""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import SecretStr

from tidings.clock import Clock
from tidings.model import Outcome, Permanent, SendRequest
from tidings.providers.config import SENDGRID_BASE_URL
from tidings.providers.http_outcomes import NO_CONTENT, HttpAdapter, error_text, json_of

DEFAULT_BASE_URL = SENDGRID_BASE_URL
KEY_HEADER = "X-Tidings-Key"
KEY_ARG = "tidings_key"
MESSAGE_ID_HEADER = "X-Message-Id"


class SendGridProvider(HttpAdapter):
    """Send one email per message; never raises for an answer."""

    def __init__(self, *, api_key: str | SecretStr, from_address: str, channel: str,
                 from_name: str | None = None, reply_to: str | None = None,
                 base_url: str = DEFAULT_BASE_URL, client: httpx.AsyncClient | None = None,
                 clock: Clock | None = None, timeout_s: float = 10.0,
                 max_connections: int = 100, name: str = "sendgrid") -> None:
        key = api_key if isinstance(api_key, SecretStr) else SecretStr(api_key)
        super().__init__(name=name, channel=channel, client=client, clock=clock,
                         timeout_s=timeout_s, max_connections=max_connections,
                         secrets=[key])
        self._url = httpx.URL(f"{base_url.rstrip('/')}/v3/mail/send")
        self._api_key = key
        self._from: dict[str, str] = {"email": from_address}
        if from_name:
            self._from["name"] = from_name
        self._reply_to = reply_to

    async def send(self, request: SendRequest) -> Outcome:
        """Send one email carrying the delivery key; never raises."""
        content = request.content
        if content is None:
            return Permanent(reason=NO_CONTENT)
        parts = [{"type": "text/plain", "value": content.text}]
        if content.html is not None:
            parts.append({"type": "text/html", "value": content.html})
        message: dict[str, Any] = {
            "personalizations": [{"to": [{"email": request.to}]}],
            "from": self._from,
            "content": parts,
            "custom_args": {KEY_ARG: request.key},
            "headers": {KEY_HEADER: request.key},
        }
        if content.subject is not None:
            message["subject"] = content.subject
        if self._reply_to:
            message["reply_to"] = {"email": self._reply_to}
        answer = await self._exchange_json(
            "POST", self._url,
            headers={"Authorization": f"Bearer {self._api_key.get_secret_value()}"},
            body=message, send=request)
        if not isinstance(answer, httpx.Response):
            return answer
        return self._outcome(answer, request,
                             receipt=answer.headers.get(MESSAGE_ID_HEADER) or None,
                             request_id=None, reason=error_text(answer, json_of(answer)))

