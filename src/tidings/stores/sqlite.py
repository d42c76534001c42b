"""The SQLite store: the embedded default, one file, any number of local processes.

Every batch method is one write transaction (``BEGIN IMMEDIATE``) on the
database thread, and set-based where it can be: admission is a multi-row insert,
enqueue marking is one event insert and one update over a JSON list of keys, claims
read all their rows at once, the core plans them (``claims.plan_claims``) and one
``executemany`` writes the leases. The reads are ``reads.StoreReads``'s, run in a
read transaction. The SQL lives in ``stores/sql/sqlite/*.sql``.

The store is one class made of a mixin per role group, each in its own module:
admission (``sqlite_admission``), the rest of the ledger (``sqlite_ledger``),
occurrences, switches, holds, preferences and pacer state (``sqlite_records``), the
suppression list (``sqlite_suppressions``), per-recipient throttles
(``sqlite_throttles``), the operator API and provider webhooks
(``sqlite_api``) and retention (``sqlite_retention``), all on ``sqlite_base.SqliteBase``.
"""

from __future__ import annotations

from tidings.stores.sqlite_admission import SqliteAdmission
from tidings.stores.sqlite_api import SqliteApi
from tidings.stores.sqlite_db import SqliteDatabase
from tidings.stores.sqlite_digests import SqliteDigests
from tidings.stores.sqlite_ledger import SqliteLedger
from tidings.stores.sqlite_records import SqliteRecords
from tidings.stores.sqlite_retention import SqliteRetention
from tidings.stores.sqlite_suppressions import SqliteSuppressions
from tidings.stores.sqlite_throttles import SqliteThrottles

__all__ = ["SqliteStore"]


class SqliteStore(SqliteApi, SqliteAdmission, SqliteLedger, SqliteRecords, SqliteSuppressions,
                  SqliteThrottles, SqliteDigests, SqliteRetention):
    """The ``Store`` port on one SQLite file (see ``SqliteDatabase`` for concurrency)."""

    concurrent_writers = False

    @classmethod
    async def open(cls, url: str) -> SqliteStore:
        """A store on its own database connection, from ``sqlite:///path.db``."""
        return cls(SqliteDatabase.from_url(url))
