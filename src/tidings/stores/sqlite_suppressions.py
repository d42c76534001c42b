"""The suppression list on SQLite (``Suppressions``): its writes, and the writes a
webhook batch makes in its own transaction (``suppress``, ``strike``). The reads are
``reads.StoreReads``'s; what a batch means, ``suppression_batches``'.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence

from tidings.core.suppression import Suppression, SuppressionRules
from tidings.stores import rows
from tidings.stores import suppression_batches as sb
from tidings.stores.sqlite_base import SqliteBase, fetch_one, pair_params


def suppress(conn: sqlite3.Connection, sql: Mapping[str, str],
             entries: Sequence[Suppression], now: float) -> list[Suppression]:
    """Insert ``entries`` in the caller's transaction (the first per address and kind
    standing), with the timeline events of those added; return those added."""
    unique = sb.first_per_pair(entries)
    if not unique:
        return []
    returned = conn.execute(sql["suppression_insert_many"],
                            {"entries": json.dumps(sb.entry_rows(unique))}).fetchall()
    new = sb.added(unique, returned)
    events = sb.timeline_entries(new)
    if events:
        conn.execute(sql["suppression_events"], {"entries": json.dumps(events), "now": now})
    return new


def strike(conn: sqlite3.Connection, sql: Mapping[str, str], strikes: Sequence[sb.Strike],
           rules: SuppressionRules, now: float) -> list[Suppression]:
    """Count soft bounces in the caller's transaction: write them, prune the strikes of
    their addresses past the window, and return what the counts now suppress."""
    if not strikes:
        return []
    addresses, kinds = sb.strike_pairs(strikes)
    pairs = {**pair_params(list(zip(addresses, kinds, strict=True))),
             "since": now - rules.soft_bounce_window_s}
    conn.execute(sql["suppression_strike_insert_many"], {"strikes": json.dumps(
        [[s.address, s.kind, s.source, s.at] for s in strikes])})
    conn.execute(sql["suppression_strike_prune"], pairs)
    counts = conn.execute(sql["suppression_strike_counts"], pairs).fetchall()
    return sb.from_strikes(strikes, counts, rules, now)


class SqliteSuppressions(SqliteBase):
    """Adding to and removing from the suppression list."""

    async def suppression_add_many(self, entries: Sequence[Suppression], *, now: float
                                   ) -> list[Suppression]:
        """Suppress each (address, kind) not suppressed yet, in one write transaction."""
        if not entries:
            return []
        return await self.db.write(lambda conn: suppress(conn, self._sql, entries, now))

    async def suppression_remove(self, address: str, kind: str) -> Suppression | None:
        """Take (address, kind) off the list; the suppression removed, None if none."""
        params = {"address": address, "kind": kind}
        statement = self._sql["suppression_delete"]
        return await self.db.write(
            lambda conn: fetch_one(conn, rows.SUPPRESSION, statement, params))
