"""Opening a PostgreSQL store by URL, and what a bad URL or an absent server says (needs
a server: see tests/conftest.py; skips without one, fails under CI). Migrating is one
suite for both databases: tests/conformance/test_store_migrations.py."""

from __future__ import annotations

import pytest

from tidings.core.errors import ConfigurationError, StoreError
from tidings.runtime import open_store
from tidings.stores import queries
from tidings.stores.postgres_db import redact

NOW = 1_000_000.0
KNOWN = [m.version for m in queries.migrations("postgresql")]


async def test_open_store_by_url_gives_a_store_and_its_queue(pg_url: str) -> None:
    store, transport = await open_store(pg_url)
    try:
        assert await store.migrate(now=NOW) == KNOWN
        assert transport.name == "pg"
        assert (await transport.depth("email", now=NOW)).ready == 0
    finally:
        await transport.close()
        await store.close()


@pytest.mark.parametrize("url", ["postgresql://u:pw@localhost:notaport/db",
                                 "postgresql://u:pw@localhost/db?nosuchoption=1"])
async def test_a_malformed_url_is_a_configuration_error_without_the_password(url: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        await open_store(url)

    assert "pw" not in str(raised.value)
    assert "localhost" in str(raised.value)


async def test_an_unreachable_server_is_a_store_error_naming_the_url_without_password() -> None:
    # Port 1 on loopback: refused at once, no server needed for this test.
    with pytest.raises(StoreError) as raised:
        await open_store("postgres://tidings:s3cret@127.0.0.1:1/tidings")

    message = str(raised.value)
    assert "s3cret" not in message
    assert "postgres://tidings:***@127.0.0.1:1/tidings" in message


def test_redact_hides_only_the_password() -> None:
    assert redact("postgresql://a:b@h:5/d?x=1") == "postgresql://a:***@h:5/d?x=1"
    assert redact("postgresql://a@h/d") == "postgresql://a@h/d"
    assert redact("postgresql://a:b@h:x/d") == "postgresql://a:***@h:x/d"
