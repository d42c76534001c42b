"""Store port and its adapters.

``base`` is the port; ``sqlite`` and ``postgres`` are the adapters, each beside its
database (``sqlite_db``, ``postgres_db``, shared with the transport of the same URL)
and its named SQL (``sql/<dialect>/*.sql``, loaded by ``queries``). Neither adapter
imports the other: what they share is in modules of its own, ``rows`` (rows to
records by column name, records to parameters), ``reads`` (the port's reads, written
once), ``lifecycle`` (holding, migrating and releasing the database) and
``provider_events`` (what a webhook batch means). Decisions stay in the core
(``tidings.core.claims``, ``tidings.core.states``).
"""

from tidings.stores.base import (
    Change,
    Claim,
    ClaimKind,
    Occurrence,
    OccurrenceProgress,
    PublishItem,
    Store,
    Switch,
)

__all__ = [
    "Change",
    "Claim",
    "ClaimKind",
    "Occurrence",
    "OccurrenceProgress",
    "PublishItem",
    "Store",
    "Switch",
]
