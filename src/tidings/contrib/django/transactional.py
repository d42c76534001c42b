"""``notify`` inside ``transaction.atomic()``, written on Django's own connection: the
intents commit with the caller's rows or not at all (``Client.notify``'s join of a sync
psycopg connection, in the calling thread).

Refused, naming ``connection`` and why: outside ``atomic()`` (Django autocommits each
statement there, so nothing would commit together), in an atomic block marked for
rollback, on a backend other than PostgreSQL with psycopg 3, and on SQLite: tidings'
SQLite store writes through a connection of its own in its own thread, so it cannot
join Django's sqlite3 transaction, even on the same file.

Async code (an async view) awaits ``anotify``: Django runs transactions only in its
sync code, so the notify runs there (``sync_to_async``, thread-sensitive), in the
``atomic()`` block open in that code, or in one of its own. To write rows and their
notification in one transaction from an async view, put both in a sync function and
await it through ``sync_to_async`` (docs/frameworks.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from tidings.core.errors import ConfigurationError, InvalidInput

T = TypeVar("T")

if TYPE_CHECKING:
    import psycopg

    from tidings.admission.intake import NotifyRequest
    from tidings.client import Client
    from tidings.core.model import Recipient
    from tidings.core.repeats import Notified


def client() -> Client:
    """The process's ``tidings.Client``, built on first use from ``settings.TIDINGS``
    (for what needs no transaction: cancel, inspect, preferences, a notify on its own)."""
    from django.apps import apps

    from tidings.contrib.django.apps import TidingsConfig

    try:
        config = apps.get_app_config("tidings")
    except LookupError:
        raise ConfigurationError("INSTALLED_APPS", "add \"tidings.contrib.django\": it holds "
                                                   "the process's client") from None
    if not isinstance(config, TidingsConfig):
        raise ConfigurationError("INSTALLED_APPS", "the app labelled \"tidings\" is not "
                                                   "tidings.contrib.django")
    return config.client()


def joinable_connection(using: str = "default") -> psycopg.Connection[Any]:
    """The psycopg connection under Django's ``connections[using]``, if a notify can join
    its transaction now; else ``InvalidInput`` naming ``connection`` and why."""
    from django.db import connections

    conn = connections[using]
    if conn.vendor == "sqlite":
        raise InvalidInput("connection", f"Django's database {using!r} is SQLite: tidings' "
                           "SQLite store writes through a connection of its own, in its "
                           "own thread, so it cannot join Django's transaction; use "
                           "PostgreSQL for both, or notify from transaction.on_commit "
                           "(after the commit, so not atomic with it)")
    if conn.vendor != "postgresql":
        raise InvalidInput("connection", f"Django's database {using!r} is {conn.vendor}; "
                           "notify joins a PostgreSQL transaction (the psycopg 3 backend)")
    if not conn.in_atomic_block:
        raise InvalidInput("connection", "notify must run inside transaction.atomic("
                           f"using={using!r}): outside it Django commits each statement "
                           "on its own, and the intents would not commit with your rows")
    if conn.needs_rollback:
        raise InvalidInput("connection", "the atomic block is marked for rollback (an "
                           "error inside it was caught): nothing in it will commit")
    conn.ensure_connection()
    import psycopg

    raw = conn.connection
    if not isinstance(raw, psycopg.Connection):
        raise InvalidInput("connection", f"Django's database {using!r} runs on "
                           f"{type(raw).__module__}, not psycopg 3: install psycopg "
                           "(Django uses it when it is there)")
    return raw


def notify(*, key: str, recipient: Recipient | Mapping[str, Any], channels: Sequence[str],
           template: str, data: Mapping[str, Any] | None = None, due_at: float | None = None,
           expires_at: float | None = None, using: str = "default") -> Notified:
    """``Client.notify`` inside the current ``transaction.atomic()`` of Django's database
    ``using``; the keys, and which were created now (``Notified``)."""
    connection = joinable_connection(using)
    return client().notify(key=key, recipient=recipient, channels=channels,
                           template=template, data=data, due_at=due_at,
                           expires_at=expires_at, connection=connection)


def notify_many(requests: Iterable[NotifyRequest], *, using: str = "default"
                ) -> list[Notified]:
    """``Client.notify_many`` inside the current ``transaction.atomic()`` (as ``notify``)."""
    connection = joinable_connection(using)
    return client().notify_many(requests, connection=connection)


async def anotify(*, key: str, recipient: Recipient | Mapping[str, Any], channels: Sequence[str],
                  template: str, data: Mapping[str, Any] | None = None,
                  due_at: float | None = None, expires_at: float | None = None,
                  using: str = "default") -> Notified:
    """``notify`` from async code: run in Django's sync thread, inside the
    ``transaction.atomic(using)`` open there or, when none is, in a transaction of its
    own (the intents then commit when it returns)."""
    return await _in_sync_thread(using, lambda: notify(
        key=key, recipient=recipient, channels=channels, template=template, data=data,
        due_at=due_at, expires_at=expires_at, using=using))


async def anotify_many(requests: Iterable[NotifyRequest], *, using: str = "default"
                       ) -> list[Notified]:
    """``notify_many`` from async code (as ``anotify``)."""
    batch = list(requests)
    return await _in_sync_thread(using, lambda: notify_many(batch, using=using))


async def _in_sync_thread(using: str, call: Callable[[], T]) -> T:
    from asgiref.sync import sync_to_async
    from django.db import connections, transaction

    def run() -> T:
        if connections[using].in_atomic_block:
            return call()
        with transaction.atomic(using=using):
            return call()

    # thread_sensitive: the thread Django's sync code (and its connection) lives in.
    return await sync_to_async(run, thread_sensitive=True)()
