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

A provider with a batch endpoint (many messages in one request, each with its own
result) also implements ``BatchProvider``: ``batch_max_messages`` and ``send_batch``,
which answers one Outcome per request, in order, and never raises for the provider's
answer either. A failure of the whole request (a lost answer, a 429, refused
credentials) is that same outcome for each message; the channel's worker then settles
each intent on its own key (see ``tidings.delivery.batching``). A provider that
deduplicates single sends on our key but whose batch requests carry no key per message
(Resend's) sets ``batch_deduplicates = False``: beside a batch table, a channel of it
may not choose ``uncertain = "resend"``.

A provider whose process can have only so many requests on the wire at once (a pool of
connections: SMTP's ``max_connections``) says so in ``max_concurrent_sends``; the
worker then starts no more sends than that at once, so a send waiting for a connection
is not yet marked started, and a crash holds only what was on the wire
(``concurrent_sends``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

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


@runtime_checkable
class BatchProvider(Protocol):
    """A provider that can carry many messages in one request (see the module)."""

    batch_max_messages: int
    """The most messages the provider takes in one request."""

    async def send_batch(self, requests: Sequence[SendRequest]) -> list[Outcome]:
        """Send ``requests`` in one request (at most ``batch_max_messages``); one Outcome
        per request, in order. Never raises for an answer."""
        ...


def batch_limit(provider: object) -> int:
    """How many messages ``provider`` carries in one request: 1 unless it is a
    ``BatchProvider``."""
    if isinstance(provider, BatchProvider):
        return max(1, int(provider.batch_max_messages))
    return 1


def concurrent_sends(provider: object) -> int | None:
    """How many sends ``provider`` carries at once in one process (its
    ``max_concurrent_sends``), or None where it declares no bound."""
    limit = getattr(provider, "max_concurrent_sends", None)
    if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1:
        return limit
    return None
