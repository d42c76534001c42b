"""Retention on SQLite (``RetentionQueries``): a pruned intent's events go row-wise,
by key, with it (no partitions).
"""

from __future__ import annotations

import json
import sqlite3

from tidings.core.retention import PENDING_STATES, PRUNABLE_STATES, PruneCounts
from tidings.stores.sqlite_base import SqliteBase


class SqliteRetention(SqliteBase):
    """Pruning, and counting what retention would prune."""

    # ---------------------------------------------------------------- retention

    async def retention_prune_batch(self, *, intent_cutoff: float, occurrence_cutoff: float,
                                    limit: int) -> PruneCounts:
        """``Store.retention_prune_batch``: events go row-wise, by key (no partitions)."""
        sql = self._sql
        states = json.dumps(PRUNABLE_STATES)

        def fn(conn: sqlite3.Connection) -> PruneCounts:
            keys = [key for (key,) in conn.execute(sql["retention_prune_intents"], {
                "cutoff": intent_cutoff, "states": states, "limit": limit}).fetchall()]
            events = 0
            if keys:
                events = conn.execute(sql["retention_prune_events"],
                                      {"keys": json.dumps(keys)}).rowcount
            occurrences = conn.execute(sql["retention_prune_occurrences"], {
                "cutoff": occurrence_cutoff, "limit": limit,
                "pending": json.dumps(PENDING_STATES)}).rowcount
            return PruneCounts(intents=len(keys), events=events, occurrences=occurrences)

        return await self.db.write(fn)

    async def retention_count(self, *, intent_cutoff: float, occurrence_cutoff: float
                              ) -> tuple[PruneCounts, float | None]:
        params = {"cutoff": intent_cutoff, "states": json.dumps(PRUNABLE_STATES)}
        sql = self._sql

        def fn(conn: sqlite3.Connection) -> tuple[PruneCounts, float | None]:
            (intents,) = conn.execute(sql["retention_count_intents"], params).fetchone()
            (events,) = conn.execute(sql["retention_count_events"], params).fetchone()
            (occurrences,) = conn.execute(sql["retention_count_occurrences"], {
                "cutoff": occurrence_cutoff, "pending": json.dumps(PENDING_STATES)}).fetchone()
            (oldest,) = conn.execute(sql["retention_oldest_kept"], params).fetchone()
            return (PruneCounts(intents=intents, events=events, occurrences=occurrences),
                    oldest)

        return await self.db.read(fn)

    async def intent_age_span(self) -> tuple[float, float] | None:
        ((oldest, newest),) = await self._read_tuples("intent_age_span")
        return None if oldest is None else (float(oldest), float(newest))
