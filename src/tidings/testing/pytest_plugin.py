"""pytest fixtures for an application's tests: enable with ``-p tidings.testing.pytest_plugin``
or ``pytest_plugins = ["tidings.testing.pytest_plugin"]`` in a ``conftest.py``.

- ``tidings_client``: the ``Client`` the test notifies through. By default a new one per
  test, with the channels of ``./tidings.toml`` (or ``$TIDINGS_CONFIG``) on a SQLite
  store in the test's own folder and an ``Outbox`` in front of every channel. An
  application whose code holds its own client overrides this fixture to return it
  (``tidings.contrib.django.client()``, ``app.state.tidings``).
- ``tidings_outbox``: an ``Outbox`` in front of every channel of ``tidings_client``;
  nothing is sent until ``deliver(tidings_client)``.
- ``tidings_eager``: the same, and every notify delivers before it returns (``eager``).

Assertions need no fixture: ``assert_notified(tidings_client, key=..., ...)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tidings.client import Client
from tidings.config.settings import Settings, find_settings_file
from tidings.testing.outbox import Outbox, eager, outbox


@pytest.fixture
def tidings_client(tmp_path: Path) -> Iterator[Client]:
    """A Client of the application's channels on a store of the test's own."""
    settings = Settings.load(find_settings_file(None))
    store = f"sqlite:///{tmp_path / 'tidings-test.db'}"
    client = Client(Settings.parse({**settings.model_dump(), "store": store,
                                    "transport": "sql"}),
                    providers={name: Outbox() for name in settings.channels})
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def tidings_outbox(tidings_client: Client) -> Outbox:
    """An Outbox in front of every channel of ``tidings_client``."""
    return outbox(tidings_client)


@pytest.fixture
def tidings_eager(tidings_client: Client) -> Iterator[Outbox]:
    """``eager(tidings_client)`` for the test: every notify is delivered to the outbox."""
    with eager(tidings_client) as box:
        yield box
