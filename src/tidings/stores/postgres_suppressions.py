"""The suppression list on PostgreSQL (``Suppressions``): its writes, and those a webhook
batch makes in its own transaction (``suppress_in``, ``count_strikes``), each one
statement per batch over arrays. The reads are ``reads.StoreReads``'s; what a batch
means, ``suppression_batches``'.

Two webhooks suppressing one address at once: the second insert waits for the first
(``ON CONFLICT DO NOTHING``), then adds nothing, so one suppression and one timeline
event result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tidings.core.suppression import Suppression, SuppressionRules
from tidings.stores import rows
from tidings.stores import suppression_batches as sb
from tidings.stores.postgres_base import PostgresBase, fetch_one
from tidings.stores.postgres_db import Conn


def _columns(names: Sequence[str], table: Sequence[Sequence[Any]]) -> dict[str, list[Any]]:
    """Rows as one list per column, under the plural of its name (``addresses``)."""
    plural = {"address": "addresses"}
    return {plural.get(name, f"{name}s"): [row[i] for row in table]
            for i, name in enumerate(names)}


async def suppress_in(conn: Conn, sql: Mapping[str, str], entries: Sequence[Suppression],
                      now: float) -> list[Suppression]:
    """Insert ``entries`` in the caller's transaction (the first per address and kind
    standing), with the timeline events of those added; return those added."""
    unique = sb.first_per_pair(entries)
    if not unique:
        return []
    cur = await conn.execute(sql["suppression_insert_many"],
                             _columns(sb.COLUMNS, sb.entry_rows(unique)))
    new = sb.added(unique, await cur.fetchall())
    events = sb.timeline_entries(new)
    if events:
        await conn.execute(sql["suppression_events"], {
            "keys": [key for key, _ in events], "details": [d for _, d in events],
            "now": now})
    return new


async def count_strikes(conn: Conn, sql: Mapping[str, str], strikes: Sequence[sb.Strike],
                        rules: SuppressionRules, now: float) -> list[Suppression]:
    """Write soft bounces in the caller's transaction, prune their addresses' strikes
    past the window, and return the suppressions the counts now make."""
    if not strikes:
        return []
    addresses, kinds = sb.strike_pairs(strikes)
    window = {"addresses": addresses, "kinds": kinds,
              "since": now - rules.soft_bounce_window_s}
    await conn.execute(sql["suppression_strike_insert_many"], _columns(
        ("address", "kind", "source", "at"),
        [(s.address, s.kind, s.source, s.at) for s in strikes]))
    await conn.execute(sql["suppression_strike_prune"], window)
    cur = await conn.execute(sql["suppression_strike_counts"], window)
    return sb.from_strikes(strikes, await cur.fetchall(), rules, now)


class PostgresSuppressions(PostgresBase):
    """Adding to and removing from the suppression list."""

    async def suppression_add_many(self, entries: Sequence[Suppression], *, now: float
                                   ) -> list[Suppression]:
        """Suppress each (address, kind) not suppressed yet, in one transaction."""
        if not entries:
            return []

        async def fn(conn: Conn) -> list[Suppression]:
            return await suppress_in(conn, self._sql, entries, now)

        return await self.db.write(fn)

    async def suppression_remove(self, address: str, kind: str) -> Suppression | None:
        """Take (address, kind) off the list; the suppression removed, None if none."""
        statement = self._sql["suppression_delete"]

        async def fn(conn: Conn) -> Suppression | None:
            return await fetch_one(conn, rows.SUPPRESSION, statement,
                                   {"address": address, "kind": kind})

        return await self.db.write(fn)
