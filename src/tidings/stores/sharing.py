"""One database shared by the adapters of one store URL (the store and its transport)."""

from __future__ import annotations


class SharedDatabase:
    """Counts the adapters using a database; the last one to release it closes it."""

    _users = 0

    def retain(self) -> None:
        """Count one more adapter using this database (see ``release``)."""
        self._users += 1

    async def release(self) -> None:
        """One adapter is done with the database; the last one closes it."""
        self._users -= 1
        if self._users <= 0:
            await self.close()

    async def close(self) -> None:
        raise NotImplementedError
