"""Adapter factories for the conformance suites.

Each port has one suite that runs unchanged against every adapter listed here. An
adapter joins by adding a backend: a URL for a fresh, empty database of one test and
an ``open`` coroutine function. ``open`` must be picklable (a module-level function
or a classmethod) because the multi-process test calls it in child processes.

A backend's ``url`` gets the test's ``tmp_path`` and its ``FixtureRequest``, so a
server backend can ask for a throw-away database fixture (see ``tests/conftest.py``):
the PostgreSQL backend gets an empty schema of its own per test, and skips (or fails
under ``CI``) when no server answers. A broker transport is one entry: its URL from a
fixture that gives each test keys or queues of its own (``_fixture_url("redis_url")``)
and ``open_broker``, which opens whatever ``transport = "<url>"`` names, as the runtime
does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tidings.stores.base import Store
from tidings.stores.sqlite import SqliteStore
from tidings.stores.sqlite_db import SqliteDatabase
from tidings.transports.base import Transport
from tidings.transports.sqlite import SqliteTransport

#: When the conformance databases say their migrations were applied.
MIGRATED_AT = 1_000_000.0

try:  # psycopg is the optional extra "postgres" (in "dev" too)
    from tidings.stores.postgres import PostgresStore
except ImportError:  # the backend then skips: tests/conftest.py::pg_admin_url says why
    PostgresStore = None  # type: ignore[assignment,misc]


@dataclass(frozen=True)
class StoreBackend:
    name: str
    url: Callable[[Path, pytest.FixtureRequest], str]
    open: Callable[[str], Awaitable[Store]]


@dataclass(frozen=True)
class TransportBackend:
    name: str
    url: Callable[[Path, pytest.FixtureRequest], str]
    open: Callable[[str], Awaitable[Transport]]


def _sqlite_url(file: str) -> Callable[[Path, pytest.FixtureRequest], str]:
    return lambda tmp, request: f"sqlite:///{tmp / file}"


def _fixture_url(fixture: str) -> Callable[[Path, pytest.FixtureRequest], str]:
    """The URL a fixture of ``tests/conftest.py`` gives this test (it skips, or fails
    under ``CI``, when its server does not answer)."""
    def url(tmp: Path, request: pytest.FixtureRequest) -> str:
        value: str = request.getfixturevalue(fixture)
        return value

    return url


_postgres_url = _fixture_url("pg_url")


async def open_broker(url: str) -> Transport:
    """A broker transport as the runtime opens it from ``transport = "<url>"``."""
    from tidings.transports.open import open_transport

    return await open_transport(url)


async def _sqlite_transport(url: str) -> Transport:
    db = SqliteDatabase.from_url(url)
    await db.migrate(now=MIGRATED_AT)
    return SqliteTransport(db)


async def _postgres_store(url: str) -> Store:
    from tidings.stores.postgres import PostgresStore

    return await PostgresStore.open(url)


async def _postgres_transport(url: str) -> Transport:
    from tidings.transports.postgres import PostgresTransport

    transport = await PostgresTransport.open(url)
    await transport.db.migrate(now=MIGRATED_AT)
    return transport


STORE_BACKENDS = {
    "sqlite": StoreBackend(name="sqlite", url=_sqlite_url("store.db"), open=SqliteStore.open),
    "postgres": StoreBackend(
        name="postgres", url=_postgres_url,
        # A classmethod pickles by its qualified name for the multi-process test.
        open=PostgresStore.open if PostgresStore is not None else _postgres_store),
}
TRANSPORT_BACKENDS = {
    "sqlite": TransportBackend(name="sqlite", url=_sqlite_url("transport.db"),
                               open=_sqlite_transport),
    "postgres": TransportBackend(name="postgres", url=_postgres_url, open=_postgres_transport),
    "redis": TransportBackend(name="redis", url=_fixture_url("redis_url"), open=open_broker),
    "rabbitmq": TransportBackend(name="rabbitmq", url=_fixture_url("amqp_url"),
                                 open=open_broker),
}


@pytest.fixture(params=sorted(STORE_BACKENDS))
def store_backend(request: pytest.FixtureRequest) -> StoreBackend:
    backend: StoreBackend = STORE_BACKENDS[request.param]
    return backend


@pytest.fixture
def store_url(store_backend: StoreBackend, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return store_backend.url(tmp_path, request)


@pytest.fixture
async def store(store_backend: StoreBackend, store_url: str) -> AsyncIterator[Store]:
    """A migrated, empty store."""
    opened = await store_backend.open(store_url)
    await opened.migrate(now=MIGRATED_AT)
    yield opened
    await opened.close()


@pytest.fixture(params=sorted(TRANSPORT_BACKENDS))
def transport_backend(request: pytest.FixtureRequest) -> TransportBackend:
    backend: TransportBackend = TRANSPORT_BACKENDS[request.param]
    return backend


@pytest.fixture
def transport_url(transport_backend: TransportBackend, tmp_path: Path,
                  request: pytest.FixtureRequest) -> str:
    return transport_backend.url(tmp_path, request)


@pytest.fixture
async def transport(transport_backend: TransportBackend,
                    transport_url: str) -> AsyncIterator[Transport]:
    """An empty transport."""
    opened = await transport_backend.open(transport_url)
    yield opened
    await opened.close()


@pytest.fixture
async def another_transport(transport: Transport, transport_backend: TransportBackend,
                            transport_url: str) -> AsyncIterator[Transport]:
    """A second instance on the same database: another process, as far as it can tell."""
    opened = await transport_backend.open(transport_url)
    yield opened
    await opened.close()
