"""What every SQL store does with its database alone: hold it, migrate it, release it.

A store shares its database with the transport of the same URL (``SharedDatabase``
counts the users); closing the store releases its hold, and the last user closes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, Protocol, TypeVar


class StoreDatabase(Protocol):
    """The database side a SQL store needs: its named queries and its schema."""

    url: str
    sql: Mapping[str, str]

    def retain(self) -> None: ...

    async def release(self) -> None: ...

    async def migrate(self, *, now: float, new_only: bool = False) -> list[int]: ...

    async def schema_version(self) -> int: ...

    async def check_schema(self) -> None: ...

    async def reference_time(self) -> float: ...


DB = TypeVar("DB", bound=StoreDatabase)


class DatabaseStore(Generic[DB]):
    """The lifecycle part of the ``Store`` port, on one database."""

    def __init__(self, db: DB) -> None:
        self.db = db
        self.url = db.url
        self._sql: Mapping[str, str] = db.sql
        db.retain()

    async def migrate(self, *, now: float, new_only: bool = False) -> list[int]:
        """Apply pending migrations, recorded as applied at ``now``; return the versions
        applied by this call. ``new_only``: the whole schema in one transaction, and
        only into a database that has none."""
        return await self.db.migrate(now=now, new_only=new_only)

    async def schema_version(self) -> int:
        return await self.db.schema_version()

    async def check_schema(self) -> None:
        """Raise SchemaOutOfDate when migrations are pending."""
        await self.db.check_schema()

    async def reference_time(self) -> float:
        """The store's clock, in epoch seconds (see ``Lifecycle.reference_time``)."""
        return await self.db.reference_time()

    def acks_commit_with(self, transport: object) -> bool:
        """True for this store's own queue (``transport = "sql"``), which holds this very
        database object: another pool on the same URL cannot share its transactions."""
        return getattr(transport, "db", None) is self.db

    async def close(self) -> None:
        """Release the database; it closes when no other adapter still uses it."""
        await self.db.release()
