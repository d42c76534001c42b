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
from urllib.parse import parse_qs, urlsplit, urlunsplit

from tidings.errors import ConfigurationError
from tidings.transports.base import Transport

#: The store's own queue table.
SQL = "sql"
#: The key or queue-name prefix of a broker transport when its URL names none.
DEFAULT_PREFIX = "tidings"

_SCHEMES = {"redis": "redis", "rediss": "redis", "amqp": "amqp", "amqps": "amqp"}
_EXAMPLES = ('"sql" (the store\'s own queue), "redis://127.0.0.1:6379/0" or '
             '"amqp://guest:guest@127.0.0.1:5672/"')


def redact_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``: safe for errors and logs."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, tail = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return url
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}{sep}{user}{':***' if colon else ''}@{host}{slash}{tail}"


def transport_kind(value: str) -> str:
    """``"sql"``, ``"redis"`` or ``"amqp"`` for a valid setting; ValueError (its text
    never quoting a password) otherwise."""
    if value == SQL:
        return SQL
    safe = redact_url(value)
    scheme, sep, _ = value.partition("://")
    kind = _SCHEMES.get(scheme.lower()) if sep else None
    if kind is None:
        raise ValueError(f"{safe!r} is not a transport; use {_EXAMPLES}")
    try:
        parts = urlsplit(value)
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ValueError(f"{safe!r} is not a valid {scheme} URL ({exc})") from None
    if not host:
        raise ValueError(f"{safe!r} names no host; e.g. {_EXAMPLES}")
    if port == 0:
        raise ValueError(f"{safe!r}: port 0 is not a port")
    if kind == "redis" and parts.path.strip("/") and not parts.path.strip("/").isdigit():
        raise ValueError(f"{safe!r}: a Redis URL's path is its database number (/0)")
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"prefix"})
    if unknown:
        raise ValueError(f"{safe!r}: unknown option {unknown[0]!r}; the one option is prefix")
    prefix = query.get("prefix", [DEFAULT_PREFIX])[-1]
    if not prefix or not all(c.isalnum() or c in "-_.:" for c in prefix):
        raise ValueError(f"{safe!r}: prefix must be letters, digits and - _ . : only")
    return kind


def split_prefix(url: str) -> tuple[str, str]:
    """``(url without its prefix option, prefix)`` of a broker URL."""
    parts = urlsplit(url)
    query = parse_qs(parts.query, keep_blank_values=True)
    prefix = query.pop("prefix", [DEFAULT_PREFIX])[-1]
    rest = "&".join(f"{k}={v}" for k, values in query.items() for v in values)
    return urlunsplit(parts._replace(query=rest)), prefix


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


#: One opener per broker kind: a new broker is one entry here and one in ``_SCHEMES``.
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
