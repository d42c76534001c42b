"""The PostgreSQL store: many processes on many machines share one database.

Same semantics as the SQLite store, method for method (the Store conformance suite
runs unchanged on both); what differs is how concurrency is made safe. SQLite
serializes every writer; here each transaction locks only the rows it decides about:

- admission ``COPY``s a page into a temporary stage, then one statement inserts the
  intents (``ON CONFLICT DO NOTHING RETURNING key``, so the keys returned are exactly
  those this transaction inserted, even when two schedulers admit the same page at
  once) and, for just those, their events and queue messages;
- claims read their rows ``FOR UPDATE SKIP LOCKED`` in key order (no deadlock between
  claimers of overlapping pages), the core plans them (``claims.plan_claims``), and one
  guarded ``UPDATE`` writes the leases;
- the outbox relay takes due intents ``FOR UPDATE SKIP LOCKED``;
- ``pacer_transact`` locks the channel's pacer row (``SELECT … FOR UPDATE``), so one
  pacing budget per channel holds across machines.

The SQL lives in ``stores/sql/postgresql/*.sql``.

The store is one class made of a mixin per role group, each in its own module:
admission (``postgres_admission``), admission inside a caller's own transaction
(``postgres_join``), the rest of the ledger (``postgres_ledger``),
occurrences, switches, holds, preferences and pacer state (``postgres_records``), the
suppression list (``postgres_suppressions``), per-recipient throttles
(``postgres_throttles``), the operator API and provider webhooks
(``postgres_api``), retention and partitions
(``postgres_retention``), all on ``postgres_base.PostgresBase``.
"""

from __future__ import annotations

from tidings.stores.postgres_admission import PAGE_ORDER_WAIT_S, PostgresAdmission
from tidings.stores.postgres_api import PostgresApi
from tidings.stores.postgres_db import PostgresDatabase
from tidings.stores.postgres_digests import PostgresDigests
from tidings.stores.postgres_join import PostgresJoin
from tidings.stores.postgres_ledger import PostgresLedger
from tidings.stores.postgres_records import PACER_IDLE_S, PostgresRecords
from tidings.stores.postgres_retention import PostgresRetention
from tidings.stores.postgres_suppressions import PostgresSuppressions
from tidings.stores.postgres_throttles import PostgresThrottles

__all__ = ["PACER_IDLE_S", "PAGE_ORDER_WAIT_S", "PostgresStore"]


class PostgresStore(PostgresApi, PostgresAdmission, PostgresJoin, PostgresLedger,
                    PostgresRecords, PostgresSuppressions, PostgresThrottles, PostgresDigests,
                    PostgresRetention):
    """The ``Store`` port on one PostgreSQL database (see ``PostgresDatabase``)."""

    concurrent_writers = True

    @classmethod
    async def open(cls, url: str) -> PostgresStore:
        """A store on its own connection pool, from ``postgresql://…``."""
        db = PostgresDatabase.from_url(url)
        await db.open()
        return cls(db)
