"""A generic JSON-over-HTTP provider, shaped by settings instead of code.

For a provider without an adapter of its own: the request is one JSON object whose
fields are filled from the send (``body``: JSON field → source) plus constants
(``static``); dotted field names nest (``"tags.key": "key"`` gives
``{"tags": {"key": ...}}``). Sources:

=============  ==========================================================
``key``        the delivery key (also sent in ``idempotency_header``)
``to``         the recipient's address or number
``subject``    rendered subject (omitted when None)
``text``       rendered text body
``html``       rendered HTML body (omitted when None)
``template``   the template name, for providers that render themselves
``data``       the template data, as a JSON object
``headers``    the message headers to add (``List-Unsubscribe`` and
               ``List-Unsubscribe-Post``), a JSON object; omitted when none
``recipient_id``, ``channel``
=============  ==========================================================

A body that uses ``subject``, ``text`` or ``html`` needs rendered content: a send
without it is Permanent ("no rendered content") before any network call. Answers
map as in ``http_outcomes``; the receipt is read from ``message_id_path`` (a dotted
path into the response JSON) or ``message_id_header``.

The key travels where the settings put it: ``idempotency_header`` and any body field
whose source is ``key`` (``"metadata.ref": "key"``). With ``lookup`` (settings
``lookup_url`` and its companions) the provider's read API is asked by key:
``GET lookup_url`` with ``{key}`` filled in. 404, or 200 with an empty body, an empty
list or ``null``, is not found; 200 with a message (the object, or the first of a
list) reads its status at ``status_path``: one of ``accepted`` is found accepted, one
of ``failed`` found failed, anything else unknown; every other answer, and any
transport failure, is unknown.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, get_args
from urllib.parse import quote

from pydantic import SecretStr

from tidings.config.endpoints import Source
from tidings.core.clock import Clock
from tidings.core.errors import ConfigurationError
from tidings.core.model import SendRequest
from tidings.core.outcomes import Lookup, Outcome, Permanent
from tidings.providers.http_outcomes import (
    NO_CONTENT,
    HttpAdapter,
    dotted,
    error_text,
    header_value,
    json_of,
)
from tidings.providers.httpx_lean import httpx

SOURCES: Final = frozenset(get_args(Source))
"""What a generic HTTP body field can be filled from."""

CONTENT_SOURCES: Final = frozenset({"subject", "text", "html"})


@dataclass(frozen=True, kw_only=True)
class HttpLookup:
    """How the generic adapter asks its provider by key (see the module docstring)."""

    url: str
    status_path: str = "status"
    message_id_path: str | None = "id"
    accepted: tuple[str, ...] = ("accepted", "queued", "sent", "processed", "delivered")
    failed: tuple[str, ...] = ("failed", "rejected", "dropped", "cancelled", "canceled")
    settle_s: float = 0.0


class HttpJsonProvider(HttpAdapter):
    """Send one JSON request per message to ``url``; never raises for an answer.

    ``headers`` values may be ``SecretStr`` (an API key resolved from the
    environment); they are revealed only while a request is built. ``deduplicates``
    says whether the provider honours ``idempotency_header``.
    """

    def __init__(self, *, url: str, channel: str, body: Mapping[str, str],
                 static: Mapping[str, Any] | None = None, method: str = "POST",
                 headers: Mapping[str, str | SecretStr] | None = None,
                 idempotency_header: str | None = "Idempotency-Key",
                 deduplicates: bool = False, dedupe_window_s: float | None = None,
                 lookup: HttpLookup | None = None,
                 message_id_path: str | None = "id", message_id_header: str | None = None,
                 request_id_header: str | None = "X-Request-Id",
                 client: httpx.AsyncClient | None = None, clock: Clock,
                 timeout_s: float = 10.0, max_connections: int = 100,
                 name: str = "http") -> None:
        secret_headers = {k: v for k, v in (headers or {}).items() if isinstance(v, SecretStr)}
        super().__init__(name=name, channel=channel, client=client, clock=clock,
                         timeout_s=timeout_s, max_connections=max_connections,
                         secrets=secret_headers.values())
        for field, source in body.items():
            if source not in SOURCES:
                raise ConfigurationError(f"body.{field}", f"unknown source {source!r}; "
                                         f"one of {', '.join(sorted(SOURCES))}")
        # Checked once here: a conflict ("a" and "a.b") is a settings error, not a send error.
        _nest({**copy.deepcopy(dict(static or {})), **dict.fromkeys(body, "")})
        self.deduplicates = deduplicates
        self.dedupe_window_s = dedupe_window_s
        self.supports_lookup = lookup is not None
        self.lookup_settle_s = lookup.settle_s if lookup is not None else 0.0
        self._lookup = lookup
        self._url = httpx.URL(url)
        self._method = method.upper()
        self._body = dict(body)
        self._static = dict(static or {})
        self._headers = dict(headers or {})
        self._needs_content = any(s in CONTENT_SOURCES for s in body.values())
        self._idempotency_header = idempotency_header
        self._message_id_path = message_id_path
        self._message_id_header = message_id_header
        self._request_id_header = request_id_header

    def __repr__(self) -> str:
        return (f"<HttpJsonProvider name={self.name!r} channel={self.channel!r} "
                f"{self._method} {self._url}>")

    async def send(self, request: SendRequest) -> Outcome:
        """Send one message; never raises."""
        if self._needs_content and request.content is None:
            return Permanent(reason=NO_CONTENT)
        try:
            data = dict(request.data)
        except ValueError:
            return Permanent(reason="template data is not JSON")
        values: dict[str, Any] = {
            "key": request.key, "to": request.to, "template": request.template, "data": data,
            "recipient_id": request.recipient_id, "channel": request.channel,
        }
        if request.content is not None:
            values.update(subject=request.content.subject, text=request.content.text,
                          html=request.content.html,
                          headers=dict(request.content.headers) or None)
        # A copy: a body field nested under a static object must not change the settings.
        fields = copy.deepcopy(self._static)
        for field, source in self._body.items():
            if values.get(source) is not None:
                fields[field] = values[source]
        headers = {name: value.get_secret_value() if isinstance(value, SecretStr) else value
                   for name, value in self._headers.items()}
        if self._idempotency_header:
            headers[self._idempotency_header] = header_value(request.key)
        answer = await self._exchange_json(self._method, self._url, headers=headers,
                                           body=_nest(fields), send=request)
        if not isinstance(answer, httpx.Response):
            return answer
        body = json_of(answer)
        receipt: Any = None
        if self._message_id_header:
            receipt = answer.headers.get(self._message_id_header)
        if receipt is None and self._message_id_path:
            receipt = dotted(body, self._message_id_path)
        request_id = (answer.headers.get(self._request_id_header)
                      if self._request_id_header else None)
        return self._outcome(answer, request,
                             receipt=str(receipt) if receipt not in (None, "") else None,
                             request_id=request_id, reason=error_text(answer, body))


    async def lookup(self, key: str) -> Lookup:
        """Ask the configured read API for ``key``; never raises."""
        if self._lookup is None:
            raise NotImplementedError(f"{self.name} has no lookup_url")
        spec = self._lookup
        headers = {name: value.get_secret_value() if isinstance(value, SecretStr) else value
                   for name, value in self._headers.items()}
        url = httpx.URL(spec.url.replace("{key}", quote(key, safe="")))
        answer = await self._read(url, headers=headers, not_found=True)
        if isinstance(answer, Lookup):
            return answer
        body = json_of(answer)
        if isinstance(body, list):
            body = body[0] if body else None
        if body in (None, {}, ""):
            return Lookup.of_not_found()
        status = dotted(body, spec.status_path)
        message_id = dotted(body, spec.message_id_path) if spec.message_id_path else None
        receipt = str(message_id) if message_id not in (None, "") else None
        if isinstance(status, str) and status.lower() in spec.accepted:
            return Lookup.of_accepted(receipt, detail=f"status {status}")
        if isinstance(status, str) and status.lower() in spec.failed:
            return Lookup.of_failed(receipt, detail=f"status {status}")
        return Lookup.of_unknown(f"status {str(status)[:40]!r} is neither accepted nor failed")


def _nest(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted field names as nested objects; a field that is both a value and a parent
    raises ConfigurationError naming it."""
    out: dict[str, Any] = {}
    for name, value in fields.items():
        *parents, leaf = name.split(".")
        node = out
        for i, part in enumerate(parents):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigurationError(f"body.{name}",
                                         f"{'.'.join(parents[:i + 1])!r} is already a value")
            node = child
        if leaf in node and isinstance(node[leaf], dict):
            raise ConfigurationError(f"body.{name}", f"{name!r} is already an object")
        node[leaf] = value
    return out
