"""Which transport the settings name, and opening it (called by ``runtime``).

``transport = "sql"`` (the default) is the store's own queue table: admission writes
intents and their messages in one transaction. A broker URL names a transport of its
own beside the store, and admission then writes intents ``selected`` (the outbox) for
the relay to publish:

- ``redis://[:password@]host[:port][/db][?prefix=name]`` (``rediss://`` with TLS):
  Redis Streams (``transports.redis_streams``);
- ``amqp://user:password@host[:port][/vhost][?prefix=name]`` (``amqps://`` with TLS):
  RabbitMQ (``transports.rabbitmq``).

``prefix`` names the transport's keys or queues on a shared server (default
``tidings``). Every error names the field ``transport`` and shows the URL with its
password replaced by ``***``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from tidings.config.transport_urls import (
    DEFAULT_PREFIX,
    SQL,
    redact_url,
    split_prefix,
    transport_kind,
)
from tidings.core.errors import ConfigurationError
from tidings.transports.base import Transport

__all__ = ["DEFAULT_PREFIX", "OPENERS", "SQL", "is_store_queue", "open_transport",
           "redact_url", "split_prefix", "transport_kind"]

async def _open_redis(url: str, patience_s: float | None) -> Transport:
    """Redis Streams: one stream and consumer group per channel queue."""
    try:
        from tidings.transports.redis_streams import RedisStreamsTransport
    except ImportError as exc:
        raise ConfigurationError("transport", f"{redact_url(url)}: Redis Streams needs the "
                                 "extra: pip install 'tidings[redis]'") from exc
    if patience_s is None:
        return await RedisStreamsTransport.open(url)
    return await RedisStreamsTransport.open(url, reconnect_s=patience_s)


async def _open_amqp(url: str, patience_s: float | None) -> Transport:
    """RabbitMQ: one durable quorum queue per channel queue."""
    try:
        from tidings.transports.rabbitmq import RabbitTransport
    except ImportError as exc:
        raise ConfigurationError("transport", f"{redact_url(url)}: RabbitMQ needs the "
                                 "extra: pip install 'tidings[rabbitmq]'") from exc
    return await RabbitTransport.open(url, retry_for_s=patience_s)


#: One opener per broker kind: a new broker is one entry here and one in
#: ``tidings.config.transport_urls``' schemes.
OPENERS: dict[str, Callable[[str, float | None], Awaitable[Transport]]] = {
    "redis": _open_redis,
    "amqp": _open_amqp,
}


def is_store_queue(value: str) -> bool:
    """True when the setting names the store's own queue table (fused admission)."""
    return value == SQL


async def open_transport(value: str, *, store_queue: Transport | None = None,
                         patience_s: float | None = None) -> Transport:
    """The transport the setting ``transport`` names: ``store_queue`` itself for
    ``"sql"``, else the broker's adapter, opened (a TransportError if it cannot be
    reached, naming the URL without its password). ``patience_s``: how long a broker
    that cannot be reached is tried again (None: the adapter's default, made for
    services that should ride out a broker restart)."""
    try:
        kind = transport_kind(value)
    except ValueError as exc:
        raise ConfigurationError("transport", str(exc)) from None
    if kind == SQL:
        if store_queue is None:
            raise ConfigurationError("transport", '"sql" is the store\'s own queue: '
                                     "open the store (runtime.open_store)")
        return store_queue
    return await OPENERS[kind](value, patience_s)
