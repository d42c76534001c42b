"""Adapter factories for the conformance suites.

Each port has one suite that runs unchanged against every adapter listed here. An
adapter joins by adding a backend: a URL for a fresh, empty database of one test and
an ``open`` coroutine function. ``open`` must be picklable (a module-level function
or a classmethod) because the multi-process test calls it in child processes.
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
from tidings.transports.sql import SqlTransport


@dataclass(frozen=True)
class StoreBackend:
    name: str
    url: Callable[[Path], str]
    open: Callable[[str], Awaitable[Store]]


@dataclass(frozen=True)
class TransportBackend:
    name: str
    open: Callable[[Path], Awaitable[Transport]]


async def _sqlite_transport(tmp_path: Path) -> Transport:
    db = SqliteDatabase.from_url(f"sqlite:///{tmp_path / 'transport.db'}")
    await db.migrate()
    return SqlTransport(db)


STORE_BACKENDS = {
    "sqlite": StoreBackend(
        name="sqlite", url=lambda tmp: f"sqlite:///{tmp / 'store.db'}", open=SqliteStore.open
    ),
}
TRANSPORT_BACKENDS = {
    "sqlite": TransportBackend(name="sqlite", open=_sqlite_transport),
}


@pytest.fixture(params=sorted(STORE_BACKENDS))
def store_backend(request: pytest.FixtureRequest) -> StoreBackend:
    backend: StoreBackend = STORE_BACKENDS[request.param]
    return backend


@pytest.fixture
def store_url(store_backend: StoreBackend, tmp_path: Path) -> str:
    return store_backend.url(tmp_path)


@pytest.fixture
async def store(store_backend: StoreBackend, store_url: str) -> AsyncIterator[Store]:
    """A migrated, empty store."""
    opened = await store_backend.open(store_url)
    await opened.migrate()
    yield opened
    await opened.close()


@pytest.fixture(params=sorted(TRANSPORT_BACKENDS))
async def transport(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Transport]:
    """An empty transport."""
    opened = await TRANSPORT_BACKENDS[request.param].open(tmp_path)
    yield opened
    await opened.close()
