"""Where a campaign's recipients come from, read in pages ordered by recipient id.

The scheduler keeps a high-water mark (the last id it admitted) and asks for the next
page after it, so memory is bounded by a page and a restarted pass resumes where the
last one stopped. Every audience therefore hands out recipients in ascending ``id``
order, compared as strings, with each id at most once.

Sources:

- ``GeneratorAudience``: a user's generator function, e.g. ``def customers(): yield ...``.
- ``KeysetAudience``: a user's function that already paginates: ``fn(after, limit)``.
- ``SqlAudience``: a user's SQL query against a database URL (SQLite for now).

``audience_from_spec`` builds one from settings.
"""

from __future__ import annotations

import asyncio
import bisect
import importlib
import itertools
import operator
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn, Protocol, runtime_checkable

from tidings.core.errors import ConfigurationError, InvalidInput
from tidings.core.model import Recipient

__all__ = [
    "Audience",
    "GeneratorAudience",
    "KeysetAudience",
    "SqlAudience",
    "audience_from_spec",
    "check_audiences",
    "count_recipients",
]

_RECIPIENT_FIELDS = ("id", "email", "phone", "active")
_FALSE_WORDS = frozenset({"", "0", "false", "f", "no", "n", "off"})
# SQLite primary result codes (sqlite3.h); the exception class alone does not say
# whether the query or the database file is at fault.
_SQLITE_ERROR = 1
_SQLITE_FILE_ERRORS = frozenset({3, 14, 23, 26})  # PERM, CANTOPEN, AUTH, NOTADB
_SQLITE_READONLY = 8


@runtime_checkable
class Audience(Protocol):
    """A source of recipients, read in pages by ascending id."""

    async def page(self, after: str | None, limit: int) -> list[Recipient]:
        """Up to ``limit`` recipients with ``id > after`` (all when None), ascending by id."""
        ...

    def describe(self) -> str:
        """A short human description for logs and the CLI, with no secrets."""
        ...


# ---------------------------------------------------------------- generator


class GeneratorAudience:
    """Recipients from a user's generator function, which must yield ascending ids.

    Consecutive pages continue the live iterator, so reading the whole audience calls
    ``source`` once and costs O(n). A page after any other id (a resumed pass, a
    replay) restarts ``source`` and skips ids up to ``after``.

    The generator runs on the event loop's thread between awaits: keep it to cheap
    work, and use ``KeysetAudience`` or ``SqlAudience`` for a source that does I/O.
    """

    def __init__(self, source: Callable[[], Iterable[Recipient]]) -> None:
        self._source = source
        self._iterator: Iterator[Recipient] | None = None
        # Every recipient still in the iterator has an id greater than this one.
        self._position: str | None = None
        self._previous: str | None = None
        self._exhausted = False

    async def page(self, after: str | None, limit: int) -> list[Recipient]:
        _check_limit(limit)
        if self._iterator is None or after != self._position:
            self._restart()
        recipients: list[Recipient] = []
        while len(recipients) < limit and not self._exhausted:
            batch = self._take(limit - len(recipients))
            if after is not None and batch and batch[0].id <= after:
                # A restarted source: skip what the mark has passed (ids ascend).
                batch = batch[bisect.bisect_right(batch, after, key=_id):]
            recipients.extend(batch)
        if recipients:
            self._position = recipients[-1].id
        elif after is not None and (self._position is None or after > self._position):
            self._position = after
        return recipients

    def describe(self) -> str:
        return f"python generator {_callable_name(self._source)}"

    def _restart(self) -> None:
        self._iterator = iter(self._source())
        self._position = None
        self._previous = None
        self._exhausted = False

    def _take(self, n: int) -> list[Recipient]:
        """Up to ``n`` more recipients from the source, checked as a batch (this runs
        for every member, so the checks run in C: ``map``, not a Python loop)."""
        assert self._iterator is not None
        try:
            batch = list(itertools.islice(self._iterator, n))
        except BaseException:
            # A generator that raised is closed; resuming it would look like the end.
            self._iterator = None
            raise
        if len(batch) < n:
            self._exhausted = True
        if not batch:
            return batch
        if not all(map(isinstance, batch, itertools.repeat(Recipient))):
            self._refuse(batch)
        ids = [r.id for r in batch]
        if not (all(map(isinstance, ids, itertools.repeat(str))) and all(ids)
                and all(map(operator.lt, ids, itertools.islice(ids, 1, None)))
                and (self._previous is None or self._previous < ids[0])):
            self._refuse(batch)
        self._previous = ids[-1]
        return batch

    def _refuse(self, batch: list[Any]) -> NoReturn:
        """Raise the error for the first bad member of ``batch`` (one that is known)."""
        self._iterator = None
        previous = self._previous
        for recipient in batch:
            _check_recipient(recipient, self.describe)
            if previous is not None and recipient.id <= previous:
                raise ConfigurationError(
                    "audience",
                    f"{self.describe()} yielded id {recipient.id!r} after {previous!r}; "
                    "ids must be unique and ascending as strings (zero-pad numeric ids)")
            previous = recipient.id
        raise AssertionError("_refuse called on a good batch")


def _id(recipient: Recipient) -> str:
    return recipient.id


# ---------------------------------------------------------------- keyset


class KeysetAudience:
    """Recipients from a user's function ``fn(after, limit)`` that paginates by id itself.

    ``fn`` runs in a worker thread (it usually queries a database), so it must not rely
    on thread-bound resources created elsewhere. Only the first ``limit`` items it
    returns are read.
    """

    def __init__(self, fn: Callable[[str | None, int], Iterable[Recipient]]) -> None:
        self._fn = fn

    async def page(self, after: str | None, limit: int) -> list[Recipient]:
        _check_limit(limit)
        return await asyncio.to_thread(self._fetch, after, limit)

    def describe(self) -> str:
        return f"python keyset function {_callable_name(self._fn)}"

    def _fetch(self, after: str | None, limit: int) -> list[Recipient]:
        recipients = list(itertools.islice(self._fn(after, limit), limit))
        previous = after
        for recipient in recipients:
            _check_recipient(recipient, self.describe)
            if previous is not None and recipient.id <= previous:
                raise ConfigurationError(
                    "audience",
                    f"{self.describe()} returned id {recipient.id!r} after "
                    f"{previous!r} for after={after!r}; it must return ids greater than "
                    "after, unique and ascending as strings")
            previous = recipient.id
        return recipients


# ---------------------------------------------------------------- SQL


class SqlAudience:
    """Recipients from a user's SQL query, with named parameters ``:after`` and ``:limit``.

    The query must return the next page itself, for example::

        SELECT customer_id AS id, email, phone, opted_in AS active, first_name
        FROM customers
        WHERE (:after IS NULL OR customer_id > :after)
        ORDER BY customer_id
        LIMIT :limit

    ``:after`` is NULL for the first page, then the last id of the previous page as a
    string (SQLite compares it numerically against an INTEGER column). Result columns:
    ``id`` (required, handed out as ``str``), ``email``, ``phone`` and ``active``
    (truthy; True when the column is absent) fill the ``Recipient``; every other column
    goes into ``Recipient.data``.

    Only ``sqlite:///relative/path.db`` and ``sqlite:////absolute/path.db`` are
    supported now. The database is opened read-only, per page, in a worker thread.
    """

    def __init__(self, url: str, query: str, *, field: str = "audience") -> None:
        self.url = url
        self.query = query
        self.field = field
        """Where the settings declare it (``campaigns.<name>.audience.sql``): the prefix of
        every error's field, as the run finds them too."""
        self._uri = _sqlite_uri(url, field)
        self._path = Path(url.partition("://")[2][1:]).absolute()
        if not isinstance(query, str) or not query.strip():
            raise ConfigurationError(f"{field}.query", "must be a non-empty SQL query")
        missing = [name for name in ("after", "limit")
                   if not re.search(rf":{name}\b", query)]
        if missing:
            # Without them every page is the whole table: unbounded memory, no progress.
            raise ConfigurationError(
                f"{field}.query",
                f"must use {' and '.join(':' + m for m in missing)}: filter "
                "(:after IS NULL OR id > :after), ORDER BY id and LIMIT :limit")

    async def page(self, after: str | None, limit: int) -> list[Recipient]:
        _check_limit(limit)
        return await asyncio.to_thread(self._fetch, after, limit)

    def describe(self) -> str:
        return f"sql query on {self.url}"

    async def check(self) -> None:
        """Open the database and read the first page of one: a missing file, a query the
        database refuses or a result without ``id`` is a settings error before the
        scheduler admits anything, not at the first occurrence."""
        await self.page(None, 1)

    async def count(self) -> int:
        """The recipients of the whole audience: the page query from the start with no
        limit (``:after`` NULL, ``:limit`` -1), counted by the database."""
        return await asyncio.to_thread(self._count)

    async def data_columns(self) -> list[str]:
        """The columns every recipient hands its templates as data (all but ``id``,
        ``email``, ``phone`` and ``active``), from the query's result shape (``:limit``
        0: no row is read)."""
        return await asyncio.to_thread(self._data_columns)

    def _data_columns(self) -> list[str]:
        connection = self._connect()
        try:
            cursor = connection.execute(self.query, {"after": None, "limit": 0})
            if cursor.description is None:
                raise ConfigurationError(f"{self.field}.query", "the query returns no rows")
            columns = [str(column[0]) for column in cursor.description]
        except sqlite3.ProgrammingError as exc:
            raise ConfigurationError(f"{self.field}.query", str(exc)) from exc
        except sqlite3.Error as exc:
            error = _classify(exc, self.url, self.field)
            if error is None:
                raise
            raise error from exc
        finally:
            connection.close()
        return [column for column in columns if column.lower() not in _RECIPIENT_FIELDS]

    def _count(self) -> int:
        connection = self._connect()
        try:
            query = self.query.strip().rstrip(";")
            (count,) = connection.execute(f"SELECT count(*) FROM ({query})",
                                          {"after": None, "limit": -1}).fetchone()
        except sqlite3.Error as exc:
            error = _classify(exc, self.url, self.field)
            if error is None:
                raise
            raise error from exc
        finally:
            connection.close()
        return int(count)

    def _connect(self) -> sqlite3.Connection:
        try:
            return sqlite3.connect(self._uri, uri=True)
        except sqlite3.Error as exc:
            why = "no such file" if not self._path.exists() else str(exc)
            raise ConfigurationError(f"{self.field}.url",
                                     f"cannot open {self.url}: {why}") from exc

    def _fetch(self, after: str | None, limit: int) -> list[Recipient]:
        connection = self._connect()
        try:
            cursor = connection.execute(self.query, {"after": after, "limit": limit})
            if cursor.description is None:
                raise ConfigurationError(f"{self.field}.query", "the query returns no rows")
            columns = [str(column[0]) for column in cursor.description]
            rows = cursor.fetchmany(limit)
        except sqlite3.ProgrammingError as exc:
            raise ConfigurationError(f"{self.field}.query", str(exc)) from exc
        except sqlite3.Error as exc:
            error = _classify(exc, self.url, self.field)
            if error is None:
                raise
            raise error from exc
        finally:
            connection.close()
        return _recipients(columns, rows, after, self.field)


def _classify(exc: sqlite3.Error, url: str, field: str) -> ConfigurationError | None:
    """The setting at fault for a failed query, or None when the failure is transient."""
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    if code in _SQLITE_FILE_ERRORS:
        return ConfigurationError(f"{field}.url", f"cannot read {url}: {exc}")
    if code == _SQLITE_ERROR:
        return ConfigurationError(f"{field}.query", str(exc))
    if code == _SQLITE_READONLY:
        return ConfigurationError(f"{field}.query", f"must only read: {exc}")
    # Busy, locked, I/O: the settings are fine and the pass can be retried.
    return None


def _recipients(columns: list[str], rows: list[Any], after: str | None,
                field: str) -> list[Recipient]:
    lowered = [column.lower() for column in columns]
    if "id" not in lowered:
        raise ConfigurationError(f"{field}.query", "result has no 'id' column")
    index = {name: lowered.index(name) for name in _RECIPIENT_FIELDS if name in lowered}
    extra = [(i, column) for i, column in enumerate(columns)
             if lowered[i] not in _RECIPIENT_FIELDS]
    recipients: list[Recipient] = []
    previous_raw: Any = None
    for row in rows:
        raw_id = row[index["id"]]
        if raw_id is None:
            raise ConfigurationError(f"{field}.query", "result has a NULL id")
        if recipients and _out_of_order(previous_raw, raw_id):
            raise ConfigurationError(
                f"{field}.query",
                f"returned id {raw_id!r} after {previous_raw!r}; it must ORDER BY id")
        if not recipients and after is not None and str(raw_id) == after:
            raise ConfigurationError(
                f"{field}.query", f"returned id {after!r} again; filter id > :after, not >=")
        previous_raw = raw_id
        recipients.append(Recipient(
            id=str(raw_id),
            email=_optional_str(row, index.get("email")),
            phone=_optional_str(row, index.get("phone")),
            active=True if "active" not in index else _truthy(row[index["active"]]),
            data={column: row[i] for i, column in extra},
        ))
    return recipients


def _out_of_order(previous: Any, current: Any) -> bool:
    # Compare in the database's own terms (integers numerically); values of different
    # types are left to the database's collation.
    if isinstance(previous, (int, float)) and isinstance(current, (int, float)):
        return bool(current <= previous)
    if type(previous) is type(current) and isinstance(current, (str, bytes)):
        return bool(current <= previous)
    return False


def _optional_str(row: Any, i: int | None) -> str | None:
    if i is None or row[i] is None:
        return None
    return str(row[i])


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in _FALSE_WORDS
    return bool(value)


def _sqlite_uri(url: str, field: str) -> str:
    """``sqlite:///rel.db`` or ``sqlite:////abs.db`` -> a read-only ``file:`` URI."""
    if not isinstance(url, str):
        raise ConfigurationError(f"{field}.url", f"{url!r} is not a database URL")
    scheme, separator, rest = url.partition("://")
    if not separator:
        raise ConfigurationError(
            f"{field}.url", f"{url!r} is not a database URL such as sqlite:///audience.db")
    if scheme.lower() != "sqlite":
        raise ConfigurationError(
            f"{field}.url", f"{scheme!r} databases are not supported yet for audiences; "
                            "use sqlite:///path/to/file.db")
    if not rest.startswith("/") or rest in ("/", "/:memory:"):
        raise ConfigurationError(
            f"{field}.url", f"{url!r} needs a file path: sqlite:///relative.db or "
                            "sqlite:////absolute.db")
    # as_uri percent-encodes, so a path with '?', '#' or spaces stays a path.
    return Path(rest[1:]).absolute().as_uri() + "?mode=ro"


async def check_audiences(audiences: Iterable[Audience]) -> None:
    """``SqlAudience.check`` each SQL audience (a user's generator is not called before
    its occurrence: calling it may have effects of its own)."""
    for audience in audiences:
        if isinstance(audience, SqlAudience):
            await audience.check()


# ---------------------------------------------------------------- size


async def count_recipients(audience: Audience, *, page_size: int = 5000) -> int:
    """How many recipients ``audience`` hands out: its own count query where it has one
    (``SqlAudience.count``: every row, an upper bound when some are inactive), else its
    active members, its pages read through (memory bounded by a page)."""
    counter = getattr(audience, "count", None)
    if callable(counter):
        return int(await counter())
    total, after = 0, None
    while True:
        page = await audience.page(after, page_size)
        if not page:
            return total
        total += sum(1 for member in page if member.active)
        after = page[-1].id


# ---------------------------------------------------------------- settings


def audience_from_spec(spec: Mapping[str, Any], *, field: str = "audience") -> Audience:
    """Build an audience from settings.

    ``{"sql": {"url": "sqlite:///crm.db", "query": "SELECT ..."}}`` or
    ``{"python": "package.module:function"}`` naming a generator function. ``field`` is
    where the settings declare it; errors, also those a run meets later, name it.
    """
    if not isinstance(spec, Mapping):
        raise ConfigurationError(field, "must be a table with 'sql' or 'python'")
    kinds = [key for key in ("sql", "python") if key in spec]
    unknown = sorted(str(key) for key in spec if key not in ("sql", "python"))
    if unknown:
        raise ConfigurationError(
            field, f"unknown key(s) {', '.join(unknown)}; use 'sql' or 'python'")
    if len(kinds) != 1:
        raise ConfigurationError(field, "needs exactly one of 'sql' or 'python'")
    if kinds[0] == "sql":
        sql = spec["sql"]
        if not isinstance(sql, Mapping):
            raise ConfigurationError(f"{field}.sql", "must be a table with 'url' and 'query'")
        unknown = sorted(str(key) for key in sql if key not in ("url", "query"))
        if unknown:
            # A misspelt key would otherwise be ignored without a word.
            raise ConfigurationError(
                f"{field}.sql", f"unknown key(s) {', '.join(unknown)}; use 'url' and 'query'")
        for key in ("url", "query"):
            if not isinstance(sql.get(key), str):
                raise ConfigurationError(f"{field}.sql.{key}",
                                         "is required and must be a string")
        return SqlAudience(sql["url"], sql["query"], field=f"{field}.sql")
    return GeneratorAudience(_import_callable(spec["python"], f"{field}.python"))


def _import_callable(path: Any, field: str) -> Callable[[], Iterable[Recipient]]:
    if not isinstance(path, str) or path.count(":") != 1:
        raise ConfigurationError(
            field, f"{path!r} is not an import path like 'package.module:function'")
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(
            field, f"{path!r} is not an import path like 'package.module:function'")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # the user's module may fail in any way while importing
        raise ConfigurationError(
            field, f"cannot import {module_name!r} for {path!r}: "
                               f"{type(exc).__name__}: {exc}") from exc
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigurationError(
                field, f"{path!r}: {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ConfigurationError(field, f"{path!r} is not callable")
    source: Callable[[], Iterable[Recipient]] = target
    return source


# ---------------------------------------------------------------- shared checks


def _check_limit(limit: int) -> None:
    if not isinstance(limit, int) or limit < 1:
        raise InvalidInput("limit", f"must be a positive integer, got {limit!r}")


def _check_recipient(recipient: object, source: Callable[[], str]) -> None:
    """Refuse what is not a Recipient with a string id; ``source`` names the audience
    (called only on error: this runs once per member)."""
    if not isinstance(recipient, Recipient):
        raise ConfigurationError(
            "audience", f"{source()} produced {type(recipient).__name__}, expected Recipient")
    if not isinstance(recipient.id, str) or not recipient.id:
        raise ConfigurationError(
            "audience", f"{source()} produced recipient id {recipient.id!r}; ids are non-empty "
                        "strings")


def _callable_name(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{module}:{name}"
