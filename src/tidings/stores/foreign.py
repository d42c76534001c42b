"""A database that is not tidings' to migrate: tables of another application under the
names tidings' migrations create.

``tidings db migrate`` pointed at an application's own database would otherwise create
its tables beside the application's, stop half-way at the first name they share
(``events``, ``messages``), or adopt one that a migration creates only if it does not
exist (``workers``), and read another tool's ``schema_migrations`` (Rails, golang-migrate)
as its own. Before the first migration of a database with none of tidings' recorded,
the stores ask ``foreign_tables`` and refuse with ``refusal``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from tidings.core.errors import StoreError
from tidings.stores import queries

MIGRATIONS_TABLE = "schema_migrations"
#: The columns of tidings' own migrations table.
MIGRATIONS_COLUMNS = frozenset({"version", "applied_at"})

_CREATED = re.compile(r"\bCREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?\"?(\w+)",
                      re.IGNORECASE)


@functools.cache
def table_names(dialect: str) -> tuple[str, ...]:
    """Every table name the dialect's migrations create, and the migrations table."""
    names = {MIGRATIONS_TABLE}
    for migration in queries.migrations(dialect):
        names.update(match.lower() for match in _CREATED.findall(migration.sql))
    return tuple(sorted(names))


def foreign_tables(present: Iterable[str], migration_columns: Iterable[str], *,
                   recorded: bool) -> list[str]:
    """The tables among ``present`` (tidings' names that exist) that are not tidings'.

    ``migration_columns``: the columns of the ``schema_migrations`` table present (none
    when absent); ``recorded``: whether it holds a row. A tidings migrations table with
    a row makes every name tidings'; one of another shape is another tool's."""
    found = {name.lower() for name in present}
    ours = {c.lower() for c in migration_columns} == MIGRATIONS_COLUMNS
    if MIGRATIONS_TABLE in found and not ours:
        return sorted(found)
    if ours and recorded:
        return []
    return sorted(found - {MIGRATIONS_TABLE})


def refusal(where: str, tables: list[str]) -> StoreError:
    """The error for a database holding another application's tables."""
    shown = ", ".join(tables[:8]) + (f" and {len(tables) - 8} more" if len(tables) > 8 else "")
    return StoreError(
        f"{where}: holds tables that are not tidings' ({shown}) and no tidings migration; "
        "migrating would mix tidings' tables with them. Give tidings a database of its "
        "own (or, on PostgreSQL, a schema of its own: CREATE SCHEMA tidings, then "
        "?options=-csearch_path%3Dtidings in the store URL)")
