"""The RabbitMQ transport's connection to the broker: opened on first use and again
after the broker went away (``retrying`` runs an operation again on a new connection
for up to ``RETRY_FOR_S``), broker errors as ``TransportError`` (``_io``), and
forgetting what a lost connection held (the broker gives it back to the queues).

Plain ``aio_pika.connect``, never ``connect_robust``: a silent reconnect would renumber
delivery tags under receipts still in the caller's hands.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractQueue, AbstractRobustConnection

from tidings.config.transport_urls import redact_url, split_prefix
from tidings.core.errors import TransportError
from tidings.transports.rabbitmq_messages import QueueView
from tidings.transports.wakeups import Wakeups

AMQP_ERRORS: tuple[type[BaseException], ...] = (
    aiormq.exceptions.AMQPError, aio_pika.exceptions.AMQPException, ConnectionError,
    OSError, asyncio.TimeoutError, RuntimeError)
#: The broker went away (restarted, connection dropped): worth connecting again.
LOST: tuple[type[BaseException], ...] = (
    ConnectionError, OSError, asyncio.TimeoutError,
    aiormq.exceptions.ChannelInvalidStateError)
#: Errors of a connection that connecting again cannot mend.
NOT_LOST: tuple[type[BaseException], ...] = (
    aiormq.exceptions.AuthenticationError, aiormq.exceptions.ProbableAuthenticationError,
    aiormq.exceptions.IncompatibleProtocolError)
#: How long an operation keeps connecting again after the broker went away.
RETRY_FOR_S = 30.0
#: How long one broker call may take before the connection counts as lost (aio-pika's
#: five seconds for a get are too few on a loaded machine: dropping the connection
#: gives back everything it holds and makes the load worse). Every call has this bound,
#: the declares, publishes and deletes too (aio-pika's default for them is none): a
#: call whose answer never comes, as when the broker cuts the connection under it,
#: must end in a reconnect, not hold its caller for ever.
OP_TIMEOUT_S = 60.0

#: Under the name the transport logged as when it was one module.
log = logging.getLogger("tidings.transports.rabbitmq")
P = ParamSpec("P")
T = TypeVar("T")
#: The transport a retried operation runs on.
C = TypeVar("C", bound="RabbitConnection")


class BrokerLost(TransportError):
    """The connection to the broker broke: the operation is tried again (see
    ``retrying``); what this instance held went back to the queues with it."""


def retrying(method: Callable[Concatenate[C, P], Coroutine[Any, Any, T]]
             ) -> Callable[Concatenate[C, P], Coroutine[Any, Any, T]]:
    """Run ``method`` again on a new connection while the broker is away, for up to
    ``RETRY_FOR_S``. Every operation may run again: a publish repeated publishes
    duplicates (the consumer's ledger sees them), and acks, nacks and dead-letters of
    receipts from the lost connection are ignored (their messages come back)."""
    @functools.wraps(method)
    async def again(transport: C, /, *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + transport.retry_for_s
        pause = 0.05
        while True:
            try:
                return await method(transport, *args, **kwargs)
            except BrokerLost as lost:
                if transport._closed:
                    raise TransportError(str(lost)) from lost
                if loop.time() + pause > give_up:
                    raise TransportError(f"{lost} (tried for {transport.retry_for_s:g} s)"
                                         ) from lost
                log.warning("broker connection lost; connecting again",
                            extra={"error": str(lost), "broker": transport.safe_url})
                await asyncio.sleep(pause)
                pause = min(1.0, pause * 2)

    return again


class RabbitConnection:
    """One connection to the broker, its channels and this instance's queue views."""

    def __init__(self, url: str, *, retry_for_s: float | None = None) -> None:
        self.url, self.prefix = split_prefix(url)
        self.retry_for_s = RETRY_FOR_S if retry_for_s is None else retry_for_s
        """How long an operation is tried again while the broker is away."""
        self.safe_url = redact_url(self.url)
        self._instance = uuid.uuid4().hex[:12]
        self._order = itertools.count()
        self._generation = 0
        #: Connections opened so far (one more after each time the broker went away).
        self.connections_opened = 0
        self._connection: AbstractRobustConnection | None = None
        self._channel: AbstractChannel | None = None
        self._probe: AbstractChannel | None = None
        self._lock = asyncio.Lock()
        self._declared: set[str] = set()
        self._queues: dict[str, AbstractQueue] = {}
        self._get_channels: list[AbstractChannel] = []
        self._get_views: dict[str, list[AbstractQueue]] = {}
        self._connect_lock = asyncio.Lock()
        self._views: dict[str, QueueView] = {}
        self._wakeups = Wakeups()
        self._closed = False

    @retrying
    async def _connect_once(self) -> None:
        async with self._io("connect"):
            await self._chan()

    # ------------------------------------------------------------ connection

    @contextlib.asynccontextmanager
    async def _io(self, what: str) -> AsyncIterator[None]:
        """Broker errors as ``TransportError``; a broken channel is opened again by the
        next call, and what it held goes back to the queue with it."""
        try:
            yield
        except TransportError:
            raise
        except AMQP_ERRORS as exc:
            await self._drop()
            text = f"RabbitMQ at {self.safe_url}: {what}: {type(exc).__name__}: {exc}"
            if isinstance(exc, LOST) and not isinstance(exc, NOT_LOST):
                raise BrokerLost(text) from exc
            raise TransportError(text) from exc

    async def _drop(self) -> None:
        """Forget the connection and everything held on it (the broker returns it)."""
        connection, self._connection, self._channel, self._probe = (
            self._connection, None, None, None)
        self._get_channels = []
        self._get_views = {}
        for view in self._views.values():
            view.held.clear()
            view.stash.clear()
            view.known.clear()
            view.overflow = False
        self._declared.clear()
        self._queues.clear()
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()

    async def _chan(self) -> AbstractChannel:
        if self._closed:
            raise TransportError("the RabbitMQ transport is closed")
        channel = self._channel
        if channel is not None and not channel.is_closed and self._connection is not None \
                and not self._connection.is_closed:
            return channel
        async with self._connect_lock:
            if self._channel is not None and self._channel is not channel:
                return self._channel  # another task connected meanwhile
            return await self._connect()

    async def _connect(self) -> AbstractChannel:
        await self._drop()
        # connect, not connect_robust: a silent reconnect would renumber delivery tags
        # under receipts still in our hands.
        self._connection = await aio_pika.connect(self.url, timeout=30)  # type: ignore[assignment]
        self._generation += 1
        self.connections_opened += 1
        assert self._connection is not None
        self._channel = await self._connection.channel(publisher_confirms=True)
        return self._channel

    async def _probe_chan(self) -> AbstractChannel:
        await self._chan()
        if self._probe is None or self._probe.is_closed:
            assert self._connection is not None
            self._probe = await self._connection.channel(publisher_confirms=False)
        return self._probe
