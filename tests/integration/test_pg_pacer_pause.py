"""A 429 pause on PostgreSQL does not wait for the pacer state's row lock (needs a
server: see tests/conftest.py; skips without one, fails under CI).

Another process's reservation transaction holds ``pacer_state``'s row while it runs;
the pause must reach the others anyway, at once. A raw connection holds the lock here
for as long as the test wants.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from tidings.stores.postgres import PostgresStore

GUARD_S = 10.0  # only against a hang
MIGRATED_AT = 1_000_000.0
HELD_S = 0.5  # long enough to tell "waited for the lock" from "did not"


def _bump(state: dict[str, object] | None) -> tuple[dict[str, object], None]:
    return {"count": 1}, None


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PostgresStore]:
    s = await PostgresStore.open(pg_url)
    await s.migrate(now=MIGRATED_AT)
    await s.pacer_transact("sms", _bump)  # the row exists, so it can be locked
    yield s
    await s.close()


@pytest.fixture
async def locked(pg_url: str) -> AsyncIterator[None]:
    """The channel's pacer_state row locked by another session until the test ends."""
    conn = await psycopg.AsyncConnection.connect(pg_url)
    await conn.execute("SELECT state FROM pacer_state WHERE channel = 'sms' FOR UPDATE")
    yield
    await conn.rollback()
    await conn.close()


async def test_a_pause_is_written_while_another_session_holds_the_pacer_state(
        store: PostgresStore, locked: None) -> None:
    await asyncio.wait_for(store.pacer_pause("sms", 150.0), GUARD_S)
    assert await store.pacer_paused_until("sms") == 150.0


async def test_the_pacer_state_itself_does_wait_for_that_session(
        store: PostgresStore, locked: None) -> None:
    """The control: what the pause avoids is real."""
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(store.pacer_transact("sms", _bump), HELD_S)

