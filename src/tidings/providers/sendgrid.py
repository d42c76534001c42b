"""Email through SendGrid's v3 Mail Send API.

``POST {base}/v3/mail/send`` with a bearer API key and the v3 JSON shape
(personalizations, from, subject, content as text/plain then text/html). SendGrid
has no idempotency header: the delivery key travels in ``custom_args`` (so it shows
up in SendGrid's event webhooks) and as an ``X-Tidings-Key`` message header, but a
retry of an uncertain send can deliver twice, so ``deduplicates`` is False. SendGrid
answers 202 with an empty body; the receipt is the ``X-Message-Id`` header.

Lookup by key: SendGrid's Email Activity Feed API, "Filter all messages"
(https://www.twilio.com/docs/sendgrid/api-reference/email-activity/filter-all-messages,
query language in https://www.twilio.com/docs/sendgrid/for-developers/sending-email/getting-started-email-activity-api),
``GET {base}/v3/messages?limit=…&query=unique_args['tidings_key']="<key>"`` with the
API key; custom_args are queried as ``unique_args``. It answers ``{"messages":
[{"msg_id", "status", …}]}`` with status ``processed``, ``delivered`` or
``not_delivered``: the first two are found accepted, ``not_delivered`` (dropped or
bounced) found failed, none not found. The API is a paid add-on and needs an API key
with Email Activity access: without them it refuses, which is unknown (never not
found). Activity lags the send by minutes, so "not found" is believed only after
``lookup_settle_s``. A key holding a quote or a backslash cannot be written in the
query language: its lookup is unknown (and the send is held).
"""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr

from tidings.config.endpoints import SENDGRID_BASE_URL as DEFAULT_BASE_URL
from tidings.core.clock import Clock
from tidings.core.model import SendRequest
from tidings.core.outcomes import Lookup, Outcome, Permanent
from tidings.providers.http_outcomes import NO_CONTENT, HttpAdapter, error_text, json_of
from tidings.providers.httpx_lean import httpx
from tidings.webhooks.parse import sendgrid_message_id

KEY_HEADER = "X-Tidings-Key"
KEY_ARG = "tidings_key"
MESSAGE_ID_HEADER = "X-Message-Id"
_UNQUOTABLE = frozenset("\"'\\")


class SendGridProvider(HttpAdapter):
    """Send one email per message; never raises for an answer. Looks a key up by its
    custom arg in the Email Activity Feed."""

    supports_lookup = True
    lookup_settle_s = 600.0

    def __init__(self, *, api_key: str | SecretStr, from_address: str, channel: str,
                 from_name: str | None = None, reply_to: str | None = None,
                 base_url: str = DEFAULT_BASE_URL, client: httpx.AsyncClient | None = None,
                 clock: Clock, timeout_s: float = 10.0,
                 max_connections: int = 100, name: str = "sendgrid") -> None:
        key = api_key if isinstance(api_key, SecretStr) else SecretStr(api_key)
        super().__init__(name=name, channel=channel, client=client, clock=clock,
                         timeout_s=timeout_s, max_connections=max_connections,
                         secrets=[key])
        self._url = httpx.URL(f"{base_url.rstrip('/')}/v3/mail/send")
        self._activity_url = httpx.URL(f"{base_url.rstrip('/')}/v3/messages")
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
            "headers": {**content.headers, KEY_HEADER: request.key},
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


    async def lookup(self, key: str) -> Lookup:
        """Ask the Email Activity Feed for the message carrying our custom arg; never
        raises."""
        if _UNQUOTABLE & set(key):
            return Lookup.of_unknown("the key holds a quote or a backslash, which the "
                                     "Email Activity query language cannot express")
        query = f"unique_args['{KEY_ARG}']=\"{key}\""
        answer = await self._read(
            self._activity_url.copy_merge_params({"limit": "10", "query": query}),
            headers={"Authorization": f"Bearer {self._api_key.get_secret_value()}"})
        if isinstance(answer, Lookup):
            return answer
        body = json_of(answer)
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list):
            return Lookup.of_unknown("the Email Activity answer has no messages list")
        found = [m for m in messages if isinstance(m, dict) and isinstance(m.get("msg_id"), str)]
        if not found:
            return Lookup.of_not_found()
        message = found[0]
        receipt = sendgrid_message_id(str(message["msg_id"]))
        status = str(message.get("status") or "")
        if status == "not_delivered":
            return Lookup.of_failed(receipt, detail="SendGrid status not_delivered")
        return Lookup.of_accepted(receipt, detail=f"SendGrid status {status or 'unknown'}")
