"""The small records of the SQLite store: occurrences and admission switches
(``Occurrences``), delivery holds (``Selections``), recipient preferences
(``PreferenceRecords``) and the pacer's state (``PacerBackend``, read, transformed and
written in one write transaction).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tidings.core.errors import StoreError
from tidings.core.preferences import Preference
from tidings.stores import base, rows
from tidings.stores.sqlite_base import SqliteBase, fetch_one

T = TypeVar("T")


class SqliteRecords(SqliteBase):
    """Occurrences, switches, holds, preferences and pacer state."""

    # ---------------------------------------------------------------- occurrences

    async def occurrence_open(
        self, *, id: str, campaign: str, logical_at: float, logical_date: str, kind: str,
        now: float,
    ) -> base.Occurrence:
        """Return the occurrence, creating it if new; a replay re-opens one not done.

        ``passes`` counts the openings that leave it admitting.
        """
        sql = self._sql
        params = {"id": id, "campaign": campaign, "logical_at": logical_at,
                  "logical_date": logical_date, "kind": kind, "now": now}

        def fn(conn: sqlite3.Connection) -> base.Occurrence:
            if conn.execute(sql["occurrence_insert"], params).rowcount == 0:
                conn.execute(sql["occurrence_reopen"], {"id": id, "kind": kind})
            # Inserted or present in this transaction: it cannot be absent.
            return rows.present(fetch_one(conn, rows.OCCURRENCE, sql["occurrence_get"], (id,)),
                                f"occurrence {id!r}")

        return await self.db.write(fn)

    async def occurrence_finish(self, id: str, *, now: float, status: str = "done",
                                reason: str | None = None) -> None:
        """Close an occurrence with ``status`` (done or skipped); unknown ids raise."""
        params = {"id": id, "now": now, "status": status, "reason": reason}

        def fn(conn: sqlite3.Connection) -> None:
            if conn.execute(self._sql["occurrence_finish"], params).rowcount != 1:
                raise StoreError(f"occurrence {id!r} does not exist")

        await self.db.write(fn)

    async def occurrence_restart(self, id: str, *, reason: str) -> None:
        """Admit an occurrence again from its first member (unknown ids raise)."""
        params = {"id": id, "reason": reason}

        def fn(conn: sqlite3.Connection) -> None:
            if conn.execute(self._sql["occurrence_restart"], params).rowcount != 1:
                raise StoreError(f"occurrence {id!r} does not exist")

        await self.db.write(fn)

    # ---------------------------------------------------------------- admission switches

    async def switch_set(
        self, *, scope: str, name: str, paused: bool, now: float, reason: str | None = None
    ) -> base.Switch:
        params = {"scope": scope, "name": name, "paused": int(paused), "now": now,
                  "reason": reason}

        def fn(conn: sqlite3.Connection) -> base.Switch:
            # An upsert with RETURNING returns its row.
            return rows.present(fetch_one(conn, rows.SWITCH, self._sql["switch_upsert"], params),
                                f"switch {scope}:{name}")

        return await self.db.write(fn)

    async def switch_trip(self, *, scope: str, name: str, now: float, reason: str
                          ) -> base.Switch | None:
        """Pause unless already paused; the switch if this call paused it, else None."""
        params = {"scope": scope, "name": name, "now": now, "reason": reason}

        def fn(conn: sqlite3.Connection) -> base.Switch | None:
            return fetch_one(conn, rows.SWITCH, self._sql["switch_trip"], params)

        return await self.db.write(fn)

    async def switch_declare(self, *, scope: str, name: str, paused: bool, now: float,
                             reason: str | None = None) -> base.Switch | None:
        """Create a switch in this state unless it exists; the switch if created now."""
        params = {"scope": scope, "name": name, "paused": int(paused), "now": now,
                  "reason": reason}

        def fn(conn: sqlite3.Connection) -> base.Switch | None:
            return fetch_one(conn, rows.SWITCH, self._sql["switch_declare"], params)

        return await self.db.write(fn)

    # ---------------------------------------------------------------- delivery holds

    async def hold_insert(self, *, scope: str, name: str, now: float, by: str,
                          reason: str | None = None) -> base.Hold | None:
        """Hold unless already held; the hold if this call made it, else None."""
        params = {"scope": scope, "name": name, "now": now, "by": by, "reason": reason}

        def fn(conn: sqlite3.Connection) -> base.Hold | None:
            return fetch_one(conn, rows.HOLD, self._sql["hold_insert"], params)

        return await self.db.write(fn)

    async def hold_delete(self, *, scope: str, name: str) -> base.Hold | None:
        """Remove a hold; the hold removed, or None if there was none."""
        params = {"scope": scope, "name": name}

        def fn(conn: sqlite3.Connection) -> base.Hold | None:
            return fetch_one(conn, rows.HOLD, self._sql["hold_delete"], params)

        return await self.db.write(fn)

    # ---------------------------------------------------------------- recipient preferences

    async def preference_set(self, preference: Preference, *, now: float) -> None:
        """Insert or replace the preference of (recipient_id, channel), stamped ``now``."""
        params = rows.preference_params(preference, now=now)
        await self.db.write(lambda conn: conn.execute(self._sql["preference_upsert"], params))

    async def preference_delete(self, recipient_id: str, channel: str) -> bool:
        """Forget a preference; False if there was none."""
        params = {"recipient_id": recipient_id, "channel": channel}

        def fn(conn: sqlite3.Connection) -> bool:
            return conn.execute(self._sql["preference_delete"], params).rowcount > 0

        return await self.db.write(fn)

    async def preferences_for(
        self, pairs: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], Preference]:
        """The preferences of many (recipient_id, channel) pairs in one read."""
        if not pairs:
            return {}
        params = {"pairs": json.dumps([[r, c] for r, c in dict.fromkeys(pairs)])}

        found = await self._read_all(rows.PREFERENCE, "preferences_for", params)
        return {(p.recipient_id, p.channel): p for p in found}

    # ---------------------------------------------------------------- pacer state

    async def pacer_transact(
        self, channel: str, fn: Callable[[dict[str, Any] | None], tuple[dict[str, Any], T]]
    ) -> T:
        """Read, transform with ``fn`` and write the channel's pacer state atomically.

        ``fn`` runs on the database thread inside the write transaction, and again if
        the transaction is retried, which is why it must be pure.
        """
        sql = self._sql

        def transact(conn: sqlite3.Connection) -> T:
            (stored,) = conn.execute(sql["pacer_read"], (channel,)).fetchone() or (None,)
            new_state, result = fn(rows.pacer_state(stored))
            conn.execute(sql["pacer_write"], (channel, json.dumps(new_state)))
            return result

        return await self.db.write(transact)

    async def pacer_pause(self, channel: str, until: float) -> None:
        await self.db.write(lambda conn: conn.execute(self._sql["pacer_pause"], (channel, until)))
