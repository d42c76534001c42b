"""Delivery in an application's tests: an in-memory provider, and its sends run now.

``Outbox`` is a provider that keeps what it is sent (Django's ``mail.outbox``, for
every channel): each send is accepted, in memory. ``outbox(client)`` puts one in front
of every channel of a client's runtime (``await aoutbox(runtime)`` for the async
runtime), in place of the providers the settings name, which are never built; the
intents, the ledger and the worker are tidings' own, so a template that cannot render,
an opted-out recipient or a suppressed address end as they would in production.

``deliver(client)`` (``await adeliver(runtime)``) runs each channel's worker until
nothing due is left in its queue, and answers what it sent; ``eager(client)``
(``aeager(runtime)``) makes every notify deliver before it returns, as Celery's eager
mode runs a task at once. A notify joined to the caller's transaction is delivered at
its commit under Django (``transaction.on_commit``); elsewhere (a SQLAlchemy session,
a raw psycopg connection) call ``deliver`` once the transaction has committed, since
nothing can be sent before then.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from tidings.core.model import SendRequest
from tidings.core.outcomes import Accepted, Lookup, Outcome

if TYPE_CHECKING:
    from tidings.client import Client
    from tidings.runtime import Runtime

T = TypeVar("T")

#: The worker id the deliveries of a test run under (in the ledger's events).
WORKER_ID = "tidings-testing"


class Outbox:
    """A provider that accepts every send and keeps it, in order (``sent``)."""

    name = "outbox"
    supports_lookup = True

    def __init__(self) -> None:
        self.sent: list[SendRequest] = []

    async def send(self, request: SendRequest) -> Outcome:
        self.sent.append(request)
        return Accepted(receipt=f"outbox-{len(self.sent)}")

    async def lookup(self, key: str) -> Lookup:
        for number, request in enumerate(self.sent, start=1):
            if request.key == key:
                return Lookup.of_accepted(f"outbox-{number}")
        return Lookup(found=False)

    async def close(self) -> None:
        return None

    def to(self, address: str) -> list[SendRequest]:
        """What was sent to ``address``."""
        return [r for r in self.sent if r.to == address]

    def keys(self) -> list[str]:
        """The delivery keys sent, in order."""
        return [r.key for r in self.sent]

    def clear(self) -> None:
        self.sent.clear()

    def __repr__(self) -> str:
        return f"<Outbox {len(self.sent)} sent>"


async def aoutbox(runtime: Runtime, outbox: Outbox | None = None) -> Outbox:
    """Put ``outbox`` (a new one by default) in front of every channel of ``runtime``;
    a provider built already is closed first."""
    box = outbox if outbox is not None else Outbox()
    for channel in sorted(set(runtime.settings.channels) | set(runtime.providers)):
        built = runtime.providers.get(channel)
        if built is not None and built is not box:
            await built.close()
        runtime.providers[channel] = box
    return box


def outbox(client: Client, outbox: Outbox | None = None) -> Outbox:
    """``aoutbox`` on a ``Client``'s runtime (started now if it was not)."""
    return _on(client, lambda runtime: aoutbox(runtime, outbox))


async def adeliver(runtime: Runtime, *, channels: Sequence[str] | None = None
                   ) -> list[SendRequest]:
    """Run the worker of each channel (default: every one) until its queue has nothing
    due; answer what the outbox was sent meanwhile (nothing when no ``Outbox`` is in
    front). With a broker transport the outbox relay publishes first."""
    boxes = {id(p): p for p in runtime.providers.values() if isinstance(p, Outbox)}
    before = {key: len(box.sent) for key, box in boxes.items()}
    if not runtime.enqueue_in_store:
        from tidings.admission.relay import relay_pass

        await relay_pass(runtime.store, runtime.transport, now=runtime.clock.now(),
                         config=runtime.relay_config(), clock=runtime.clock)
    for channel in channels if channels is not None else runtime.channels:
        worker = runtime.worker(channel, WORKER_ID)
        while await worker.run_once():
            pass
    return [request for key, box in boxes.items() for request in box.sent[before[key]:]]


def deliver(client: Client, *, channels: Sequence[str] | None = None) -> list[SendRequest]:
    """``adeliver`` on a ``Client``'s runtime."""
    return _on(client, lambda runtime: adeliver(runtime, channels=channels))


@contextlib.contextmanager
def eager(client: Client, box: Outbox | None = None) -> Iterator[Outbox]:
    """Within the block, every ``notify``/``notify_many`` of ``client`` (and so of the
    doors built on it: ``tidings.contrib.django``, a sync SQLAlchemy session) delivers
    to an outbox before it returns; one joined to a Django transaction, at its commit.
    Yields the outbox; the client's methods are restored after."""
    found = outbox(client, box)
    originals = {name: getattr(client, name) for name in ("notify", "notify_many")}

    def wrap(name: str) -> Any:
        call = originals[name]

        @functools.wraps(call)
        def delivering(*args: Any, **kwargs: Any) -> Any:
            answer = call(*args, **kwargs)
            connection = kwargs.get("connection")
            if connection is None:
                deliver(client)
            elif not _deliver_on_django_commit(client, connection):
                pass  # committed by its caller later: deliver(client) then
            return answer

        return delivering

    for name in originals:
        setattr(client, name, wrap(name))
    try:
        yield found
    finally:
        for name in originals:
            vars(client).pop(name, None)


@contextlib.asynccontextmanager
async def aeager(runtime: Runtime, box: Outbox | None = None) -> AsyncIterator[Outbox]:
    """``eager`` for the async runtime: each ``notify``/``notify_many`` not joined to a
    transaction delivers before it returns (a joined one: ``await adeliver(runtime)``
    after the commit)."""
    found = await aoutbox(runtime, box)
    originals = {name: getattr(runtime, name) for name in ("notify", "notify_many")}

    def wrap(name: str) -> Any:
        call = originals[name]

        @functools.wraps(call)
        async def delivering(*args: Any, **kwargs: Any) -> Any:
            answer = await call(*args, **kwargs)
            if kwargs.get("connection") is None:
                await adeliver(runtime)
            return answer

        return delivering

    for name in originals:
        setattr(runtime, name, wrap(name))
    try:
        yield found
    finally:
        for name in originals:
            vars(runtime).pop(name, None)


def _deliver_on_django_commit(client: Client, connection: object) -> bool:
    """Deliver at the commit of the Django transaction ``connection`` belongs to; False
    when it is not Django's (Django not imported, or another connection)."""
    import sys

    if "django.db" not in sys.modules:
        return False
    from django.db import connections, transaction

    for alias in connections:
        if connections[alias].connection is connection:
            transaction.on_commit(lambda: deliver(client), using=alias)
            return True
    return False


def _on(client: Client, call: Callable[[Runtime], Awaitable[T]]) -> T:
    # The client's own bridge: the call runs on its loop, against its runtime.
    return client._call(call)
