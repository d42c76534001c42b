"""The Provider port: send one message, map the answer to an Outcome.

An adapter never raises for a provider's answer: HTTP 429 is ``RateLimited``, 5xx
and connection errors before the request was sent are ``Transient``, other 4xx are
``Permanent``, a timeout or dropped connection after the request went out is
``Uncertain``. The delivery key is sent as the idempotency key, and carried where the
provider keeps it and echoes it back (metadata, custom args, a callback URL, a header).

A provider that can be asked by key sets ``supports_lookup`` and answers ``lookup``
with one of four ``LookupStatus`` answers; a failing lookup answers ``unknown``, never
not-found. Adapters also declare what the core's uncertain-send policy needs
(``tidings.delivery.uncertain.traits_of``): ``deduplicates`` and ``dedupe_window_s`` (a resend
under the same key is safe within it), ``lookup_settle_s`` (how long its read API may
lag its send API), and ``lookup_needs_hint`` (its lookup needs the recipient and the
send's time window: ``lookup(key, hint)``).
"""

from __future__ import annotations

from typing import Protocol

from tidings.core.model import SendRequest
from tidings.core.outcomes import Lookup, Outcome


class Provider(Protocol):
    name: str
    supports_lookup: bool

    async def send(self, request: SendRequest) -> Outcome: ...

    async def lookup(self, key: str) -> Lookup:
        """Ask whether ``key`` was accepted. Only called when ``supports_lookup``; with
        ``lookup_needs_hint`` it is called as ``lookup(key, hint)``."""
        ...

    async def close(self) -> None: ...
