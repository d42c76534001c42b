"""A fault-injection provider for tests and the sandbox: it raises instead of answering.

``RaisingProvider`` wraps another provider (the sandbox, in the fault tests) and, per
send, at random:

- with probability ``before``, raises before calling it: nothing was sent;
- with probability ``after``, calls it and then raises: the inner provider really
  handled the request (the sandbox accepted it and counted it) and the answer is lost
  in a raise, as when a client library fails while reading its response.

Its error names the recipient, as client libraries' messages do, so that a test also
proves the worker keeps the address out of the ledger and the logs. It is a test
facility, never a production adapter: nothing in the settings builds it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tidings.core.model import SendRequest
from tidings.core.outcomes import Lookup, Outcome
from tidings.providers.base import Provider


class InjectedFault(ConnectionError):
    """What ``RaisingProvider`` raises (a ConnectionError, as a pool's error would be)."""


@dataclass(kw_only=True)
class FaultCounts:
    """What the provider did: its own count, beside the sandbox's."""

    sends: int = 0
    raised_before: int = 0
    raised_after: int = 0


class RaisingProvider:
    """Wraps ``inner``; raises before or after its send at random (see the module)."""

    def __init__(self, inner: Provider, *, before: float, after: float,
                 rng: random.Random | None = None) -> None:
        if min(before, after) < 0.0 or before + after > 1.0:
            raise ValueError("before and after are probabilities whose sum is at most 1")
        self.inner = inner
        self.name = f"raising-{inner.name}"
        self.supports_lookup = inner.supports_lookup
        self.before = before
        self.after = after
        self.counts = FaultCounts()
        self._rng = rng or random.Random()

    async def send(self, request: SendRequest) -> Outcome:
        self.counts.sends += 1
        draw = self._rng.random()
        if draw < self.before:
            self.counts.raised_before += 1
            raise InjectedFault(f"Too many connections (before sending to {request.to})")
        outcome = await self.inner.send(request)
        if draw < self.before + self.after:
            self.counts.raised_after += 1
            raise InjectedFault(f"connection reset reading the answer for {request.to}")
        return outcome

    async def lookup(self, key: str) -> Lookup:
        return await self.inner.lookup(key)

    async def close(self) -> None:
        await self.inner.close()
