"""The small records of the PostgreSQL store: occurrences and admission switches
(``Occurrences``), delivery holds (``Selections``), recipient preferences
(``PreferenceRecords``) and the pacer's state (``PacerBackend``).

``pacer_transact`` locks the channel's pacer row (``SELECT … FOR UPDATE``), so one
pacing budget per channel holds across machines.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tidings.core.errors import StoreError
from tidings.core.preferences import Preference
from tidings.stores import base, rows
from tidings.stores.postgres_base import PostgresBase, fetch_one
from tidings.stores.postgres_db import Conn

T = TypeVar("T")

#: Seconds a pacer transaction may sit idle holding the channel's pacer row before the
#: server ends its session (see ``pacer_lock``): far above the few milliseconds a live
#: client takes between its statements, far below the seconds in which a cut-off
#: client would otherwise be found gone and its session ended.
PACER_IDLE_S = 1.0


class PostgresRecords(PostgresBase):
    """Pacer state, occurrences, switches, holds and preferences."""

    # ---------------------------------------------------------------- pacer state

    async def pacer_transact(
        self, channel: str, fn: Callable[[dict[str, Any] | None], tuple[dict[str, Any], T]]
    ) -> T:
        """Read, transform with ``fn`` and write the channel's pacer state atomically.

        The row is locked (``SELECT … FOR UPDATE``) from the read to the commit, so
        every process on every machine sees one sequence of states. ``fn`` runs again
        if the transaction is retried, which is why it must be pure.
        """
        sql = self._sql

        lock = {"channel": channel, "idle_ms": str(round(PACER_IDLE_S * 1000))}

        async def transact(conn: Conn) -> T:
            cur = await conn.execute(sql["pacer_lock"], lock)
            row = await cur.fetchone()
            if row is None:  # a new channel: create the row, then lock it
                await conn.execute(sql["pacer_ensure"], (channel,))
                cur = await conn.execute(sql["pacer_lock"], lock)
                row = await cur.fetchone()
            stored = row[0] if row is not None else None
            new_state, result = fn(rows.pacer_state(stored))
            await conn.execute(sql["pacer_write"], (json.dumps(new_state), channel))
            return result

        return await self.db.write(transact)

    async def pacer_pause(self, channel: str, until: float) -> None:
        async def fn(conn: Conn) -> None:
            await conn.execute(self._sql["pacer_pause"], (channel, until))

        await self.db.transaction(fn, block=False)  # one statement: no BEGIN/COMMIT

    # ---------------------------------------------------------------- occurrences

    async def occurrence_open(
        self, *, id: str, campaign: str, logical_at: float, logical_date: str, kind: str,
        now: float,
    ) -> base.Occurrence:
        """Return the occurrence, creating it if new; a replay re-opens one not done."""
        sql = self._sql
        params = {"id": id, "campaign": campaign, "logical_at": logical_at,
                  "logical_date": logical_date, "kind": kind, "now": now}

        async def fn(conn: Conn) -> base.Occurrence:
            cur = await conn.execute(sql["occurrence_insert"], params)
            if cur.rowcount == 0:
                await conn.execute(sql["occurrence_reopen"], {"id": id, "kind": kind})
            found = await fetch_one(conn, rows.OCCURRENCE, sql["occurrence_get"], (id,))
            # Inserted or present in this transaction: it cannot be absent.
            return rows.present(found, f"occurrence {id!r}")

        return await self.db.write(fn)

    async def occurrence_finish(self, id: str, *, now: float, status: str = "done",
                                reason: str | None = None) -> None:
        """Close an occurrence with ``status`` (done or skipped); unknown ids raise."""
        params = {"id": id, "now": now, "status": status, "reason": reason}

        async def fn(conn: Conn) -> None:
            cur = await conn.execute(self._sql["occurrence_finish"], params)
            if cur.rowcount != 1:
                raise StoreError(f"occurrence {id!r} does not exist")

        await self.db.write(fn)

    async def occurrence_restart(self, id: str, *, reason: str) -> None:
        """Admit an occurrence again from its first member (unknown ids raise)."""
        params = {"id": id, "reason": reason}

        async def fn(conn: Conn) -> None:
            cur = await conn.execute(self._sql["occurrence_restart"], params)
            if cur.rowcount != 1:
                raise StoreError(f"occurrence {id!r} does not exist")

        await self.db.write(fn)

    # ---------------------------------------------------------------- admission switches

    async def switch_set(
        self, *, scope: str, name: str, paused: bool, now: float, reason: str | None = None
    ) -> base.Switch:
        params = {"scope": scope, "name": name, "paused": paused, "now": now,
                  "reason": reason}

        async def fn(conn: Conn) -> base.Switch:
            found = await fetch_one(conn, rows.SWITCH, self._sql["switch_upsert"], params)
            # An upsert with RETURNING returns its row.
            return rows.present(found, f"switch {scope}:{name}")

        return await self.db.write(fn)

    async def switch_trip(self, *, scope: str, name: str, now: float, reason: str
                          ) -> base.Switch | None:
        """Pause unless already paused; the switch if this call paused it, else None."""
        params = {"scope": scope, "name": name, "now": now, "reason": reason}

        async def fn(conn: Conn) -> base.Switch | None:
            return await fetch_one(conn, rows.SWITCH, self._sql["switch_trip"], params)

        return await self.db.write(fn)

    async def switch_declare(self, *, scope: str, name: str, paused: bool, now: float,
                             reason: str | None = None) -> base.Switch | None:
        """Create a switch in this state unless it exists; the switch if created now."""
        params = {"scope": scope, "name": name, "paused": paused, "now": now,
                  "reason": reason}

        async def fn(conn: Conn) -> base.Switch | None:
            return await fetch_one(conn, rows.SWITCH, self._sql["switch_declare"], params)

        return await self.db.write(fn)

    # ---------------------------------------------------------------- delivery holds

    async def hold_insert(self, *, scope: str, name: str, now: float, by: str,
                          reason: str | None = None) -> base.Hold | None:
        """Hold unless already held; the hold if this call made it, else None."""
        params = {"scope": scope, "name": name, "now": now, "by": by, "reason": reason}

        async def fn(conn: Conn) -> base.Hold | None:
            return await fetch_one(conn, rows.HOLD, self._sql["hold_insert"], params)

        return await self.db.write(fn)

    async def hold_delete(self, *, scope: str, name: str) -> base.Hold | None:
        """Remove a hold; the hold removed, or None if there was none."""
        params = {"scope": scope, "name": name}

        async def fn(conn: Conn) -> base.Hold | None:
            return await fetch_one(conn, rows.HOLD, self._sql["hold_delete"], params)

        return await self.db.write(fn)

    # ---------------------------------------------------------------- recipient preferences

    async def preference_set(self, preference: Preference, *, now: float) -> None:
        """Insert or replace the preference of (recipient_id, channel), stamped ``now``."""
        params = rows.preference_params(preference, now=now)

        async def fn(conn: Conn) -> None:
            await conn.execute(self._sql["preference_upsert"], params)

        await self.db.write(fn)

    async def preference_delete(self, recipient_id: str, channel: str) -> bool:
        """Forget a preference; False if there was none."""
        params = {"recipient_id": recipient_id, "channel": channel}

        async def fn(conn: Conn) -> bool:
            cur = await conn.execute(self._sql["preference_delete"], params)
            return cur.rowcount > 0

        return await self.db.write(fn)

    async def preferences_for(
        self, pairs: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], Preference]:
        """The preferences of many (recipient_id, channel) pairs in one read."""
        if not pairs:
            return {}
        found = await self._read_all(rows.PREFERENCE, "preferences_for", {
            "recipients": [r for r, _ in pairs], "channels": [c for _, c in pairs]})
        return {(p.recipient_id, p.channel): p for p in found}
