"""Named SQL blocks loaded from ``.sql`` files, one dictionary per dialect.

Every query of a SQL adapter lives in ``stores/sql/<dialect>/*.sql``. A line
``-- name: intent_claim_many`` starts a block that runs to the next such line, so
the SQL reads as SQL, sits beside its comments, and the same names can carry
different SQL per dialect. Migrations live one level deeper, in
``stores/sql/<dialect>/migrations/NNNN_title.sql``, and are applied whole.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from types import MappingProxyType

_NAME_LINE = re.compile(r"^--\s*name:\s*(?P<name>\w+)\s*$")
_MIGRATION_FILE = re.compile(r"^(?P<version>\d{4})_(?P<title>\w+)\.sql$")


def _dialect_dir(dialect: str) -> Traversable:
    root = resources.files("tidings.stores").joinpath("sql", dialect)
    if not root.is_dir():
        raise LookupError(f"no SQL for dialect {dialect!r}")
    return root


def parse(text: str, source: str = "<string>") -> dict[str, str]:
    """Split ``text`` into its named blocks; text before the first name is a header."""
    blocks: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []

    def flush() -> None:
        if name is None:
            return
        body = "\n".join(lines).strip()
        if not body:
            raise ValueError(f"{source}: query {name!r} is empty")
        blocks[name] = body

    for line in text.splitlines():
        match = _NAME_LINE.match(line)
        if match is None:
            lines.append(line)
            continue
        flush()
        name = match["name"]
        if name in blocks:
            raise ValueError(f"{source}: query {name!r} is defined twice")
        lines = []
    flush()
    return blocks


@functools.cache
def load(dialect: str) -> Mapping[str, str]:
    """Every named query of ``dialect`` (read once, then cached), across its files."""
    queries: dict[str, str] = {}
    for entry in sorted(_dialect_dir(dialect).iterdir(), key=lambda e: e.name):
        if not (entry.is_file() and entry.name.endswith(".sql")):
            continue
        for name, sql in parse(entry.read_text("utf-8"), entry.name).items():
            if name in queries:
                raise ValueError(f"{dialect}/{entry.name}: query {name!r} is defined twice")
            queries[name] = sql
    return MappingProxyType(queries)


@dataclass(frozen=True, kw_only=True)
class Migration:
    """One schema migration file: ``0001_init.sql`` is version 1, title ``init``."""

    version: int
    title: str
    sql: str


@functools.cache
def migrations(dialect: str) -> tuple[Migration, ...]:
    """The migrations of ``dialect`` in version order."""
    folder = _dialect_dir(dialect).joinpath("migrations")
    found: dict[int, Migration] = {}
    for entry in folder.iterdir() if folder.is_dir() else ():
        match = _MIGRATION_FILE.match(entry.name)
        if match is None:
            continue
        version = int(match["version"])
        if version in found:
            raise ValueError(f"{dialect}: migration {version:04d} exists twice")
        found[version] = Migration(
            version=version, title=match["title"], sql=entry.read_text("utf-8")
        )
    return tuple(found[v] for v in sorted(found))


def split_statements(script: str) -> list[str]:
    """Split a SQL script into statements, leaving out comment-only remainders.

    Uses SQLite's own tokenizer (``complete_statement``), so semicolons inside
    strings or trigger bodies do not split. Lets a migration run statement by
    statement inside a transaction the caller controls (``executescript`` would
    commit it).
    """
    statements: list[str] = []
    pending: list[str] = []
    for line in script.splitlines(keepends=True):
        pending.append(line)
        candidate = "".join(pending)
        if sqlite3.complete_statement(candidate):
            statements.append(candidate.strip())
            pending = []
    rest = [line for line in pending if line.strip() and not line.lstrip().startswith("--")]
    if rest:
        raise ValueError(f"incomplete SQL statement at the end: {''.join(rest)[:80]!r}")
    return statements
