"""Retention on PostgreSQL (``RetentionQueries``) and the events table's day
partitions (``PartitionedEvents``, migration 0009): a day partition's events go with
it, dropped whole or swept, so a prune batch never probes every partition's index for
every key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import sql as pg_sql

from tidings.core import retention
from tidings.core.retention import PRUNABLE_STATES, Partition, PruneCounts, parse_partition
from tidings.stores.postgres_base import PostgresBase
from tidings.stores.postgres_db import Conn


class PostgresRetention(PostgresBase):
    """Pruning and counting what retention would prune; the day partitions."""

    # ---------------------------------------------------------------- retention

    async def retention_prune_batch(self, *, intent_cutoff: float, occurrence_cutoff: float,
                                    limit: int) -> PruneCounts:
        """``Store.retention_prune_batch``: the events of the default partition go by key;
        a day partition's go with it (dropped whole, or swept: ``retention.prune``), so
        a batch never probes every partition's index for every key."""
        sql = self._sql
        params = {"cutoff": intent_cutoff, "states": list(PRUNABLE_STATES), "limit": limit}

        async def fn(conn: Conn) -> PruneCounts:
            cur = await conn.execute(sql["retention_prune_intents"], params)
            keys = [key for (key,) in await cur.fetchall()]
            events = 0
            if keys:
                cur = await conn.execute(sql["retention_prune_events"], {"keys": keys})
                events = cur.rowcount
            cur = await conn.execute(sql["retention_prune_occurrences"], {
                "cutoff": occurrence_cutoff, "limit": limit,
                "pending": list(retention.PENDING_STATES)})
            return PruneCounts(intents=len(keys), events=events, occurrences=cur.rowcount)

        return await self.db.write(fn)

    async def retention_count(self, *, intent_cutoff: float, occurrence_cutoff: float
                              ) -> tuple[PruneCounts, float | None]:
        params = {"cutoff": intent_cutoff, "states": list(PRUNABLE_STATES)}
        sql = self._sql

        async def scalar(conn: Conn, query: str, values: Any) -> Any:
            cur = await conn.execute(sql[query], values)
            row = await cur.fetchone()
            if row is None:
                return None
            (value,) = row  # one column: the count or the time asked for
            return value

        async def fn(conn: Conn) -> tuple[PruneCounts, float | None]:
            counts = PruneCounts(
                intents=await scalar(conn, "retention_count_intents", params),
                events=await scalar(conn, "retention_count_events", params),
                occurrences=await scalar(conn, "retention_count_occurrences", {
                    "cutoff": occurrence_cutoff, "pending": list(retention.PENDING_STATES)}))
            return counts, await scalar(conn, "retention_oldest_kept", params)

        return await self.db.read(fn)

    async def intent_age_span(self) -> tuple[float, float] | None:
        ((oldest, newest),) = await self._read_tuples("intent_age_span")
        return None if oldest is None else (float(oldest), float(newest))

    # ---- the events table's day partitions (base.PartitionedEvents)

    def _ddl(self, query: str, name: str, **literals: float) -> pg_sql.Composed:
        return pg_sql.SQL(self._sql[query]).format(
            name=pg_sql.Identifier(name), **{k: pg_sql.Literal(v) for k, v in literals.items()})

    async def _locked(self, conn: Conn) -> bool:
        cur = await conn.execute(self._sql["event_partition_lock"])
        (locked,) = await cur.fetchone() or (False,)
        if locked:
            await conn.execute(self._sql["event_partition_lock_timeout"])
        return bool(locked)

    async def event_partitions(self) -> list[Partition]:
        found = [parse_partition(name) for (name,) in await self._read_tuples("event_partitions")]
        return sorted(p for p in found if p is not None)

    async def event_partition_create(self, name: str, lower: float, upper: float) -> bool:
        sql = self._sql

        async def fn(conn: Conn) -> bool:
            if not await self._locked(conn):
                return False
            if name in {n for (n,) in await (await conn.execute(
                    sql["event_partitions"])).fetchall()}:
                return False
            cur = await conn.execute(sql["event_default_has_range"],
                                     {"lower": lower, "upper": upper})
            (busy,) = await cur.fetchone() or (True,)
            if busy:  # creating it would fail: those rows stay in the default
                return False
            await conn.execute(self._ddl("event_partition_create", name, lower=lower,
                                         upper=upper))
            return True

        return await self.db.write(fn)

    async def event_partitions_detached(self) -> list[str]:
        return [name for (name,) in await self._read_tuples("event_partitions_detached")]

    async def event_partition_drop(self, name: str, *, intent_types: Sequence[str]
                                   ) -> int | None:
        """Two transactions, so the table's lock is held only for the detach itself: the
        detach, then (with no lock on the events table) the count, the copy of events
        of no intent and the drop. A prune that stops between them leaves a detached
        table that the next one finishes (``event_partitions_detached``)."""
        sql = self._sql
        types = list(intent_types)

        async def detach(conn: Conn) -> bool:
            if not await self._locked(conn):
                return False
            attached = {n for (n,) in await (await conn.execute(
                sql["event_partitions"])).fetchall()}
            if name in attached:
                await conn.execute(self._ddl("event_partition_detach", name))
            return True

        async def drop(conn: Conn) -> int | None:
            if not await self._locked(conn):
                return None
            detached = {n for (n,) in await (await conn.execute(
                sql["event_partitions_detached"])).fetchall()}
            if name not in detached:
                return None
            cur = await conn.execute(self._ddl("event_partition_count", name), {"types": types})
            total, kept = await cur.fetchone() or (0, 0)
            if kept:
                await conn.execute(self._ddl("event_partition_rescue", name), {"types": types})
            await conn.execute(self._ddl("event_partition_drop", name))
            return int(total) - int(kept)

        if not await self.db.write(detach):
            return None
        return await self.db.write(drop)

    async def event_orphans_delete(self, name: str, *, before: float,
                                   intent_types: Sequence[str], limit: int) -> int:
        statement = self._ddl("event_orphans_delete", name)
        params = {"before": before, "types": list(intent_types), "limit": limit}

        async def fn(conn: Conn) -> int:
            cur = await conn.execute(statement, params)
            return cur.rowcount

        return await self.db.write(fn)
