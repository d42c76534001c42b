"""The Provider port: send one message, map the answer to an Outcome.

An adapter never raises for a provider's answer: HTTP 429 is ``RateLimited``, 5xx
and connection errors before the request was sent are ``Transient``, other 4xx are
``Permanent``, a timeout or dropped connection after the request went out is
``Uncertain``. The delivery key is sent as the idempotency key.
"""

from __future__ import annotations

from typing import Protocol

from tidings.model import Lookup, Outcome, SendRequest


class Provider(Protocol):
    name: str
    supports_lookup: bool

    async def send(self, request: SendRequest) -> Outcome: ...

    async def lookup(self, key: str) -> Lookup:
        """Ask whether ``key`` was accepted. Only called when ``supports_lookup``."""
        ...

    async def close(self) -> None: ...
