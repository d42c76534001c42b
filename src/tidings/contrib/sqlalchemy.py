"""``notify`` in the same transaction as a SQLAlchemy session (PostgreSQL, psycopg 3): an
``AsyncSession`` with the async ``Runtime``, or a sync ``Session`` with a ``tidings.Client``.

An order and its notification commit together or not at all: the intents are written
on the session's own connection, inside its transaction (in a savepoint, so a refusal
leaves the transaction usable), and a worker sees them the moment the session commits;
a rollback leaves no intent::

    async with sessionmaker() as session, session.begin():
        session.add(Order(id=4821, customer_id=73))
        await tidings.contrib.sqlalchemy.notify(
            session, runtime, key="order-4821", recipient={"id": "73", "email": ...},
            channels=["email"], template="order-confirmed/v1")

    with Session(engine) as session, session.begin():      # sync code: a Client
        session.add(Order(id=4821, customer_id=73))
        tidings.contrib.sqlalchemy.notify(session, client, key="order-4821", ...)

With an async session ``notify`` is awaited; with a sync one it returns the keys, the
SQL run in the calling thread on the session's connection (``Client.notify``'s join).
The engine must use the psycopg 3 driver (``postgresql+psycopg://…``) on the store's
own database; its search_path need not reach the store's schema (the join sets the
store's for its writes). Anything else is refused naming ``session`` (or the runtime
or client given for the wrong kind of session).
"""

from __future__ import annotations

from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

from tidings.core.errors import InvalidInput

if TYPE_CHECKING:
    import psycopg
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session
    from typing_extensions import TypeIs

    from tidings.admission.intake import NotifyRequest
    from tidings.client import Client
    from tidings.core.model import Recipient
    from tidings.core.repeats import Notified
    from tidings.runtime import Runtime

__all__ = ["driver_connection", "notify", "notify_many", "sync_driver_connection"]


async def driver_connection(session: AsyncSession | AsyncConnection
                            ) -> psycopg.AsyncConnection[Any]:
    """The ``psycopg.AsyncConnection`` under ``session`` (its transaction begun)."""
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    if isinstance(session, AsyncSession):
        connection = await session.connection()
    elif isinstance(session, AsyncConnection):
        connection = session
    else:
        raise InvalidInput("session", f"must be a SQLAlchemy AsyncSession or AsyncConnection, "
                           f"not {type(session).__name__}")
    raw = await connection.get_raw_connection()
    driver = raw.driver_connection
    import psycopg

    if not isinstance(driver, psycopg.AsyncConnection):
        raise InvalidInput("session", "its engine must use the psycopg 3 async driver "
                           f"(postgresql+psycopg://), not {type(driver).__name__}")
    return driver


def sync_driver_connection(session: Session | Connection) -> psycopg.Connection[Any]:
    """The ``psycopg.Connection`` under a sync ``session`` (its transaction begun)."""
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session

    if isinstance(session, Session):
        connection = session.connection()
    elif isinstance(session, Connection):
        connection = session
    else:
        raise InvalidInput("session", "must be a SQLAlchemy Session, Connection, AsyncSession "
                           f"or AsyncConnection, not {type(session).__name__}")
    driver = connection.connection.driver_connection
    import psycopg

    if not isinstance(driver, psycopg.Connection):
        raise InvalidInput("session", "its engine must use the psycopg 3 driver "
                           f"(postgresql+psycopg://), not {type(driver).__name__}")
    return driver


def _is_async(session: object) -> TypeIs[AsyncSession | AsyncConnection]:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    return isinstance(session, AsyncSession | AsyncConnection)


def _runtime(door: Runtime | Client) -> Runtime:
    from tidings.runtime import Runtime

    if not isinstance(door, Runtime):
        raise InvalidInput("runtime", "an AsyncSession joins through the async Runtime "
                           f"(awaited), not {type(door).__name__}")
    return door


def _client(door: Runtime | Client) -> Client:
    from tidings.client import Client

    if not isinstance(door, Client):
        raise InvalidInput("client", "a sync Session joins through a tidings.Client (its "
                           f"notify runs in this thread), not {type(door).__name__}; an "
                           "AsyncSession takes the Runtime")
    return door


@overload
def notify(session: AsyncSession | AsyncConnection, runtime: Runtime, *, key: str,
           recipient: Recipient | Mapping[str, Any], channels: Sequence[str], template: str,
           data: Mapping[str, Any] | None = None, due_at: float | None = None,
           expires_at: float | None = None) -> Coroutine[Any, Any, Notified]: ...


@overload
def notify(session: Session | Connection, runtime: Client, *, key: str,
           recipient: Recipient | Mapping[str, Any], channels: Sequence[str], template: str,
           data: Mapping[str, Any] | None = None, due_at: float | None = None,
           expires_at: float | None = None) -> Notified: ...


def notify(session: AsyncSession | AsyncConnection | Session | Connection,
           runtime: Runtime | Client, *, key: str, recipient: Recipient | Mapping[str, Any],
           channels: Sequence[str], template: str, data: Mapping[str, Any] | None = None,
           due_at: float | None = None, expires_at: float | None = None
           ) -> Coroutine[Any, Any, Notified] | Notified:
    """``notify`` inside ``session``'s transaction; its keys (awaited for an async
    session, with the ``Runtime``; at once for a sync one, with a ``Client``)."""
    fields: dict[str, Any] = {"key": key, "recipient": recipient, "channels": channels,
                              "template": template, "data": data, "due_at": due_at,
                              "expires_at": expires_at}
    if _is_async(session):
        return _notify_async(session, _runtime(runtime), fields)
    connection = sync_driver_connection(session)  # what is no session is refused first
    return _client(runtime).notify(**fields, connection=connection)


async def _notify_async(session: AsyncSession | AsyncConnection, runtime: Runtime,
                        fields: dict[str, Any]) -> Notified:
    return await runtime.notify(**fields, connection=await driver_connection(session))


@overload
def notify_many(session: AsyncSession | AsyncConnection, runtime: Runtime,
                requests: Iterable[NotifyRequest]) -> Coroutine[Any, Any, list[Notified]]: ...


@overload
def notify_many(session: Session | Connection, runtime: Client,
                requests: Iterable[NotifyRequest]) -> list[Notified]: ...


def notify_many(session: AsyncSession | AsyncConnection | Session | Connection,
                runtime: Runtime | Client, requests: Iterable[NotifyRequest]
                ) -> Coroutine[Any, Any, list[Notified]] | list[Notified]:
    """``notify_many`` inside ``session``'s transaction (as ``notify``)."""
    if _is_async(session):
        return _notify_many_async(session, _runtime(runtime), requests)
    connection = sync_driver_connection(session)
    return _client(runtime).notify_many(requests, connection=connection)


async def _notify_many_async(session: AsyncSession | AsyncConnection, runtime: Runtime,
                             requests: Iterable[NotifyRequest]) -> list[Notified]:
    return await runtime.notify_many(requests, connection=await driver_connection(session))
