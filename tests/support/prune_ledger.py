"""A ledger of several days for the prune's fault tests, and the witness of a prune:
the database itself, read on a connection of the test's own
(``tests/integration/test_pg_prune_interrupted.py``, ``test_pg_restart.py``)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from types import TracebackType

import psycopg

from tidings.core.model import Event, IntentDraft
from tidings.core.states import State
from tidings.recovery.retention import DAY_S, RetentionConfig, prune
from tidings.stores.base import Change
from tidings.stores.postgres import PostgresStore

#: A UTC midnight (2027-01-15), so a day of the ledger is one day partition.
D0 = 1_799_971_200.0


def draft(key: str, due_at: float) -> IntentDraft:
    return IntentDraft(key=key, channel="email", recipient_id=f"r-{key}",
                       address=f"{key}@example.com", template="digest@v1", data="{}",
                       due_at=due_at)


async def seed(store: PostgresStore, config: RetentionConfig, *, days: int,
               finished_a_day: int, prefix: str = "") -> tuple[list[str], list[str], list[str]]:
    """Given ``days`` days of ledger, each with finished intents and an audit event, and
    on day 1 two intents never sent (which keep that day's partition); returns the keys
    of the finished intents, the kept ones and the audit events (each key starting with
    ``prefix``)."""
    await prune(store, config, now=D0)  # the day partitions, from day 0 on
    finished: list[str] = []
    audit: list[str] = []
    for day in range(days):
        at = D0 + day * DAY_S + 3600
        keys = [f"{prefix}d{day}-{n}" for n in range(finished_a_day)]
        await store.intent_admit([draft(k, at) for k in keys], now=at)
        await store.intent_mark_enqueued(keys, now=at + 1)
        claims = await store.intent_claim_many(keys, owner="w", lease_s=30, now=at + 2)
        assert len(claims) == len(keys)
        done = await store.intent_apply_many([Change(
            key=c.key, from_state=State.CLAIMED, to_state=State.ACCEPTED, event="accepted",
            lease_token=c.token, receipt="r") for c in claims], now=at + 60)
        assert sorted(done) == sorted(keys)
        finished += keys
        audit.append(f"{prefix}admission/day-{day}")
        await store.event_append_many([Event(key=audit[-1], channel="email",
                                             type="guardrail_tripped", at=at + 120)])
    kept = [f"{prefix}kept-1", f"{prefix}kept-2"]
    at = D0 + DAY_S + 7200
    await store.intent_admit([draft(k, at) for k in kept], now=at)
    await store.intent_mark_enqueued(kept, now=at + 1)
    return finished, kept, audit


async def assert_pruned_exactly(url: str, finished: list[str], kept: list[str],
                                audit: list[str]) -> None:
    """Every finished intent and its events gone, the kept ones whole, each audit event
    once, no partition left detached or twice, and no index left half-built."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        async def rows(query: str, *args: object) -> list[tuple[object, ...]]:
            return list(await (await conn.execute(query, args)).fetchall())

        assert await rows("SELECT key FROM intents ORDER BY key") == [(k,) for k in kept]
        assert await rows("SELECT count(*) FROM events WHERE key = ANY(%s)", finished) == [(0,)]
        assert sorted(await rows("SELECT key, type FROM events WHERE key = ANY(%s)", kept)) == [
            (k, t) for k in kept for t in ("enqueued", "selected")]
        # each audit event exactly once (copied out of the partitions dropped)
        assert sorted(await rows("SELECT key, count(*) FROM events WHERE key = ANY(%s) "
                                 "GROUP BY key", audit)) == [(a, 1) for a in sorted(audit)]
        parts = [name for (name,) in await rows(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'events'::regclass")]
        assert len(parts) == len(set(parts))
        detached = await rows(
            "SELECT relname FROM pg_class WHERE relname LIKE 'events_p%%' AND relkind = 'r' "
            "AND relnamespace = current_schema()::regnamespace AND NOT relispartition")
        assert detached == []
        invalid = await rows(
            "SELECT i.indexrelid::regclass::text FROM pg_index i JOIN pg_class c "
            "ON c.oid = i.indexrelid WHERE c.relnamespace = current_schema()::regnamespace "
            "AND NOT (i.indisvalid AND i.indisready)")
        assert invalid == []


class Faults:
    """``fault`` run again and again, at random intervals within ``every_s``, for as long
    as the ``async with`` block runs; ``count`` adds up what each run answers (the
    sessions it cut, the restarts it made)."""

    def __init__(self, fault: Callable[[], Awaitable[int]], *, every_s: tuple[float, float],
                 seed: int) -> None:
        self.count = 0
        self._fault, self._every_s, self._seed = fault, every_s, seed
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Faults:
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        self._stop.set()
        assert self._task is not None
        await self._task

    async def _loop(self) -> None:
        rng = random.Random(self._seed)
        while not self._stop.is_set():
            await asyncio.sleep(rng.uniform(*self._every_s))
            if not self._stop.is_set():
                self.count += await self._fault()
